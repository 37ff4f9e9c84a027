"""The same batch through our loss and through `trl.GRPOTrainer._compute_loss` (TRL is a test-only dependency).

Old and reference log-probs are perturbed away from the current policy, so clipping on both sides and the KL
term are all exercised, not just the on-policy ratio of 1.
"""

import copy
import tempfile

import pytest
import torch
from datasets import Dataset
from trl import GRPOConfig, GRPOTrainer

from utu.rl.grpo import LocalGRPO
from utu.rl.losses import group_advantages
from utu.rl.toy import char_tokenizer, tiny_llama

PROMPTS = [[{"role": "user", "content": "ab"}], [{"role": "user", "content": "h0 12 =?"}]]
MAX_NEW_TOKENS = 6


@pytest.fixture(scope="module")
def world():
    tokenizer = char_tokenizer()
    model = tiny_llama(len(tokenizer))
    folder = tempfile.mkdtemp()
    model.save_pretrained(folder)  # TRL builds its reference model from a path
    tokenizer.save_pretrained(folder)
    agent = LocalGRPO(copy.deepcopy(model), tokenizer, group_size=4, max_new_tokens=MAX_NEW_TOKENS)
    torch.manual_seed(5)
    rollout = agent.get_action(PROMPTS)
    generator = torch.Generator().manual_seed(0)
    logp = agent.log_probs(agent.model, rollout, torch.arange(8))[0].detach()
    old = logp + 0.4 * torch.randn(logp.shape, generator=generator)  # ratios well outside [0.8, 1.2]
    ref = logp + 0.3 * torch.randn(logp.shape, generator=generator)
    return model, tokenizer, folder, rollout, old, ref


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize(("beta", "kl_bias_correction"), [(0.0, False), (0.04, False), (0.04, True)])
def test_loss_equals_trl(world, loss_type, beta, kl_bias_correction):
    model, tokenizer, folder, rollout, old, ref = world
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 0.5, 1.0, 1.0]])
    advantages = group_advantages(rewards).flatten()
    mask = rollout.completion_mask
    knobs = dict(
        group_size=4,
        max_new_tokens=MAX_NEW_TOKENS,
        loss_type=loss_type,
        beta=beta,
        clip_coef_high=0.28,
        kl_bias_correction=kl_bias_correction,
    )
    ours = LocalGRPO(copy.deepcopy(model), tokenizer, **knobs)
    ours.model.train()
    loss, parts = ours.micro_batch_loss(rollout, torch.arange(8), advantages, mask, old, ref)

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=8,
        num_generations=4,
        use_cpu=True,
        max_completion_length=MAX_NEW_TOKENS,
        loss_type=loss_type,
        beta=beta,
        epsilon=0.2,
        epsilon_high=0.28,
        use_bias_correction_kl=kl_bias_correction,
        report_to=[],
        bf16=False,
        gradient_checkpointing=False,
    )
    trl = GRPOTrainer(
        model=folder,
        reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
        args=args,
        train_dataset=Dataset.from_list([{"prompt": "x"}] * 8),
        processing_class=tokenizer,
    )
    trl.model.train()
    trl.current_gradient_accumulation_steps = 1  # set by Trainer.training_step in a real run
    inputs = {
        "prompt_ids": rollout.prompt_ids,
        "prompt_mask": rollout.prompt_mask,
        "completion_ids": rollout.completion_ids,
        "completion_mask": mask,
        "advantages": advantages,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum(),
    }
    if beta:
        inputs["ref_per_token_logps"] = ref
    theirs = trl._compute_loss(trl.model, inputs)
    assert loss.item() == pytest.approx(theirs.item(), abs=1e-5)
    assert parts["clip_ratio/low"] > 0 and parts["clip_ratio/high"] > 0  # both sides of the band were hit
    if beta:
        assert parts["kl"] > 0
