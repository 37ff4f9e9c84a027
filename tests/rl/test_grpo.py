"""The GRPO trainer on a tiny randomly initialised Llama (utu/rl/toy.py): log-probs, updates, learning, resume."""

import copy
import json

import pytest
import torch

from utu.rl.env import GRPOEnv, PromptTemplate
from utu.rl.grpo import LocalGRPO
from utu.rl.losses import group_advantages
from utu.rl.toy import char_tokenizer, tiny_llama
from utu.rl.train import MetricsLog, train
from utu.verify import Verifier, load_verifier

PROMPTS = [[{"role": "user", "content": "ab"}], [{"role": "user", "content": "h0 12 =?"}]]  # unequal lengths


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer()


@pytest.fixture
def model(tokenizer):
    return tiny_llama(len(tokenizer))


def toy_env(batch_size: int = 2) -> GRPOEnv:
    verifier = Verifier(load_verifier("utu.rl.toy:verify_func"), timeout=5)
    questions = [(0, "a", "a"), (1, "aa", "a"), (2, "b", "a"), (3, "ab", "a")]
    return GRPOEnv(questions, PromptTemplate(system="say", user="{question}"), verifier, batch_size=batch_size)


def params(agent: LocalGRPO) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in agent.model.named_parameters()}


@pytest.mark.parametrize("reduce_memory_peak", [False, True])
def test_log_probs_equal_a_manual_loop_over_unpadded_sequences(model, tokenizer, reduce_memory_peak):
    agent = LocalGRPO(
        model, tokenizer, group_size=3, max_new_tokens=12, temperature=0.7, reduce_memory_peak=reduce_memory_peak
    )
    torch.manual_seed(3)
    rollout = agent.get_action(PROMPTS)
    assert tokenizer.pad_token_id == tokenizer.eos_token_id
    logp, _ = agent.log_probs(agent.model, rollout, torch.arange(6))
    assert (logp <= 0).all()
    for row in range(6):
        prompt = rollout.prompt_ids[row][rollout.prompt_mask[row].bool()]  # padding removed
        length = int(rollout.completion_mask[row].sum())
        ids = torch.cat([prompt, rollout.completion_ids[row, :length]])
        for t in range(length):
            with torch.no_grad():
                logits = model(input_ids=ids[None, : len(prompt) + t]).logits[0, -1] / 0.7
            expected = torch.log_softmax(logits, dim=-1)[ids[len(prompt) + t]]
            assert logp[row, t].item() == pytest.approx(expected.item(), abs=1e-5)


def test_completion_texts_stop_at_the_first_eos(model, tokenizer):
    agent = LocalGRPO(model, tokenizer, group_size=4, max_new_tokens=16)
    torch.manual_seed(0)
    rollout = agent.get_action(PROMPTS)
    for row, text in enumerate(t for group in rollout.texts for t in group):
        length = int(rollout.completion_mask[row].sum())
        ended = not rollout.truncated[row]
        body = rollout.completion_ids[row, : length - ended]  # the EOS is in the mask but not in the text
        assert text == tokenizer.decode(body, skip_special_tokens=True)
        assert (body != tokenizer.eos_token_id).all()
        if ended:
            assert rollout.completion_ids[row, length - 1] == tokenizer.eos_token_id
    assert rollout.truncated.any() and not rollout.truncated.all()  # both cases were seen


def capture_gradients(agent: LocalGRPO) -> dict[str, torch.Tensor]:
    """The gradients the optimizer sees at its (single) step, recorded just before it steps."""
    seen: dict[str, torch.Tensor] = {}
    step = agent.optimizer.step

    def recording_step(*args, **kwargs):
        seen.update({n: p.grad.clone() for n, p in agent.model.named_parameters() if p.grad is not None})
        return step(*args, **kwargs)

    agent.optimizer.step = recording_step
    return seen


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_gradient_accumulation_in_learn_equals_one_batch(model, tokenizer, loss_type):
    torch.manual_seed(1)
    base = LocalGRPO(copy.deepcopy(model), tokenizer, group_size=4, max_new_tokens=8)
    rollout = base.get_action(PROMPTS)
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.5, 1.0, 1.0]])
    one = LocalGRPO(copy.deepcopy(model), tokenizer, group_size=4, batch_size=8, loss_type=loss_type, max_new_tokens=8)
    two = LocalGRPO(
        copy.deepcopy(model),
        tokenizer,
        group_size=4,
        batch_size=4,
        gradient_accumulation_steps=2,
        loss_type=loss_type,
        max_new_tokens=8,
    )
    grads_one, grads_two = capture_gradients(one), capture_gradients(two)
    one.learn(rollout, rewards)
    two.learn(rollout, rewards)
    assert grads_one.keys() == grads_two.keys() and grads_one
    for name, g in grads_one.items():
        assert torch.allclose(g, grads_two[name], rtol=1e-4, atol=1e-7), name
    assert any(g.abs().max() > 1e-4 for g in grads_one.values())


