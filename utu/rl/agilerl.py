"""AgileRL's GRPO API over our trainer, for people who know it (AgileRL's `agilerl.algorithms.GRPO`, its tutorials).

    from utu.rl.agilerl import GRPO, HuggingFaceGym      # instead of agilerl.algorithms / agilerl.utils.llm_utils

    env = HuggingFaceGym(train_dataset, test_dataset, tokenizer, reward_fn, conversation_template,
                         data_batch_size_per_gpu=8)
    agent = GRPO(env.observation_space, env.action_space, actor_network=model,
                 pad_token_id=tokenizer.eos_token_id, batch_size=8, group_size=8)
    prompts = env.reset(reset_dataloaders=True)
    for _ in range(steps):
        completion_ids, action_masks = agent.get_action(prompts)
        next_prompts, rewards = env.step(completion_ids)
        loss, kl = agent.learn((completion_ids, action_masks, rewards))
        prompts = next_prompts
    fitness = agent.test(env)

Everything runs on `utu.rl.grpo.LocalGRPO` (its losses, prefix sharing, multi-process update and checkpoints), so
the arithmetic is the one tested against TRL. Arguments AgileRL has and we do not honour raise an error that
names them; none is ignored. Rewards: AgileRL's `reward_fn(completion, solution, prompt) -> float`, or any of
our verify functions (`HuggingFaceGym.from_dataset`).
"""

import asyncio
import contextlib
import random
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from utu.config.rl import DEFAULT_SYSTEM_PROMPT
from utu.rl.grpo import LocalGRPO as Trainer
from utu.rl.grpo import Rollout, is_peft, random_state, restore_random_state
from utu.rl.losses import completion_mask


@dataclass(frozen=True)
class TokenSpace:
    """Stands in for AgileRL's gym spaces (token ids in [0, vocab_size)); kept so its constructor calls work."""

    vocab_size: int

    @property
    def shape(self) -> tuple[int]:
        return (1,)


@dataclass(frozen=True)
class CosineLRScheduleConfig:
    """AgileRL's schedule: warm up for `warmup_proportion` of `num_epochs` optimizer steps, then cosine to 0."""

    num_epochs: int
    warmup_proportion: float = 0.05


Prompt = dict[str, Any]  # {"input_ids": (1, L), "attention_mask": (1, L), "question": str, "answer": str}


