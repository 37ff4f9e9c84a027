"""utu.rl.agilerl: AgileRL's GRPO API on our trainer. The first test is AgileRL's documented training loop
(reference: ../shared/reference/agilerl-grpo-api.txt and its tutorial's loop) with only its imports changed,
plus device="cpu" (the example says "cuda:0"; this machine has no GPU) and the toy model and task."""

import json
import math
from pathlib import Path

import pytest
import torch

from utu.config.rl import DEFAULT_SYSTEM_PROMPT
from utu.rl.grpo import LearningRateFactor
from utu.rl.toy import char_tokenizer, reward, tiny_llama

# was: from agilerl.algorithms import GRPO; from agilerl.utils.llm_utils import HuggingFaceGym
from utu.rl.agilerl import GRPO, CosineLRScheduleConfig, HuggingFaceGym  # isort: skip

ROOT = Path(__file__).resolve().parents[2]
ROWS = [json.loads(line) for line in (ROOT / "dataset" / "rl_toy.jsonl").read_text().splitlines()]
TEMPLATE = [{"role": "system", "content": "say"}, {"role": "user", "content": "{question}"}]


def create_model():
    return tiny_llama(len(char_tokenizer()), seed=0)


def create_tokenizer():
    return char_tokenizer()


def reward_fn(completion: str, solution: str, prompt: str) -> float:
    return reward(completion, solution)


def make_env(tokenizer, **kw) -> HuggingFaceGym:
    return HuggingFaceGym(
        train_dataset=ROWS[:6],
        test_dataset=ROWS[6:],
        tokenizer=tokenizer,
        reward_fn=reward_fn,
        conversation_template=TEMPLATE,
        data_batch_size_per_gpu=2,
        **kw,
    )


def make_agent(env, tokenizer, model=None, **kw) -> GRPO:
    knobs = {"batch_size": 8, "group_size": 8, "lr": 0.03, "update_epochs": 1, "max_output_tokens": 8} | kw
    return GRPO(
        env.observation_space,
        env.action_space,
        actor_network=model or create_model(),
        pad_token_id=tokenizer.eos_token_id,
        device="cpu",
        **knobs,
    )


def test_the_documented_training_loop_learns_the_toy_task(tmp_path):
    model = create_model()
    tokenizer = create_tokenizer()
    env = make_env(tokenizer)
    agent = GRPO(
        env.observation_space,
        env.action_space,
        actor_network=model,
        pad_token_id=tokenizer.eos_token_id,
        device="cpu",
        batch_size=8,
        group_size=8,
        reduce_memory_peak=True,
        lr=0.03,
        update_epochs=1,
        max_output_tokens=8,
    )
    before = agent.test(env, loop=1)
    prompts = env.reset(reset_dataloaders=True)
    losses = []
    for _ in range(30):
        completion_ids, action_masks = agent.get_action(prompts)
        next_prompts, rewards = env.step(completion_ids)
        experiences = (completion_ids, action_masks, rewards)
        loss, kl = agent.learn(experiences)
        losses.append(loss)
        prompts = next_prompts
    after = agent.test(env, loop=1)
    print(f"toy reward before {before:.3f}, after {after:.3f}")
    assert after > before + 0.3, (before, after)
    assert kl >= 0 and any(abs(x) > 0 for x in losses)

    checkpoint_path = tmp_path / "checkpoint"
    agent.save_checkpoint(checkpoint_path)
    loaded = GRPO.load(checkpoint_path)
    assert loaded.trainer.step == 30
    plain, again = agent.unwrap_models().state_dict(), loaded.unwrap_models().state_dict()
    assert all(torch.equal(plain[k], again[k]) for k in plain)


def test_get_action_masks_exactly_the_generated_tokens_and_learn_reads_them_back():
    tokenizer = create_tokenizer()
    env = make_env(tokenizer)
    agent = make_agent(env, tokenizer, group_size=4)
    prompts = env.reset()
    completion_ids, action_masks = agent.get_action(prompts)
    assert len(completion_ids) == len(prompts) == 2
    for prompt, ids, mask in zip(prompts, completion_ids, action_masks, strict=True):
        length = prompt["input_ids"].size(1)
        assert ids.shape == (4, length + 8) and mask.shape == (4, length + 7)
        assert torch.equal(ids[:, :length], prompt["input_ids"].expand(4, -1))
        assert not mask[:, : length - 1].any()  # no prompt token is an action
        for row in range(4):  # actions run from the first generated token to the first EOS, inclusive
            generated = ids[row, length:]
            eos = (generated == tokenizer.eos_token_id).nonzero()
            count = int(eos[0]) + 1 if len(eos) else 8
            assert mask[row, length - 1 :].tolist() == [True] * count + [False] * (8 - count)
    rollout = agent._rollout_from(completion_ids, action_masks)
    assert rollout.completion_mask.sum() == sum(m.sum() for m in action_masks)
    assert torch.equal(rollout.completion_ids[:4], completion_ids[0][:, prompts[0]["input_ids"].size(1) :])
    _, greedy_masks = agent.get_action(prompts, training=False)
    assert all(m.size(0) == 1 for m in greedy_masks)  # testing: one completion per prompt


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"hp_config": object()}, "hp_config"),
        ({"calc_position_embeddings": False}, "calc_position_embeddings"),
        ({"use_vllm": True}, "use_vllm"),
    ],
)
def test_arguments_we_do_not_honour_are_refused_by_name(kwargs, named):
    tokenizer = create_tokenizer()
    env = make_env(tokenizer)
    with pytest.raises(ValueError, match=named):
        make_agent(env, tokenizer, **kwargs)


