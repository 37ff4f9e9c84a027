"""Multi-process parity: the same GRPO updates made by one process on a whole batch, or by several processes
that each hold part of its prompts (as `train_step` splits them). Run by tests/rl/test_multiprocess.py in the
test process (one process) and under `accelerate launch --multi_gpu --num_processes 2` (two processes):

    python tests/rl/parity_cases.py OUT_DIR      # writes OUT_DIR/<case>.pt: the trained parameters

Rollouts are fixed random token sequences, not samples, so both runs learn from exactly the same data.
"""

import sys
from pathlib import Path

import torch
from accelerate import Accelerator

from utu.rl.grpo import LocalGRPO, Rollout
from utu.rl.toy import char_tokenizer, tiny_llama

PROMPTS, G, STEPS, MAX_NEW = 6, 4, 3, 6
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def cases() -> dict[str, dict]:
    """name -> trainer knobs; batch sizes are global (all processes' rows per micro-batch)."""
    out = {}
    for loss in LOSS_TYPES:
        for lora in (False, True):
            tag = f"{loss}{'_lora' if lora else ''}"
            common = {"loss_type": loss, "lora": {"r": 4} if lora else None}
            out[f"{tag}_one_batch"] = {**common, "batch_size": PROMPTS * G}
            # micro-batches of one group each (so every micro-batch lives on one process), two per step
            out[f"{tag}_accumulated"] = {**common, "batch_size": G, "gradient_accumulation_steps": 2}
        # multi-turn completions: tool results inside them are context, out of the loss and its denominators
        out[f"{loss}_tools"] = {"loss_type": loss, "batch_size": G, "gradient_accumulation_steps": 2, "tools": True}
    out["dapo_kl_filtered_two_epochs"] = {
        "loss_type": "dapo",
        "batch_size": 2 * G,
        "beta": 0.04,
        "filter_zero_std_groups": True,
        "mask_truncated_completions": True,
        "update_epochs": 2,
        "scale_rewards": "batch",
    }
    return out


def global_rollout(step: int, tokenizer, tools: bool = False) -> tuple[Rollout, torch.Tensor]:
    """A fixed batch for `step`: prompts of unequal length, completions with and without EOS, rewards with a
    zero-variance group; with `tools`, tokens 2 and 3 of the longer completions are a tool's result."""
    gen = torch.Generator().manual_seed(100 + step)
    texts = ["a" * (1 + i % 3) + "b" * (i % 2) for i in range(PROMPTS)]
    enc = tokenizer([f"say\n{t}\n>" for t in texts], return_tensors="pt", padding=True, add_special_tokens=False)
    vocab, eos = len(tokenizer), tokenizer.eos_token_id
    completions = torch.randint(2, vocab, (PROMPTS * G, MAX_NEW), generator=gen)
    ends = torch.randint(0, MAX_NEW + 2, (PROMPTS * G,), generator=gen)  # >= MAX_NEW: truncated
    for row, end in enumerate(ends.tolist()):
        if end < MAX_NEW:
            completions[row, end:] = eos
    from utu.rl.losses import completion_mask

    mask = completion_mask(completions, eos)
    truncated = ~(completions == eos).any(dim=1)
    rewards = torch.rand(PROMPTS, G, generator=gen).round()
    rewards[1] = 1.0  # no signal in this group
    ids, attention = enc["input_ids"].repeat_interleave(G, 0), enc["attention_mask"].repeat_interleave(G, 0)
    model_mask = None
    if tools:
        model_mask = mask.clone()
        model_mask[mask.sum(dim=1) > 4, 2:4] = 0
    groups = [[""] * G for _ in range(PROMPTS)]
    return Rollout(ids, attention, completions, mask, truncated, groups, model_mask=model_mask), rewards


def local_part(rollout: Rollout, rewards: torch.Tensor, rank: int, world: int) -> tuple[Rollout, torch.Tensor]:
    """Prompts rank, rank + world, ... (train_step's split), each with its G rows."""
    prompts = torch.arange(rank, PROMPTS, world)
    rows = (prompts.repeat_interleave(G) * G + torch.arange(len(prompts) * G) % G).long()
    part = Rollout(
        rollout.prompt_ids[rows],
        rollout.prompt_mask[rows],
        rollout.completion_ids[rows],
        rollout.completion_mask[rows],
        rollout.truncated[rows],
        [[""] * G for _ in prompts],
        model_mask=None if rollout.model_mask is None else rollout.model_mask[rows],
    )
    return part, rewards[prompts]


def run_case(accelerator: Accelerator, knobs: dict, steps: int = STEPS) -> dict[str, torch.Tensor]:
    """Train `steps` steps on the fixed batches; the trainable parameters afterwards, and each step's loss and
    gradient norm under "metrics/<step>/<name>" (Adam hides a wrong gradient scale; these do not)."""
    tokenizer = char_tokenizer()
    world, rank = accelerator.num_processes, accelerator.process_index
    knobs = {**knobs, "batch_size": knobs["batch_size"] // world}  # per process, as Accelerate counts it
    tools = knobs.pop("tools", False)
    agent = LocalGRPO(
        tiny_llama(len(tokenizer), seed=0),
        tokenizer,
        accelerator=accelerator,
        group_size=G,
        lr=1e-3,
        max_new_tokens=MAX_NEW,
        **knobs,
    )
    seen = {}
    for step in range(steps):
        batch = global_rollout(step, tokenizer, tools=tools)
        metrics = agent.learn(*local_part(*batch, rank, world))
        seen |= {f"metrics/{step}/{k}": torch.tensor(metrics[k]) for k in ("loss", "grad_norm", "reward")}
    model = accelerator.unwrap_model(agent.model)
    return seen | {k: v.detach().clone() for k, v in model.named_parameters() if v.requires_grad}


def main(out: Path) -> None:
    accelerator = Accelerator(cpu=True)
    for name, knobs in cases().items():
        params = run_case(accelerator, knobs)
        if accelerator.is_main_process:
            torch.save(params, out / f"{name}.pt")
    accelerator.wait_for_everyone()
    accelerator.state.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