def test_zero_variance_groups_are_filtered_and_truncated_completions_masked(model, tokenizer):
    agent = LocalGRPO(model, tokenizer, group_size=4, max_new_tokens=4, lr=0.1, filter_zero_std_groups=True)
    torch.manual_seed(0)
    rollout = agent.get_action(PROMPTS)
    before = params(agent)
    metrics = agent.learn(rollout, torch.ones(2, 4))
    assert metrics["skipped"] == 1.0 and metrics["frac_reward_zero_std"] == 1.0
    assert all(torch.equal(before[k], v) for k, v in params(agent).items())
    assert agent.step == 1

    masked = LocalGRPO(model, tokenizer, group_size=4, max_new_tokens=4, lr=0.1, mask_truncated_completions=True)
    rollout.truncated[:] = True  # as if every completion had been cut at max_new_tokens
    assert masked.learn(rollout, torch.tensor([[1.0, 0, 0, 1], [0, 1, 0, 1]])).get("skipped") == 1.0


def test_kl_reference_is_the_frozen_base(model, tokenizer):
    assert LocalGRPO(copy.deepcopy(model), tokenizer, beta=0.0).reference is None  # beta 0: no reference model
    full = LocalGRPO(copy.deepcopy(model), tokenizer, beta=0.1, group_size=4, max_new_tokens=8, lr=0.05)
    assert full.reference is not None
    lora = LocalGRPO(
        copy.deepcopy(model), tokenizer, beta=0.1, group_size=4, max_new_tokens=8, lr=0.05, lora={"r": 4, "alpha": 8}
    )
    assert lora.reference is None  # the base with the adapter disabled
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.5, 1.0, 1.0]])
    for agent in (full, lora):
        torch.manual_seed(2)
        rollout = agent.get_action(PROMPTS)
        assert agent.learn(rollout, rewards)["kl"] == 0.0  # identical to the reference before any update
        torch.manual_seed(2)
        rollout = agent.get_action(PROMPTS)
        assert agent.learn(rollout, rewards)["kl"] > 0.0
    watched = LocalGRPO(
        copy.deepcopy(model), tokenizer, beta=0.0, group_size=4, max_new_tokens=8, lr=0.05, lora={"r": 4, "alpha": 8}
    )
    kls = []
    for _ in range(2):  # beta 0 under LoRA: KL to the start is still logged (a free diagnostic), not optimised
        torch.manual_seed(2)
        kls.append(watched.learn(watched.get_action(PROMPTS), rewards)["kl"])
    assert kls[0] == 0.0 and kls[1] > 0.0
    frozen = dict(lora.model.named_parameters())
    assert not any(p.requires_grad for n, p in frozen.items() if "lora_" not in n)


@pytest.mark.parametrize(
    "knobs",
    [
        {"loss_type": "dapo"},
        {"loss_type": "grpo"},
        {"loss_type": "dr_grpo", "scale_rewards": "none"},
        {"loss_type": "bnpo", "update_epochs": 2, "batch_size": 8},
    ],
    ids=["dapo", "grpo", "dr_grpo-none", "bnpo-2-epochs"],
)
async def test_a_tiny_model_learns_the_toy_task(model, tokenizer, tmp_path, knobs):
    """Reward = share of 'a' in the completion; 1/26 per character at random."""
    agent = LocalGRPO(model, tokenizer, group_size=8, lr=0.03, max_new_tokens=8, **{"batch_size": 16, **knobs})
    rewards: list[float] = []
    metrics = MetricsLog(tmp_path / "metrics.jsonl", tensorboard=False)
    await train(agent, toy_env(), steps=30, metrics=metrics, on_step=lambda m: rewards.append(m["reward"]))
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert last > first + 0.3, (first, last)
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 30


