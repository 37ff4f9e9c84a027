"""The whole batch of one GRPO update, seen the same way by every process of a multi-process run.

Under `accelerate launch` process r of W holds prompts r, r + W, r + 2W, ... of the step's batch (the split in
`train.train_step`), so its local prompt j is global prompt j * W + r. The per-row numbers an update needs
(reward, length, truncation, masked tokens) are summed across processes into tensors every process holds in
full. From them each process derives the same advantages (a batch-wide std sees every group), the same
micro-batch schedule and the same loss denominators, and computes the loss of its own rows only. DDP then
averages the gradients over the W processes, so each process multiplies its loss by W: the update equals the
one a single process makes on the whole batch (tests/rl/test_multiprocess.py checks it).
"""

from dataclasses import dataclass

import torch
from accelerate import Accelerator
from torch import Tensor


def sum_across_processes(accelerator: Accelerator, tensor: Tensor) -> Tensor:
    return accelerator.reduce(tensor, reduction="sum") if accelerator.num_processes > 1 else tensor


@dataclass
class GlobalBatch:
    world: int  # W processes
    rank: int  # this process
    group_size: int  # G
    prompts: int  # global prompts N
    rewards: Tensor  # (N, G)
    lengths: Tensor  # (N * G,) completion tokens up to the first EOS
    truncated: Tensor  # (N * G,) bool
    tokens: Tensor  # (N * G,) tokens that count in the loss (after masking truncated completions)
    mine: Tensor  # (local rows,) the global row of each local row

    @classmethod
    def gather(
        cls, accelerator: Accelerator, rewards: Tensor, lengths: Tensor, truncated: Tensor, tokens: Tensor
    ) -> "GlobalBatch":
        """`rewards` (local prompts, G); the others (local prompts * G,), group-major."""
        world, rank = accelerator.num_processes, accelerator.process_index
        local, g = rewards.shape
        counts = torch.zeros(world, dtype=torch.long)
        counts[rank] = local
        counts = sum_across_processes(accelerator, counts.to(accelerator.device)).cpu()
        prompts = int(counts.sum())
        expected = [len(range(r, prompts, world)) for r in range(world)]
        if counts.tolist() != expected:
            raise ValueError(
                f"processes hold {counts.tolist()} prompts; the interleaved split of {prompts} gives {expected}"
            )
        groups = torch.arange(local) * world + rank
        mine = (groups.repeat_interleave(g) * g + torch.arange(local * g) % g).long()
        table = torch.zeros(prompts * g, 4)
        local_rows = torch.stack([rewards.flatten(), lengths, truncated, tokens], dim=1).float().cpu()
        table[mine] = local_rows
        table = sum_across_processes(accelerator, table.to(accelerator.device)).cpu()
        return cls(
            world, rank, g, prompts, table[:, 0].view(prompts, g), table[:, 1], table[:, 2] > 0, table[:, 3], mine
        )

    def local_rows(self, rows: Tensor) -> Tensor:
        """The local indices of those global `rows` this process holds (in the given order)."""
        groups = rows // self.group_size
        own = rows[groups % self.world == self.rank]
        return (own // self.group_size // self.world) * self.group_size + own % self.group_size
