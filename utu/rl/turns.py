"""Multi-turn rollouts with tools: the model writes, a tool call ends its turn, the tools run, their results are
appended, and it writes again, up to the agent's `max_turns`.

The G completions of a prompt share its KV cache, as in `prefix.sample_groups`, and every row keeps its cache
across turns: a turn's tokens and the tool results are appended to it, never recomputed. Rows move at their own
pace: a row that waits (its turn ended) or is done gets padding the attention mask hides, and its position
does not advance, so what each row's tokens see is exactly its own compact sequence
[prompt; turn 1; results 1; turn 2; ...], which is what training recomputes (`prefix.completion_logits`).
Tool results are appended left-padded, so every row's last appended position is real and one logit per row is
kept. The tools of all rows of a round run concurrently, each with its toolkit's timeout.

Only the model's own tokens (each turn's text and its EOS) are actions: `model_mask` marks them; the tool results
are context, attended to but never trained on. `max_new_tokens` caps the model's tokens over all turns.
"""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from utu.rl.prefix import nucleus, prefill_groups
from utu.rl.tool_chat import ToolChat

WRITING, TURN_ENDED, DONE = 0, 1, 2
PHASES = ("prefill", "decode", "tools", "results")  # where a multi-turn rollout's seconds go


@dataclass
class Turns:
    completion_ids: Tensor  # (R, C) right-padded: turn 1, results 1, turn 2, ...
    attention: Tensor  # (R, C) 1 on every real token
    model_mask: Tensor  # (R, C) 1 on the tokens the model wrote
    truncated: Tensor  # (R,) bool: the token budget ran out before the model ended its last turn
    responses: list[str]  # each row's last turn, as the verifier reads it
    tool_logs: list[list[dict[str, Any]]]  # each row's tool calls (utu.tools.runner entries)
    turns: list[int]  # model turns per row
    seconds: dict[str, float]  # per phase (PHASES)
    logprobs: list[list[float]]  # per row, the sampling log-prob of each token the model wrote, in order


