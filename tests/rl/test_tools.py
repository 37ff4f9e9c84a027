"""GRPO with tools (utu/rl/turns.py, tool_chat.py): multi-turn rollouts on a tiny Llama, tool results masked out
of the loss, tool failures and timeouts as results, the calls of a round run together."""

import asyncio
import copy
import json
import math

import pytest
import torch

from tests.rl.tool_cases import Broken, Fixed, Together, call, turn_ender
from utu.config.models import ToolkitConfig
from utu.rl.env import GRPOEnv, PromptTemplate
from utu.rl.grpo import LocalGRPO, Rollout
from utu.rl.losses import group_advantages
from utu.rl.tool_chat import ToolChat
from utu.rl.toy import char_tokenizer
from utu.rl.train import train_step
from utu.rl.turns import sample_turns
from utu.tools.functions import FunctionToolkit
from utu.tools.runner import ToolRunner
from utu.verify import Verifier, load_verifier

PROMPTS = [[{"role": "user", "content": "ab"}], [{"role": "user", "content": "h0 12 =?"}]]


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer()


def always_calls(name: str = "look"):
    """A reading of replies under which every turn calls `name` (the toy alphabet cannot write JSON)."""
    return lambda text: [call(name)]


def chat_for(tokenizer, toolkit, max_turns: int = 2) -> ToolChat:
    return ToolChat(tokenizer, ToolRunner([toolkit]), max_turns=max_turns, read_calls=always_calls())


def agent_for(tokenizer, seed: int = 0, **knobs) -> LocalGRPO:
    knobs = {"group_size": 3, "max_new_tokens": 12, **knobs}
    return LocalGRPO(turn_ender(len(tokenizer), seed), tokenizer, **knobs)


def segments(rollout: Rollout, row: int) -> list[tuple[int, list[int]]]:
    """A completion as (role, tokens) runs: 1 the model's, 0 a tool result's."""
    length = int(rollout.completion_mask[row].sum())
    ids, roles = rollout.completion_ids[row, :length].tolist(), rollout.model_mask[row, :length].tolist()
    runs: list[tuple[int, list[int]]] = []
    for token, role in zip(ids, roles, strict=True):
        if runs and runs[-1][0] == role:
            runs[-1][1].append(token)
        else:
            runs.append((role, [token]))
    return runs


async def test_a_completion_is_turns_and_tool_results_and_only_the_turns_are_the_models(tokenizer):
    torch.manual_seed(0)
    toolkit = Fixed("7")
    chat = chat_for(tokenizer, toolkit, max_turns=3)
    agent = agent_for(tokenizer, max_new_tokens=30)
    rollout = await agent.sample(PROMPTS, chat)
    result = chat.result_ids(["7"])
    assert tokenizer.decode(result) == "\n7\n>"  # the toy template's tool message and generation prompt
    eos = tokenizer.eos_token_id
    for row in range(6):
        runs = segments(rollout, row)
        model_turns = [tokens for role, tokens in runs if role == 1]
        assert [tokens for role, tokens in runs if role == 0] == [result] * (len(model_turns) - 1)
        assert all(t[-1] == eos for t in model_turns[:-1])  # each turn that called a tool ended with its EOS
        assert rollout.turns[row] == len(model_turns) <= 3
        assert len(rollout.tool_logs[row]) == len(model_turns) - 1
        finished = model_turns[-1][-1] == eos
        assert bool(rollout.truncated[row]) is (not finished)
        assert rollout.texts[row // 3][row % 3] == tokenizer.decode(model_turns[-1], skip_special_tokens=True)
    assert toolkit.calls == sum(len(log) for log in rollout.tool_logs) > 0
    assert (rollout.turns == 3).any()  # the EOS-prone model reaches the turn limit within 30 tokens
    assert set(rollout.seconds) == {"prefill", "decode", "tools", "results"}


async def test_each_row_sees_its_own_compact_sequence_across_turns(tokenizer):
    """The log-prob of every token the model wrote, as sampled, equals the one a single forward pass over that
    row's unpadded [prompt; turns; results] gives: rows that waited while others wrote, the padding in the
    cache and the appended results change nothing (what training recomputes is what was sampled)."""
    torch.manual_seed(1)
    model = turn_ender(len(tokenizer), seed=2).eval()
    chat = chat_for(tokenizer, Fixed("12"), max_turns=3)
    tokenizer.padding_side = "left"  # as LocalGRPO sets it
    enc = tokenizer([chat.prompt(m) for m in PROMPTS], return_tensors="pt", padding=True, add_special_tokens=False)
    grad_modes = []
    model.register_forward_hook(lambda *_: grad_modes.append(torch.is_grad_enabled()))
    turns = await sample_turns(
        model, chat, enc["input_ids"], enc["attention_mask"], 4, max_new_tokens=20, eos_id=0, pad_id=0
    )
    assert grad_modes and not any(grad_modes)  # sampling builds no autograd graph
    first_turns = {int(turns.model_mask[row].argmin()) for row in range(8) if turns.turns[row] > 1}
    assert len(first_turns) > 1  # first turns of different lengths: some rows waited for others
    for row in range(8):
        prompt = enc["input_ids"][row // 4][enc["attention_mask"][row // 4].bool()]
        length = int(turns.attention[row].sum())
        ids = torch.cat([prompt, turns.completion_ids[row, :length]])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids[None]).logits[0, :-1], dim=-1)
        logp = logp.gather(1, ids[1:, None]).squeeze(1)[-length:]
        own = logp[turns.model_mask[row, :length].bool()]
        torch.testing.assert_close(own, torch.tensor(turns.logprobs[row]), rtol=0, atol=1e-4)