def test_lora_config_and_cosine_schedule_are_honoured():
    from peft import LoraConfig

    tokenizer = create_tokenizer()
    env = make_env(tokenizer)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    schedule = CosineLRScheduleConfig(num_epochs=10, warmup_proportion=0.2)
    agent = make_agent(env, tokenizer, lora_config=lora, cosine_lr_schedule_config=schedule)
    assert agent.is_lora
    trained = {n for n, p in agent.unwrap_models().named_parameters() if p.requires_grad}
    assert trained and all("lora_" in n and ("q_proj" in n or "v_proj" in n) for n in trained)
    s = agent.trainer.settings
    assert (s.lr_schedule, s.schedule_steps, s.warmup_steps, s.lora.r, s.lora.alpha) == ("cosine", 10, 2, 4, 8)
    factor = LearningRateFactor(s)
    assert [round(factor(k), 6) for k in (0, 1, 2, 6, 10, 12)] == [
        round(1 / 3, 6),
        round(2 / 3, 6),
        1.0,
        round(0.5 * (1 + math.cos(math.pi / 2)), 6),
        0.0,
        0.0,
    ]
    with pytest.raises(ValueError, match="bias"):
        make_agent(env, tokenizer, lora_config=LoraConfig(r=4, bias="all", task_type="CAUSAL_LM"))


def test_clone_is_an_independent_copy_and_load_checkpoint_restores_it(tmp_path):
    tokenizer = create_tokenizer()
    env = make_env(tokenizer)
    agent = make_agent(env, tokenizer, index=1)
    twin = agent.clone(index=7)
    assert (agent.index, twin.index) == (1, 7)
    original = {k: v.clone() for k, v in agent.unwrap_models().state_dict().items()}
    agent.save_checkpoint(tmp_path / "start")
    prompts = env.reset()
    completion_ids, action_masks = twin.get_action(prompts)
    _, rewards = env.step(completion_ids)
    twin.learn((completion_ids, action_masks, rewards))
    assert any(not torch.equal(original[k], v) for k, v in twin.unwrap_models().state_dict().items())
    assert all(torch.equal(original[k], v) for k, v in agent.unwrap_models().state_dict().items())
    twin.load_checkpoint(tmp_path / "start")
    assert twin.index == 1 and twin.trainer.step == 0
    assert all(torch.equal(original[k], v) for k, v in twin.unwrap_models().state_dict().items())


def test_our_data_sets_and_verify_functions_make_the_environment():
    tokenizer = create_tokenizer()
    env = HuggingFaceGym.from_dataset(
        ROOT / "dataset" / "rl_toy.jsonl",
        tokenizer,
        verify="utu.rl.toy:verify_func",
        test_size=2,
        system="say",
        data_batch_size_per_gpu=3,
    )
    assert len(env) == 6
    agent = make_agent(env, tokenizer, group_size=4)
    prompts = env.reset(reset_dataloaders=True)
    completion_ids, _ = agent.get_action(prompts)
    _, rewards = env.step(completion_ids)
    assert rewards.shape == (3, 4)
    for prompt, ids, scores in zip(prompts, completion_ids, rewards, strict=True):
        texts = tokenizer.batch_decode(ids[:, prompt["input_ids"].size(1) :], skip_special_tokens=True)
        assert scores.tolist() == pytest.approx([reward_fn(t, prompt["answer"], "") for t in texts])
    with pytest.raises(ValueError, match="'question' and 'answer'"):
        HuggingFaceGym([{"prompt": "x"}], ROWS, tokenizer, reward_fn=reward_fn, conversation_template=TEMPLATE)


def test_the_default_system_prompt_keeps_its_braces_and_a_template_s_stray_braces_are_refused_at_once():
    tokenizer = create_tokenizer()
    env = HuggingFaceGym.from_dataset(
        ROOT / "dataset" / "rl_toy.jsonl", tokenizer, verify="utu.rl.toy:verify_func", test_size=2
    )
    assert env.template is not None and env.template[0]["content"].format(question="q") == DEFAULT_SYSTEM_PROMPT
    stray = [{"role": "system", "content": "Put it in \\boxed{}."}, {"role": "user", "content": "{question}"}]
    with pytest.raises(ValueError, match=r"conversation_template\[0\]: IndexError.*doubled"):
        HuggingFaceGym(ROWS, ROWS, tokenizer, reward_fn=reward_fn, conversation_template=stray)