def test_a_resumed_log_drops_the_steps_made_after_the_checkpoint(tmp_path):
    """A run killed at step 5 with its checkpoint at step 3 makes steps 4 and 5 again: each step once in the log."""
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"step": i, "reward": 0.1}) + "\n" for i in range(1, 6)) + '{"step": 6, "rew')
    log = MetricsLog(path, tensorboard=False, resumed_at=3)
    log.write({"step": 4, "reward": 0.2})
    assert [json.loads(line)["step"] for line in path.read_text().splitlines()] == [1, 2, 3, 4]
    MetricsLog(path, tensorboard=False, resumed_at=0)  # killed before its first checkpoint: it starts over
    assert path.read_text() == ""
    path.write_text('{"step": 1}\n')
    MetricsLog(path, tensorboard=False).write({"step": 2})  # no resume step: appended, as AgileRL's log is
    assert path.read_text().count("step") == 2


def test_tensorboard_shows_each_step_once_after_a_resume(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricsLog(tmp_path / "metrics.jsonl")
    for step in range(1, 6):
        log.write({"step": step, "reward": 0.1})
    log.close()
    log = MetricsLog(tmp_path / "metrics.jsonl", resumed_at=3)  # steps 4 and 5 made again
    for step in (4, 5):
        log.write({"step": step, "reward": 0.9})
    log.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, round(e.value, 1)) for e in events.Scalars("reward")] == [
        (1, 0.1),
        (2, 0.1),
        (3, 0.1),
        (4, 0.9),
        (5, 0.9),
    ]


@pytest.mark.parametrize("lora", [None, {"r": 4, "alpha": 8}], ids=["full", "lora"])
async def test_resumed_run_continues_exactly(model, tokenizer, tmp_path, lora):
    knobs = dict(group_size=4, batch_size=4, update_epochs=2, lr=0.03, max_new_tokens=6, beta=0.05, lora=lora)
    env = toy_env()
    straight = LocalGRPO(copy.deepcopy(model), tokenizer, **knobs)
    await train(straight, env, steps=4, metrics=MetricsLog(tmp_path / "a.jsonl", tensorboard=False))

    first = LocalGRPO(copy.deepcopy(model), tokenizer, **knobs)
    await train(
        first, env, steps=2, metrics=MetricsLog(tmp_path / "b.jsonl", tensorboard=False), checkpoint=tmp_path / "ckpt"
    )
    del first
    torch.manual_seed(12345)  # whatever happens in between must not matter
    resumed = LocalGRPO.load(tmp_path / "ckpt")
    assert resumed.step == 2
    await train(resumed, env, steps=4, metrics=MetricsLog(tmp_path / "b.jsonl", tensorboard=False))
    a, b = params(straight), params(resumed)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    if lora is None:  # training moved every weight away from the start
        assert all(not torch.equal(a[k], v) for k, v in dict(model.named_parameters()).items() if k in a)
    else:  # LoRA's B matrices start at zero: training moved them
        trained = [k for k in a if "lora_B" in k]
        assert trained and all(a[k].abs().sum() > 0 for k in trained)


async def test_test_reports_mean_and_pass_and_leaves_sampling_untouched(model, tokenizer, tmp_path):
    agent = LocalGRPO(model, tokenizer, max_new_tokens=6, group_size=8, batch_size=16, lr=0.03)
    env = toy_env()
    # A little training first, so that some completions earn the full reward and some do not.
    await train(agent, env, steps=8, metrics=MetricsLog(tmp_path / "m.jsonl", tensorboard=False))
    torch.manual_seed(7)
    state = torch.get_rng_state()
    result = await agent.test(env, k=3)
    assert torch.equal(state, torch.get_rng_state())  # testing does not change what training samples next

    rollout = agent.get_action([p.messages for p in env.prompts], group_size=3)  # the same draws again
    rewards = await env.rewards.score(env.prompts, rollout.texts)
    assert result["prompts"] == 4
    assert result["Mean@3"] == pytest.approx(rewards.mean().item())
    assert result["Pass@3"] == pytest.approx((rewards >= 1).any(dim=1).float().mean().item())
    assert 0 < result["Mean@3"] < 1


def test_advantages_feed_learn_group_major(model, tokenizer):
    """Row i*G+g of a rollout is completion g of prompt i, the layout group_advantages().flatten() assumes."""
    agent = LocalGRPO(model, tokenizer, group_size=3, max_new_tokens=4)
    rollout = agent.get_action(PROMPTS)
    assert len(rollout.texts) == 2 and all(len(g) == 3 for g in rollout.texts)
    for row in range(6):
        assert torch.equal(rollout.prompt_ids[row], rollout.prompt_ids[row - row % 3])
    assert group_advantages(torch.tensor([[1.0, 0.0, 0.0]])).flatten().shape == (3,)