class HuggingFaceGym:
    """Prompts from a data set, rewards from a function: AgileRL's `HuggingFaceGym`, over any rows with
    `question` and `answer` (a `datasets.Dataset`, a list of dicts, or our data sets via `from_dataset`).

    `reset()` gives the next batch of tokenized prompts; `step(completion_ids)` scores the completions of the
    current batch and gives (next prompts, rewards (prompts, G)). Under several processes each takes prompts
    r, r + W, ... of a global batch of `data_batch_size_per_gpu * W` (the split our trainer's update expects)."""

    def __init__(
        self,
        train_dataset: Sequence[Mapping[str, Any]],
        test_dataset: Sequence[Mapping[str, Any]],
        tokenizer: Any,
        reward_fn: Callable[[str, str, str], float] | None = None,
        conversation_template: list[dict[str, str]] | None = None,
        data_batch_size_per_gpu: int = 8,
        custom_collate_fn: Callable | None = None,
        accelerator: Any = None,
        apply_chat_template_fn: Callable | None = None,
        max_context_length: int | None = None,
        seed: int = 42,
        verifier: Any = None,
        tools: list[Any] | None = None,
        max_turns: int = 4,
    ):
        """Beyond AgileRL's arguments: `verifier` (one of our verify functions, instead of `reward_fn`), and
        `tools` (toolkits, utu.tools.base.Toolkit) with `max_turns`: `GRPO.get_action` then runs each completion
        over several turns in which the model calls them; its action mask marks the model's own tokens only."""
        if custom_collate_fn is not None:
            raise ValueError(
                "HuggingFaceGym: custom_collate_fn is not supported; shape prompts with "
                "conversation_template or apply_chat_template_fn"
            )
        if (reward_fn is None) == (verifier is None):
            raise ValueError("HuggingFaceGym: give exactly one of reward_fn and verifier")
        if (conversation_template is None) == (apply_chat_template_fn is None):
            raise ValueError("HuggingFaceGym: give exactly one of conversation_template and apply_chat_template_fn")
        self.tokenizer, self.reward_fn, self.verifier = tokenizer, reward_fn, verifier
        self.template, self.template_fn = conversation_template, apply_chat_template_fn
        self.batch_size, self.seed = data_batch_size_per_gpu, seed
        self.world = accelerator.num_processes if accelerator is not None else 1
        self.rank = accelerator.process_index if accelerator is not None else 0
        self.max_context_length = max_context_length
        self.tools = None
        if tools and (conversation_template is None or conversation_template[-1]["role"] == "assistant"):
            raise ValueError(
                "HuggingFaceGym: tools need the prompt made from conversation_template, ending with a user or "
                "system message (the tools go into it); apply_chat_template_fn and a started answer cannot show them"
            )
        if tools:
            from utu.rl.tool_chat import ToolChat
            from utu.tools.runner import ToolRunner

            self.tools = ToolChat(tokenizer, ToolRunner(tools), max_turns=max_turns)
        self.splits = {"train": self._rows(train_dataset), "test": self._rows(test_dataset)}
        self.split = "train"
        self.cursor = {"train": 0, "test": 0}
        self.current: list[Prompt] = []
        self.observation_space = TokenSpace(len(tokenizer))
        self.action_space = TokenSpace(len(tokenizer))

    @classmethod
    def from_dataset(
        cls,
        source: str | Path,
        tokenizer: Any,
        verify: str = "math.py",
        test_size: int = 16,
        system: str = DEFAULT_SYSTEM_PROMPT,
        db_url: str | None = None,
        **kwargs: Any,
    ) -> "HuggingFaceGym":
        """One of our data sets (a name in the SQL store, bundled ones load themselves, or a JSONL file), the last
        `test_size` questions held out, rewarded by one of our verify functions (`utu/verify/`)."""
        from utu.rl.env import load_questions
        from utu.verify import Verifier, load_verifier

        path = Path(source)
        file_path = path if path.suffix == ".jsonl" else None
        questions = _run(load_questions(None if file_path else str(source), file_path, db_url))
        if len(questions) <= test_size:
            raise ValueError(f"{source}: {len(questions)} questions leave none for training after test_size")
        rows = [{"question": q, "answer": a or ""} for _, q, a in questions]
        template = [{"role": "system", "content": system}, {"role": "user", "content": "{question}"}]
        verifier = Verifier(load_verifier(verify), timeout=10)
        return cls(
            rows[:-test_size], rows[-test_size:], tokenizer, conversation_template=template, verifier=verifier, **kwargs
        )

    # --- prompts --------------------------------------------------------------------------------------

    def _rows(self, dataset: Sequence[Mapping[str, Any]]) -> list[Prompt]:
        rows = []
        for i, row in enumerate(dataset):
            if "question" not in row or "answer" not in row:
                raise ValueError(f"HuggingFaceGym: row {i} needs 'question' and 'answer' (it has {sorted(row)})")
            prompt: Prompt = {"question": str(row["question"]), "answer": str(row["answer"]), **self._tokenize(row)}
            if self.tools is not None:
                prompt["tools"] = self.tools  # how GRPO.get_action learns of them (it sees only the prompts)
            if self.max_context_length is None or prompt["input_ids"].size(1) <= self.max_context_length:
                rows.append(prompt)
        if not rows:
            raise ValueError("HuggingFaceGym: no rows (or none within max_context_length)")
        return rows

    def _tokenize(self, row: Mapping[str, Any]) -> dict[str, Tensor]:
        if self.template_fn is not None:
            enc = self.template_fn(row["question"], row["answer"], self.tokenizer)
            return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}
        assert self.template is not None  # the other of the two (__init__ checks)
        fill = {"question": row["question"], "answer": row["answer"]}
        messages = [{"role": m["role"], "content": m["content"].format(**fill)} for m in self.template]
        continues = messages[-1]["role"] == "assistant"  # a started answer ("<think>") the model continues
        if self.tools is not None and not continues:
            text = self.tools.prompt(messages)  # the tools in the prompt, as the template (or we) put them
        else:
            text = self.tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=not continues, continue_final_message=continues
            )
        enc = self.tokenizer(text, return_tensors="pt", add_special_tokens=False)
        return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}

    def _next_batch(self) -> list[Prompt]:
        """This process's share of the next global batch; epochs reshuffle with the seed."""
        rows, size = self.splits[self.split], self.batch_size * self.world
        per_epoch = max(1, len(rows) // size)  # a last partial batch is dropped
        epoch, index = divmod(self.cursor[self.split], per_epoch)
        order = list(range(len(rows)))
        if self.split == "train":
            random.Random(f"{self.seed}:{epoch}").shuffle(order)
        batch = [rows[i] for i in order[index * size : (index + 1) * size]]
        self.cursor[self.split] += 1
        return batch[self.rank :: self.world]

    def reset(self, reset_dataloaders: bool = False) -> list[Prompt]:
        if reset_dataloaders:
            self.cursor[self.split] = 0
        for prompt in self.current:  # last turns of completions never scored must not be scored later
            prompt.pop("last_turns", None)
        self.current = self._next_batch()
        return self.current

    def step(self, completion_ids: list[Tensor]) -> tuple[list[Prompt], Tensor]:
        """Rewards (prompts, G) of the current batch's completions (as `GRPO.get_action` returns them: each
        prompt's (G, prompt + completion) ids), then the next batch."""
        if len(completion_ids) != len(self.current):
            raise ValueError(f"step: {len(completion_ids)} groups for {len(self.current)} prompts")
        texts = [
            # with tools, get_action left each completion's last turn: what the verifier reads
            prompt.pop("last_turns", None)
            or self.tokenizer.batch_decode(ids[:, prompt["input_ids"].size(1) :], skip_special_tokens=True)
            for prompt, ids in zip(self.current, completion_ids, strict=True)
        ]
        rewards = self._score(texts)
        self.current = self._next_batch()
        return self.current, rewards

    def _score(self, texts: list[list[str]]) -> Tensor:
        if self.reward_fn is not None:
            scores = [
                [float(self.reward_fn(t, p["answer"], p["question"])) for t in group]
                for p, group in zip(self.current, texts, strict=True)
            ]
            return torch.tensor(scores)
        from utu.rl.env import Prompt as EnvPrompt
        from utu.rl.env import RewardAdapter

        prompts = [EnvPrompt(i, p["question"], p["answer"], []) for i, p in enumerate(self.current)]
        return _run(RewardAdapter(self.verifier).score(prompts, texts))

    @contextlib.contextmanager
    def eval_mode(self) -> Iterator[None]:
        """Inside, `reset` / `step` walk the test set from its start; the training position is kept."""
        saved, self.split = (self.split, self.current), "test"
        self.cursor["test"] = 0
        try:
            yield
        finally:
            self.split, self.current = saved

    def __len__(self) -> int:
        return len(self.splits["train"])


def _run(coroutine: Any) -> Any:
    """Run a coroutine from synchronous code, also when the caller already runs an event loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


# AgileRL arguments with a fixed meaning here: passing another value is refused, naming the argument.
FIXED = {"hp_config": None, "calc_position_embeddings": True}


class GRPO:
    """AgileRL's `GRPO` constructor and methods, over `utu.rl.grpo.LocalGRPO` (`self.trainer`)."""

    def __init__(
        self,
        observation_space: Any,
        action_space: Any,
        actor_network: Any,
        pad_token_id: int | None = None,
        hp_config: Any = None,
        index: int = 0,
        batch_size: int = 64,
        lr: float = 1e-4,
        clip_coef: float = 0.2,
        max_grad_norm: float = 0.5,
        update_epochs: int = 4,
        group_size: int = 8,
        temperature: float = 0.9,
        calc_position_embeddings: bool = True,
        reduce_memory_peak: bool = False,
        min_output_tokens: int | None = 0,
        max_output_tokens: int = 1024,
        beta: float = 0.001,
        lora_config: Any = None,
        cosine_lr_schedule_config: CosineLRScheduleConfig | None = None,
        accelerator: Any = None,
        device: str = "cpu",
        **unsupported: Any,
    ):
        given = {"hp_config": hp_config, "calc_position_embeddings": calc_position_embeddings}
        refused = sorted(unsupported) + [k for k, v in given.items() if v != FIXED[k]]
        if refused:
            raise ValueError(
                f"utu.rl.agilerl.GRPO does not support {', '.join(refused)} "
                "(no evolutionary HPO: hp_config must be None; positions always follow the attention mask)"
            )
        self.observation_space, self.action_space, self.index = observation_space, action_space, index
        knobs: dict[str, Any] = {  # GRPOSettings' fields
            "batch_size": batch_size,
            "lr": lr,
            "clip_coef": clip_coef,
            "max_grad_norm": max_grad_norm,
            "update_epochs": update_epochs,
            "group_size": group_size,
            "temperature": temperature,
            "reduce_memory_peak": reduce_memory_peak,
            "min_output_tokens": min_output_tokens or 0,
            "max_new_tokens": max_output_tokens,
            "beta": beta,
            "lora": _lora_settings(lora_config),
            # AgileRL's GRPO averages per-sequence token means: our "grpo" loss type
            "loss_type": "grpo",
        }
        if cosine_lr_schedule_config is not None:
            c = cosine_lr_schedule_config
            knobs |= {
                "lr_schedule": "cosine",
                "schedule_steps": c.num_epochs,
                "warmup_steps": round(c.warmup_proportion * c.num_epochs),
            }
        self.init_args = {
            "observation_space": observation_space,
            "action_space": action_space,
            "pad_token_id": pad_token_id,
            "device": device,
        }
        self.trainer = Trainer(
            actor_network, None, accelerator=accelerator, device=device, pad_token_id=pad_token_id, **knobs
        )

    # --- acting and learning --------------------------------------------------------------------------

    @property
    def actor(self) -> Any:
        return self.trainer.model

    @property
    def accelerator(self) -> Any:
        return self.trainer.accelerator

    def get_action(self, states: list[Prompt], training: bool = True) -> tuple[list[Tensor], list[Tensor]]:
        """For each prompt, (G, prompt + completion) token ids and the (G, length - 1) action mask that marks
        which next tokens were generated (pads after the EOS are not). `training=False`: one completion each."""
        group = self.trainer.settings.group_size if training else 1
        prompts = [s["input_ids"][0][s["attention_mask"][0].bool()] for s in states]  # without any padding
        prompt_ids, prompt_mask = _left_pad(prompts, self.trainer.pad_id)
        tools = states[0].get("tools")
        if tools is None:
            rollout = self.trainer.rollout(prompt_ids, prompt_mask, group)
        else:
            rollout = _run(self.trainer.rollout_with_tools(prompt_ids, prompt_mask, tools, group))
            for state, texts in zip(states, rollout.texts, strict=True):
                state["last_turns"] = texts
        completions, masks = [], []
        for i, prompt in enumerate(prompts):
            prompt = prompt.to(rollout.completion_ids.device)
            rows = slice(i * group, (i + 1) * group)
            ids = torch.cat([prompt.expand(group, -1), rollout.completion_ids[rows]], dim=1)
            mask = torch.zeros(group, ids.size(1) - 1, dtype=torch.bool, device=ids.device)
            mask[:, len(prompt) - 1 :] = rollout.loss_mask[rows].bool()  # tool results are not actions
            completions.append(ids)
            masks.append(mask)
        return completions, masks

    def learn(self, experiences: tuple[list[Tensor], list[Tensor], Tensor]) -> tuple[float, float]:
        """One GRPO update from (completion_ids, action_masks, rewards (prompts, G)); returns (loss, kl)."""
        completion_ids, action_masks, rewards = experiences
        rollout = self._rollout_from(completion_ids, action_masks)
        metrics = self.trainer.learn(rollout, torch.as_tensor(rewards, dtype=torch.float32))
        return metrics.get("loss", 0.0), metrics.get("kl", 0.0)

    def _rollout_from(self, completion_ids: list[Tensor], action_masks: list[Tensor]) -> Rollout:
        prompts, completions, masks = [], [], []
        for ids, mask in zip(completion_ids, action_masks, strict=True):
            start = int(mask[0].int().argmax()) + 1  # mask[t] marks token t + 1
            prompts.append(ids[0, :start])
            completions.append(ids[:, start:])
            masks.append(mask[:, start - 1 :])
        group = completion_ids[0].size(0)
        prompt_ids, prompt_mask = _left_pad(prompts, self.trainer.pad_id)
        width = max(c.size(1) for c in completions)
        ids = torch.full((len(completions) * group, width), self.trainer.pad_id, dtype=torch.long)
        generated = torch.zeros(len(completions) * group, width)
        for i, (c, m) in enumerate(zip(completions, masks, strict=True)):
            ids[i * group : (i + 1) * group, : c.size(1)] = c.cpu()
            generated[i * group : (i + 1) * group, : m.size(1)] = m.float().cpu()
        eos, device = self.trainer.eos_id, self.accelerator.device
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(group, 0), prompt_mask.repeat_interleave(group, 0)
        single = completion_mask(ids, eos) * generated
        if torch.equal(single, generated):  # one turn each: actions up to the first EOS
            mask, model_mask, truncated = single, None, ~(ids == eos).any(dim=1)
        else:  # turns with tool results between them: every token up to the last action is context
            positions = torch.arange(width)
            last = torch.where(generated.any(dim=1), width - 1 - generated.flip(1).argmax(dim=1), -1)
            mask, model_mask = (positions[None] <= last[:, None]).float(), generated
            truncated = ids.gather(1, last.clamp(min=0)[:, None]).squeeze(1) != eos
        return Rollout(
            prompt_ids.to(device),
            prompt_mask.to(device),
            ids.to(device),
            mask.to(device),
            truncated.to(device),
            [[""] * group for _ in completions],
            model_mask=None if model_mask is None else model_mask.to(device),
        )

    def test(self, env: HuggingFaceGym, loop: int = 1) -> float:
        """Mean reward of one completion per prompt over `loop` batches of the env's test set (AgileRL's
        fitness); every random state is restored afterwards."""
        saved = random_state(self.trainer.shuffle)
        rewards = []
        try:
            with env.eval_mode():
                prompts = env.reset(reset_dataloaders=True)
                for _ in range(loop):
                    completion_ids, _ = self.get_action(prompts, training=False)
                    prompts, scores = env.step(completion_ids)
                    rewards.append(scores.float().mean())
        finally:
            restore_random_state(saved, self.trainer.shuffle)
        return float(torch.stack(rewards).mean())

    def set_training_mode(self, training: bool) -> None:
        self.trainer.model.train(training)

    # --- checkpoints and copies -------------------------------------------------------------------------

    def save_checkpoint(self, path: str | Path) -> None:
        self.trainer.save_checkpoint(path)
        if self.accelerator.is_main_process:
            torch.save({"index": self.index, **self.init_args}, Path(path) / "agilerl.pt")
        self.accelerator.wait_for_everyone()

    def load_checkpoint(self, path: str | Path) -> None:
        """Weights, optimizer, scheduler, step and random state from `path` into this agent."""
        self.trainer = Trainer.load(path, device=self.init_args["device"], accelerator=self.accelerator)
        self.index = torch.load(Path(path) / "agilerl.pt", weights_only=False)["index"]

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", accelerator: Any = None) -> "GRPO":
        extra = torch.load(Path(path) / "agilerl.pt", weights_only=False)
        agent = cls.__new__(cls)
        agent.observation_space, agent.action_space = extra["observation_space"], extra["action_space"]
        agent.index, agent.init_args = extra["index"], {**extra, "device": device}
        agent.init_args.pop("index")
        agent.trainer = Trainer.load(path, device=device, accelerator=accelerator)
        return agent

    def clone(self, index: int | None = None, wrap: bool = True) -> "GRPO":
        """An independent copy (weights, optimizer state, step, random state), through a checkpoint."""
        if not wrap:
            raise ValueError("clone: wrap=False is not supported (models are always prepared by Accelerate)")
        with tempfile.TemporaryDirectory() as tmp:
            self.save_checkpoint(Path(tmp) / "agent")
            copy = GRPO.load(Path(tmp) / "agent", device=self.init_args["device"], accelerator=self.accelerator)
        copy.index = self.index if index is None else index
        return copy

    def unwrap_models(self) -> Any:
        """The plain model (no DDP / DeepSpeed wrapper), e.g. to save it with `save_pretrained`."""
        return self.accelerator.unwrap_model(self.trainer.model)

    def wrap_models(self) -> None:
        """Models are wrapped by Accelerate when the agent is built; nothing is left to wrap."""

    @property
    def is_lora(self) -> bool:
        return is_peft(self.unwrap_models())


def _left_pad(sequences: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, width - len(s) :] = s.cpu()
        mask[i, width - len(s) :] = 1
    return ids, mask


def _lora_settings(config: Any) -> dict | None:
    """A peft `LoraConfig` as our LoRA settings; fields we would not honour are refused by name."""
    if config is None:
        return None
    from peft import LoraConfig

    modules = config.target_modules
    targets = sorted(modules) if isinstance(modules, set | list | tuple) else (modules or "all-linear")
    ours = {"r": config.r, "alpha": config.lora_alpha, "dropout": config.lora_dropout, "target_modules": targets}
    plain = LoraConfig(
        r=config.r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=modules,
        task_type=config.task_type,
    ).to_dict()
    differs = sorted(k for k, v in config.to_dict().items() if plain.get(k) != v)
    if differs:
        raise ValueError(
            f"lora_config: {', '.join(differs)} not supported (only r, lora_alpha, lora_dropout, target_modules)"
        )
    return ours


__all__ = ["GRPO", "CosineLRScheduleConfig", "HuggingFaceGym", "TokenSpace"]