def hand_made_rollout(tokenizer, chat: ToolChat) -> Rollout:
    """One prompt, two completions of two turns each, written by hand: "12" EOS | result | "a" EOS and
    "3" EOS | result | "bbb" EOS (pad = EOS in the toy, as in SmolLM2)."""
    enc = tokenizer([chat.prompt(PROMPTS[0])], return_tensors="pt", add_special_tokens=False)
    eos, result = tokenizer.eos_token_id, chat.result_ids(["7"])

    def ids(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    rows = [
        [(1, ids("12") + [eos]), (0, result), (1, ids("a") + [eos])],
        [(1, ids("3") + [eos]), (0, result), (1, ids("bbb") + [eos])],
    ]
    width = max(sum(len(t) for _, t in row) for row in rows)
    completion = torch.full((2, width), eos)
    attention, model_mask = torch.zeros(2, width, dtype=torch.long), torch.zeros(2, width, dtype=torch.long)
    for r, row in enumerate(rows):
        tokens = [t for _, part in row for t in part]
        roles = [role for role, part in row for _ in part]
        completion[r, : len(tokens)] = torch.tensor(tokens)
        attention[r, : len(tokens)] = 1
        model_mask[r, : len(tokens)] = torch.tensor(roles)
    return Rollout(
        enc["input_ids"].repeat(2, 1),
        enc["attention_mask"].repeat(2, 1),
        completion,
        attention,
        torch.zeros(2, dtype=torch.bool),
        [["a", "bbb"]],
        model_mask=model_mask,
    )


def hand_computed_loss(model, rollout: Rollout, rewards: torch.Tensor, loss_type: str, max_new_tokens: int):
    """The on-policy GRPO loss written out: -sum over the model's tokens of A * rho / the loss type's
    normaliser, with rho = exp(logp - logp.detach()) (1 in value, grad log pi in gradient)."""
    advantages = group_advantages(rewards).flatten()
    per_row, counts = [], []
    for row in range(2):
        length = int(rollout.completion_mask[row].sum())
        ids = torch.cat([rollout.prompt_ids[row], rollout.completion_ids[row, :length]])
        logp = torch.log_softmax(model(input_ids=ids[None]).logits[0, :-1].float(), dim=-1)
        logp = logp.gather(1, ids[1:, None]).squeeze(1)[-length:]
        own = rollout.model_mask[row, :length].bool()
        rho = torch.exp(logp[own] - logp[own].detach())
        per_row.append(-(advantages[row] * rho).sum())
        counts.append(int(own.sum()))
    if loss_type == "grpo":
        return sum(p / c for p, c in zip(per_row, counts, strict=True)) / 2
    if loss_type == "dr_grpo":
        return sum(per_row) / (2 * max_new_tokens)
    return sum(per_row) / sum(counts)  # dapo and bnpo: one micro-batch holds every token


@pytest.mark.parametrize("loss_type", ["dapo", "bnpo", "grpo", "dr_grpo"])
def test_a_two_turn_update_equals_the_hand_computed_one_and_never_trains_on_tool_results(tokenizer, loss_type):
    """The gradient of one `learn` equals the formula's over the model's tokens only. Counting the tool result's
    tokens in the loss (or its denominator) gives another gradient, and this test fails."""
    agent = agent_for(tokenizer, group_size=2, max_new_tokens=16, loss_type=loss_type, max_grad_norm=1e9)
    chat = chat_for(tokenizer, Fixed("7"))
    rollout = hand_made_rollout(tokenizer, chat)
    rewards = torch.tensor([[1.0, 0.0]])
    model = agent.accelerator.unwrap_model(agent.model)
    model.train()
    expected_loss = hand_computed_loss(model, rollout, rewards, loss_type, 16)
    expected = torch.autograd.grad(expected_loss, list(model.parameters()))
    seen = {}

    def record_step(*args, **kwargs):
        seen.update({name: p.grad.clone() for name, p in model.named_parameters()})

    agent.optimizer.step = record_step
    metrics = agent.learn(rollout, rewards)
    assert metrics["loss"] == pytest.approx(expected_loss.item(), abs=1e-6)
    for (name, _), grad in zip(model.named_parameters(), expected, strict=True):
        torch.testing.assert_close(seen[name], grad, rtol=1e-4, atol=1e-7, msg=name)
    assert metrics["completions/mean_length"] == pytest.approx((3 + 2 + 2 + 4) / 2)  # model tokens only


async def test_a_failing_tool_is_the_tools_result_and_the_rollout_goes_on(tokenizer):
    torch.manual_seed(0)
    chat = chat_for(tokenizer, Broken())
    rollout = await agent_for(tokenizer).sample(PROMPTS, chat)
    logs = [entry for log in rollout.tool_logs for entry in log]
    assert logs and all(e["error"] == "look failed: RuntimeError: the lookup table is gone" for e in logs)
    error = json.dumps({"error": "look failed: RuntimeError: the lookup table is gone"})
    assert tokenizer.decode(chat.result_ids([error])) in tokenizer.decode(rollout.completion_ids[0])


async def test_a_tool_that_hangs_times_out_as_its_result(tokenizer):
    torch.manual_seed(0)
    toolkit = FunctionToolkit(ToolkitConfig(name="function", function="tests.rl.tool_cases:sleepy", timeout=0.2))
    chat = ToolChat(tokenizer, ToolRunner([toolkit]), max_turns=2, read_calls=always_calls("sleepy"))
    rollout = await asyncio.wait_for(agent_for(tokenizer, group_size=2).sample(PROMPTS[:1], chat), 20)
    logs = [entry for log in rollout.tool_logs for entry in log]
    assert logs and all(e["error"] == "sleepy timed out after 0.2s" for e in logs)


async def test_the_tool_calls_of_a_round_run_concurrently_across_the_batch(tokenizer):
    """Each call returns only once every row's first call has started: run one after another, they time out."""
    torch.manual_seed(0)
    agent = agent_for(tokenizer, group_size=3, min_output_tokens=0)
    toolkit = Together(expected=6)
    chat = chat_for(tokenizer, toolkit)
    rollout = await agent.sample(PROMPTS, chat)
    first_round = [log[0] for log in rollout.tool_logs if log]
    assert len(first_round) == 6 and all(e["error"] is None for e in first_round)


def test_a_tool_the_model_names_wrongly_or_with_bad_arguments_is_an_error_it_reads():
    runner = ToolRunner([Fixed()])
    message, entry = asyncio.run(runner.run(call("nope")))
    assert entry["error"] == "unknown tool 'nope'; available: ['look']" and message["role"] == "tool"
    _, entry = asyncio.run(runner.run(call("look", "[1]")))
    assert entry["error"].startswith("invalid arguments for look")


async def test_a_training_step_with_tools_reports_each_tools_calls_and_rewards(tokenizer):
    torch.manual_seed(0)
    verifier = Verifier(load_verifier("utu.rl.toy:verify_func"), timeout=5)
    questions = [(0, "a", "a"), (1, "b", "a")]
    env = GRPOEnv(questions, PromptTemplate(system="say"), verifier, batch_size=2, tools=chat_for(tokenizer, Fixed()))
    agent = agent_for(tokenizer, lr=1e-3)
    record = await train_step(agent, env)
    calls = record["tools/look/calls"]
    assert calls > 0 and record["tools/look/errors"] == 0
    assert record["turns/mean"] > 1
    assert {"tools/look/reward_using", "tools/look/attempts_using", "tool_time", "results_time"} <= set(record)
    tested = await agent.test(env, k=2)
    assert tested["prompts"] == 2 and [d["index"] for d in tested["per_prompt"]] == [0, 1]
    assert all(len(d["rewards"]) == 2 and len(d["tools"]) == 2 for d in tested["per_prompt"])
    assert any("look" in called for d in tested["per_prompt"] for called in d["tools"])


def test_agilerls_api_takes_an_environment_with_tools(tokenizer):
    """AgileRL's loop unchanged: get_action runs the turns, its action mask marks the model's tokens only (so
    `learn` never trains on a tool result), and env.step scores each completion's last turn."""
    from utu.rl.agilerl import GRPO, HuggingFaceGym

    rows = [{"question": q, "answer": "a"} for q in ("a", "b", "ab", "ba")]
    scored = []

    def reward_fn(completion: str, solution: str, prompt: str) -> float:
        scored.append(completion)
        return float(completion.count("a"))

    template = [{"role": "system", "content": "say"}, {"role": "user", "content": "{question}"}]
    env = HuggingFaceGym(rows[:2], rows[2:], tokenizer, reward_fn, template, data_batch_size_per_gpu=2, tools=[Fixed()])
    env.tools.read_calls = always_calls()  # the toy alphabet cannot write a JSON call
    agent = GRPO(
        env.observation_space,
        env.action_space,
        actor_network=turn_ender(len(tokenizer)),
        pad_token_id=tokenizer.eos_token_id,
        device="cpu",
        group_size=3,
        batch_size=6,
        max_output_tokens=12,
    )
    torch.manual_seed(0)
    prompts = env.reset(reset_dataloaders=True)
    completion_ids, action_masks = agent.get_action(prompts)
    result = env.tools.result_ids(["7"])
    for prompt, ids, mask in zip(prompts, completion_ids, action_masks, strict=True):
        start = prompt["input_ids"].size(1)
        for row in range(3):
            tokens, actions = ids[row, start:].tolist(), mask[row, start - 1 :].tolist()
            first_end = tokens.index(tokenizer.eos_token_id)
            if not actions[first_end + 1]:  # a tool result follows the first turn: context, not actions
                assert tokens[first_end + 1 : first_end + 1 + len(result)] == result
                assert not any(actions[first_end + 1 : first_end + 1 + len(result)])
    rollout = agent._rollout_from(completion_ids, action_masks)
    assert rollout.model_mask is not None and rollout.model_mask.sum() < rollout.completion_mask.sum()
    _, rewards = env.step(completion_ids)
    assert rewards.shape == (2, 3) and len(scored) == 6
    assert not any(tokenizer.decode(result) in text for text in scored)  # the last turn, not the transcript
    loss, _ = agent.learn((completion_ids, action_masks, rewards))
    assert math.isfinite(loss)


def test_a_chat_template_that_cannot_show_tool_results_is_refused_before_training(tokenizer):
    from utu.errors import ConfigError

    strict = copy.deepcopy(tokenizer)
    strict.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}"
        "{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}>{% endif %}"
    )
    with pytest.raises(ConfigError, match="cannot show tool results: no tool role"):
        ToolChat(strict, ToolRunner([Fixed()]))