async def sample_turns(
    model: Any,
    chat: ToolChat,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    group_size: int,
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    min_new_tokens: int = 0,
) -> Turns:
    """prompt_ids (B, P) left-padded -> B * G multi-turn completions, group-major."""
    device, seconds = prompt_ids.device, dict.fromkeys(PHASES, 0.0)
    # Not a decorator: on a coroutine function, torch.no_grad would end before the body runs.
    forward = torch.no_grad()(model)
    clock = time.perf_counter()
    cache, logits, attention, position = prefill_groups(forward, prompt_ids, prompt_mask, group_size)
    rows = logits.size(0)
    seqs: list[list[int]] = [[] for _ in range(rows)]
    roles: list[list[int]] = [[] for _ in range(rows)]  # 1: the model wrote it; 0: a tool result
    state, used, turns, start = [WRITING] * rows, [0] * rows, [1] * rows, [0] * rows
    truncated, responses = [False] * rows, [""] * rows
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    logs: list[list[dict[str, Any]]] = [[] for _ in range(rows)]
    decode = chat.tokenizer.decode
    seconds["prefill"] = time.perf_counter() - clock
    while True:
        clock = time.perf_counter()
        while WRITING in state:
            writing = torch.tensor([s == WRITING for s in state], device=device)
            scores = logits.float() / temperature
            early = torch.tensor([u < min_new_tokens for u in used], device=device)
            scores[early, eos_id] = float("-inf")
            token = torch.multinomial(torch.softmax(nucleus(scores, top_p), dim=-1), 1).squeeze(1)
            token = torch.where(writing, token, torch.full_like(token, pad_id))
            token_logp = torch.log_softmax(scores, dim=-1).gather(1, token[:, None]).squeeze(1)
            for r in torch.nonzero(writing).flatten().tolist():
                seqs[r].append(int(token[r]))
                logprobs[r].append(float(token_logp[r]))
                roles[r].append(1)
                used[r] += 1
                if token[r] == eos_id:
                    state[r] = TURN_ENDED
                elif used[r] >= max_new_tokens:
                    state[r], truncated[r] = DONE, True
                    responses[r] = decode(seqs[r][start[r] :], skip_special_tokens=True)
            if all(s == DONE for s in state):
                break
            # The step's tokens go into the cache (an ended turn's EOS too: tool results follow it).
            attention = torch.cat([attention, writing.long()[:, None]], dim=1)
            position = position + writing.long()
            out = forward(
                input_ids=token[:, None],
                attention_mask=attention,
                position_ids=position[:, None],
                past_key_values=cache,
                use_cache=True,
            )
            logits = out.logits[:, -1]
        seconds["decode"] += time.perf_counter() - clock
        calling: dict[int, list[dict[str, Any]]] = {}
        for r in (r for r in range(rows) if state[r] == TURN_ENDED):
            text = decode(seqs[r][start[r] : -1], skip_special_tokens=True)  # the turn without its EOS
            calls = chat.read_calls(text) if turns[r] < chat.max_turns and used[r] < max_new_tokens else []
            if calls:
                calling[r] = calls
            else:
                state[r], responses[r] = DONE, text
        if not calling:
            break
        clock = time.perf_counter()
        results = await asyncio.gather(*(_run_calls(chat, calls) for calls in calling.values()))
        seconds["tools"] += time.perf_counter() - clock
        clock = time.perf_counter()
        blocks = {}
        for r, (contents, entries) in zip(calling, results, strict=True):
            logs[r] += entries
            blocks[r] = chat.result_ids(contents)
        width = max(len(b) for b in blocks.values())
        ids = torch.full((rows, width), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((rows, width), dtype=torch.long, device=device)
        block_positions = position[:, None].repeat(1, width)
        for r, block in blocks.items():
            n = len(block)
            ids[r, width - n :] = torch.tensor(block, device=device)
            mask[r, width - n :] = 1
            block_positions[r, width - n :] = position[r] + 1 + torch.arange(n, device=device)
            position[r] += n
            seqs[r] += block
            roles[r] += [0] * n
            state[r], turns[r], start[r] = WRITING, turns[r] + 1, len(seqs[r])
        attention = torch.cat([attention, mask], dim=1)
        out = forward(
            input_ids=ids,
            attention_mask=attention,
            position_ids=block_positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        appended = torch.tensor([r in blocks for r in range(rows)], device=device)
        logits = torch.where(appended[:, None], out.logits[:, -1], logits)
        seconds["results"] += time.perf_counter() - clock
    return Turns(
        *_right_padded(seqs, roles, pad_id, device),
        truncated=torch.tensor(truncated, device=device),
        responses=responses,
        tool_logs=logs,
        turns=turns,
        seconds=seconds,
        logprobs=logprobs,
    )


async def _run_calls(chat: ToolChat, calls: list[dict[str, Any]]) -> tuple[list[str], list[dict[str, Any]]]:
    """One turn's calls, concurrently: their results' texts and tool-log entries, in call order."""
    done = await chat.runner.run_turn(calls)
    return [message["content"] for message, _ in done], [entry for _, entry in done]


def _right_padded(
    seqs: list[list[int]], roles: list[list[int]], pad_id: int, device: Any
) -> tuple[Tensor, Tensor, Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long, device=device)
    attention = torch.zeros((len(seqs), width), dtype=torch.long, device=device)
    model_mask = torch.zeros((len(seqs), width), dtype=torch.long, device=device)
    for r, (seq, role) in enumerate(zip(seqs, roles, strict=True)):
        ids[r, : len(seq)] = torch.tensor(seq, device=device)
        attention[r, : len(seq)] = 1
        model_mask[r, : len(seq)] = torch.tensor(role, device=device)
    return ids, attention, model_mask
