"""AgileRL's `HuggingFaceGym` (since 2.4 `ReasoningGym`): prompts from a data set, rewards from a function or one
of our verify functions, for `utu.rl.agilerl.GRPO`."""

import asyncio
import contextlib
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from utu.config.rl import DEFAULT_SYSTEM_PROMPT


@dataclass(frozen=True)
class TokenSpace:
    """Stands in for AgileRL's gym spaces (token ids in [0, vocab_size)); kept so its constructor calls work."""

    vocab_size: int

    @property
    def shape(self) -> tuple[int]:
        return (1,)


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
        for i, message in enumerate(conversation_template or []):
            try:  # filled by str.format: refused here rather than at the first prompt
                message["content"].format(question="", answer="")
            except (KeyError, IndexError, ValueError) as e:
                raise ValueError(
                    f"HuggingFaceGym: conversation_template[{i}]: {type(e).__name__}: {e}; only {{question}} and "
                    "{answer} are filled in, write other braces doubled ('\\boxed{{}}')"
                ) from None
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
        questions = run_sync(load_questions(None if file_path else str(source), file_path, db_url))
        if len(questions) <= test_size:
            raise ValueError(f"{source}: {len(questions)} questions leave none for training after test_size")
        rows = [{"question": q, "answer": a or ""} for _, q, a in questions]
        # the system message is text, not a template: its braces ("\\boxed{}") are doubled for str.format
        literal = system.replace("{", "{{").replace("}", "}}")
        template = [{"role": "system", "content": literal}, {"role": "user", "content": "{question}"}]
        verifier = Verifier(load_verifier(verify), timeout=10)
        cut = len(rows) - test_size  # (rows[:-0] would be none of them)
        return cls(rows[:cut], rows[cut:], tokenizer, conversation_template=template, verifier=verifier, **kwargs)

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
        return run_sync(RewardAdapter(self.verifier).score(prompts, texts))

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


def run_sync(coroutine: Any) -> Any:
    """Run a coroutine from synchronous code, also when the caller already runs an event loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
