"""GRPO arithmetic against hand-computed values (grpo-peers-notes, section 6b)."""

import math

import pytest
import torch

from utu.rl.losses import (
    clipped_surrogate,
    completion_mask,
    group_advantages,
    grpo_loss,
    k3_kl,
    reduce_loss,
)


def test_group_advantages_known_values():
    a = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    assert torch.allclose(a, torch.tensor([[0.865875, -0.865875, -0.865875, 0.865875]]), atol=1e-6)
    groups = group_advantages(torch.tensor([[1.0, 0.0, 0.5, 0.2], [3.0, 1.0, 2.0, 2.0]]))
    assert torch.allclose(groups.sum(dim=1), torch.zeros(2), atol=1e-6)
    assert torch.equal(group_advantages(torch.tensor([[0.7, 0.7, 0.7]])), torch.zeros(1, 3))  # no NaN
    assert torch.allclose(group_advantages(torch.tensor([[1.0, 0.0]]), "none"), torch.tensor([[0.5, -0.5]]))
    batch = group_advantages(torch.tensor([[1.0, 0.0], [1.0, 1.0]]), "batch")
    assert torch.allclose(batch[1], torch.zeros(2)) and batch[0, 0] > 0


def test_k3_kl_known_value_and_never_negative():
    kl = k3_kl(torch.tensor(math.log(0.5)), torch.tensor(math.log(0.25)))
    assert kl.item() == pytest.approx(0.193147, abs=1e-6)
    generator = torch.Generator().manual_seed(0)
    logp = torch.log(torch.rand(100_000, generator=generator).clamp(min=1e-6))
    ref = torch.log(torch.rand(100_000, generator=generator).clamp(min=1e-6))
    near = logp + (torch.rand(100_000, generator=generator) - 0.5) * 1e-3  # float32 rounding territory
    assert (k3_kl(logp, ref) >= 0).all() and (k3_kl(logp, near) >= 0).all()
    assert torch.all(k3_kl(logp, logp) == 0)


def test_completion_mask_with_pad_equal_to_eos():
    eos = 2
    ids = torch.tensor([[5, 6, eos, eos, eos], [5, eos, eos, eos, eos], [5, 6, 7, 8, 9]])
    assert completion_mask(ids, eos).tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]


def batch(lengths, rewards, total_length=4):
    mask = torch.zeros(len(lengths), total_length)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    logp = torch.full((len(lengths), total_length), -1.0, requires_grad=True)
    advantages = group_advantages(torch.tensor([rewards]))[0]
    return logp, advantages, mask


@pytest.mark.parametrize(
    ("lengths", "rewards", "expected"),
    [
        ([3, 1, 2, 2], [1.0, 0.0, 0.0, 1.0], {"dapo": -0.216469, "bnpo": -0.216469, "grpo": 0.0, "dr_grpo": -0.108234}),
        ([3, 1], [1.0, 0.0], {"dapo": -0.353503, "bnpo": -0.353503, "grpo": 0.0, "dr_grpo": -0.176752}),
    ],
)
def test_each_loss_type_equals_the_hand_computed_value(lengths, rewards, expected):
    logp, advantages, mask = batch(lengths, rewards)
    for loss_type, value in expected.items():
        loss, _ = grpo_loss(logp, logp.detach(), advantages, mask, loss_type=loss_type, max_completion_length=4)
        assert loss.item() == pytest.approx(value, abs=1e-6), loss_type


def test_gradients_of_each_reduction():
    logp, advantages, mask = batch([3, 1, 2, 2], [1.0, 0.0, 0.0, 1.0])
    lengths = mask.sum(dim=1)
    expected = {
        "dapo": -advantages.unsqueeze(1) / lengths.sum() * mask,
        "grpo": -advantages.unsqueeze(1) / (4 * lengths.unsqueeze(1)) * mask,
        "dr_grpo": -advantages.unsqueeze(1) / (4 * 4) * mask,
    }
    for loss_type, grad in expected.items():
        logp.grad = None
        loss, _ = grpo_loss(logp, logp.detach(), advantages, mask, loss_type=loss_type, max_completion_length=4)
        loss.backward()
        assert torch.allclose(logp.grad, grad, atol=1e-6), loss_type
        assert torch.all(logp.grad[mask == 0] == 0)


@pytest.mark.parametrize(
    ("ratio", "advantage", "loss", "has_grad"),
    [(1.5, 1.0, -1.2, False), (0.5, -1.0, 0.8, False), (1.5, -1.0, 1.5, True), (0.5, 1.0, -0.5, True)],
)
def test_clipping_stops_the_gradient_outside_the_band(ratio, advantage, loss, has_grad):
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    per_token, _ = clipped_surrogate(logp, torch.zeros(1, 1), torch.tensor([advantage]), eps_low=0.2)
    per_token.sum().backward()
    assert per_token.item() == pytest.approx(loss, abs=1e-6)
    assert (logp.grad.abs().item() > 0) is has_grad


def test_clip_higher_leaves_room_above():
    logp = torch.tensor([[math.log(1.25)]], requires_grad=True)
    per_token, _ = clipped_surrogate(logp, torch.zeros(1, 1), torch.tensor([1.0]), eps_low=0.2, eps_high=0.28)
    per_token.sum().backward()
    assert per_token.item() == pytest.approx(-1.25) and logp.grad.item() != 0


def test_gradient_accumulation_over_two_micro_batches_equals_one_batch():
    logp, advantages, mask = batch([3, 1, 2, 2], [1.0, 0.0, 0.0, 1.0])
    for loss_type in ("dapo", "dr_grpo", "grpo"):
        logp.grad = None
        whole, _ = grpo_loss(logp, logp.detach(), advantages, mask, loss_type=loss_type, max_completion_length=4)
        whole.backward()
        full_grad = logp.grad.clone()
        logp.grad = None
        items = mask.sum().item()
        for part in (slice(0, 2), slice(2, 4)):
            loss, _ = grpo_loss(
                logp[part],
                logp[part].detach(),
                advantages[part],
                mask[part],
                loss_type=loss_type,
                max_completion_length=4,
                num_items=items,
            )
            # dapo's normaliser is the whole batch's token count; the others average over the 2 micro-batches.
            (loss if loss_type == "dapo" else loss / 2).backward()
        assert torch.allclose(logp.grad, full_grad, atol=1e-7), loss_type


def test_fully_masked_batch_gives_zero_not_nan():
    logp = torch.zeros(2, 3, requires_grad=True)
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        value = reduce_loss(logp, torch.zeros(2, 3), loss_type)
        assert value.item() == 0.0


def test_kl_term_pulls_toward_the_reference():
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    ref = torch.tensor([[math.log(0.25)]])
    loss, metrics = grpo_loss(
        logp, logp.detach(), torch.tensor([0.0]), torch.ones(1, 1), loss_type="dapo", beta=1.0, ref_logp=ref
    )
    loss.backward()
    assert metrics["kl"] == pytest.approx(0.193147, abs=1e-6)
    assert logp.grad.item() > 0  # descending lowers logp toward the reference's smaller probability