def test_a_tool_result_never_makes_a_special_token(tokenizer):
    """A tool that prints the EOS text ("<eos>" here, "<|im_end|>" for Qwen) must not end a turn in what the
    model is trained on: only the template's own scaffolding keeps its special tokens."""
    chat = chat_for(tokenizer, Fixed())
    assert tokenizer.eos_token_id in tokenizer("7<eos>8", add_special_tokens=False)["input_ids"]
    assert tokenizer.eos_token_id not in chat.result_ids(["7<eos>8"])


def test_a_toolkit_returning_a_value_instead_of_text_gives_its_json():
    class Valued(Fixed):
        async def call(self, name, arguments):
            return {"value": 7}

    message, entry = asyncio.run(ToolRunner([Valued()]).run(call("look")))
    assert message["content"] == '{"value": 7}' and entry["error"] is None


def test_agilerls_gym_refuses_tools_it_could_not_show_the_model(tokenizer):
    from utu.rl.agilerl import HuggingFaceGym

    rows = [{"question": "a", "answer": "a"}, {"question": "b", "answer": "a"}]
    started = [{"role": "user", "content": "{question}"}, {"role": "assistant", "content": "<think>"}]
    with pytest.raises(ValueError, match="tools need the prompt made from conversation_template"):
        HuggingFaceGym(rows, rows, tokenizer, lambda *a: 0.0, started, tools=[Fixed()])
