"""GRPO's arithmetic, nanoGPT style: small functions, formulas named as in the papers.

- Advantages (GRPO, arXiv 2402.03300, eq. 3): A_i = (r_i - mean(r)) / (std(r) + eps) within each group of G
  completions of one prompt ("group"); one std for the whole batch ("batch", Dr. GRPO's advice to drop the
  per-group std is "none").
- Clipped surrogate (PPO/GRPO): l_t = -min(rho_t * A, clip(rho_t, 1 - eps_low, 1 + eps_high) * A), with
  rho_t = exp(logp_t - old_logp_t); DAPO's clip-higher is eps_high > eps_low.
- KL penalty: the k3 estimator exp(ref - logp) - (ref - logp) - 1 (Schulman), >= 0, added per token with beta;
  optionally times rho, which makes its gradient the unbiased reverse-KL gradient off-policy (DeepSeek-V3.2,
  arXiv 2512.02556; TRL's use_bias_correction_kl).
- Reductions (`loss_type`), mask m over completion tokens, B sequences, L = max completion length:
    grpo    mean_i( sum_t l*m / sum_t m )        per-sequence mean (length bias; GRPO paper)
    bnpo    sum(l*m) / sum(m)                    token mean over the micro-batch
    dr_grpo sum(l*m) / (B * L)                   constant normaliser (Dr. GRPO, arXiv 2503.20783)
    dapo    sum(l*m) / num_items                 token mean over the whole generation batch (DAPO, arXiv 2503.14476)
"""

import torch
from torch import Tensor

from utu.config.rl import LossType, ScaleRewards


def group_advantages(rewards: Tensor, scale_rewards: ScaleRewards = "group", eps: float = 1e-4) -> Tensor:
    """rewards (prompts, G) -> advantages (prompts, G); std with Bessel's correction, as TRL."""
    centered = rewards - rewards.mean(dim=1, keepdim=True)
    if scale_rewards == "none":
        return centered
    std = rewards.std(dim=1, keepdim=True) if scale_rewards == "group" else rewards.std()
    return centered / (std + eps)


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token KL(pi || pi_ref) estimate, never negative; zero iff logp == ref_logp."""
    delta = ref_logp - logp
    # expm1(d) - d rather than exp(d) - d - 1: the latter rounds below zero for small |d| in float32.
    return torch.expm1(delta) - delta


def completion_mask(completion_ids: Tensor, eos_id: int) -> Tensor:
    """1 up to and including the first EOS, 0 after it. Never derived from pad ids (pad may equal EOS)."""
    is_eos = completion_ids == eos_id
    first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), completion_ids.size(1))
    positions = torch.arange(completion_ids.size(1), device=completion_ids.device)
    return (positions.unsqueeze(0) <= first.unsqueeze(1)).float()


def clipped_surrogate(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, eps_low: float = 0.2, eps_high: float | None = None
) -> tuple[Tensor, Tensor]:
    """Per-token loss -min(rho*A, clip(rho)*A) and rho. logp, old_logp: (B, T); advantages: (B,)."""
    rho = torch.exp(logp - old_logp)
    a = advantages.unsqueeze(1)
    clipped = torch.clamp(rho, 1 - eps_low, 1 + (eps_low if eps_high is None else eps_high))
    return -torch.min(rho * a, clipped * a), rho


def loss_numerator(per_token: Tensor, mask: Tensor, loss_type: LossType) -> Tensor:
    """What `reduce_loss` divides: the sum of per-sequence means (grpo) or of masked tokens (the others)."""
    if loss_type == "grpo":
        return ((per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)).sum()
    if loss_type in ("bnpo", "dr_grpo", "dapo"):
        return (per_token * mask).sum()
    raise ValueError(f"unknown loss_type {loss_type!r}")


def loss_denominator(loss_type: LossType, sequences: float, tokens: float, max_completion_length: int) -> float:
    """What `reduce_loss` divides by, for a batch of `sequences` completions holding `tokens` masked tokens."""
    by_type = {"grpo": sequences, "bnpo": tokens, "dr_grpo": sequences * max_completion_length, "dapo": tokens}
    return max(float(by_type[loss_type]), 1.0)


def reduce_loss(
    per_token: Tensor,
    mask: Tensor,
    loss_type: LossType,
    max_completion_length: int | None = None,
    num_items: float | None = None,
) -> Tensor:
    """The scalar loss of one micro-batch (see the module docstring for each reduction)."""
    tokens = num_items if loss_type == "dapo" and num_items is not None else mask.sum().item()
    length = max_completion_length or per_token.size(1)
    return loss_numerator(per_token, mask, loss_type) / loss_denominator(loss_type, mask.size(0), tokens, length)


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: LossType = "dapo",
    eps_low: float = 0.2,
    eps_high: float | None = None,
    beta: float = 0.0,
    kl_bias_correction: bool = False,
    ref_logp: Tensor | None = None,
    max_completion_length: int | None = None,
    num_items: float | None = None,
    denominator: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Loss of one micro-batch plus metrics (KL, clip fractions). `denominator`: divide the numerator by this
    instead of the micro-batch's own reduction (a trainer normalising over a window or several processes)."""
    per_token, rho = clipped_surrogate(logp, old_logp, advantages, eps_low, eps_high)
    metrics: dict[str, float] = {}
    if beta:
        if ref_logp is None:
            raise ValueError("beta > 0 needs the reference model's log-probs")
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * (kl * rho if kl_bias_correction else kl)
        metrics["kl"] = ((kl * mask).sum() / mask.sum().clamp(min=1)).item()
    high = eps_low if eps_high is None else eps_high
    a = advantages.unsqueeze(1)
    tokens = mask.sum().clamp(min=1)
    metrics["clip_ratio/low"] = (((rho < 1 - eps_low) & (a < 0)).float() * mask).sum().item() / tokens.item()
    metrics["clip_ratio/high"] = (((rho > 1 + high) & (a > 0)).float() * mask).sum().item() / tokens.item()
    if denominator is not None:
        return loss_numerator(per_token, mask, loss_type) / denominator, metrics
    return reduce_loss(per_token, mask, loss_type, max_completion_length, num_items), metrics
