"""The GRPO environment: a data set + a chat prompt template + a verify function.

It yields batches of prompts and, after generation, turns a (prompts x G) grid of completions into a reward
tensor of the same shape, through the very verify functions that practice and evaluation use
(`utu/verify/`), so a reward means the same thing everywhere.
"""

import asyncio
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from sqlalchemy import select

from utu.agents.experience import build_messages
from utu.config.models import AgentConfig
from utu.config.rl import DEFAULT_SYSTEM_PROMPT
from utu.db.dataset_io import answer_text, parse_dataset_file
from utu.db.engine import Database
from utu.db.models import DatasetSample
from utu.errors import RunFailed
from utu.rl.tool_chat import ToolChat
from utu.verify import Verifier

log = logging.getLogger("run_grpo")


@dataclass
class PromptTemplate:
    system: str = DEFAULT_SYSTEM_PROMPT
    user: str = "{question}"
    agent: AgentConfig | None = None  # its instructions and library make the system message instead of `system`

    def messages(self, question: str) -> list[dict[str, Any]]:
        text = self.user.replace("{question}", question)  # not format: "\\boxed{}" is a natural template
        if self.agent is not None:
            return build_messages(self.agent, text)  # as evaluation and practice prompt the agent
        return [{"role": "system", "content": self.system}, {"role": "user", "content": text}]


@dataclass
class Prompt:
    index: int
    question: str
    answer: str | None
    messages: list[dict[str, str]]


class RewardAdapter:
    """Any verify function (sync or async, through `Verifier`) as the trainer's reward: completions -> tensor."""

    def __init__(self, verifier: Verifier):
        self.verifier = verifier

    async def score(self, prompts: list[Prompt], completions: list[list[str]]) -> torch.Tensor:
        """completions[i][g] answers prompts[i]; returns rewards of shape (len(prompts), G)."""
        samples = [
            SimpleNamespace(raw_question=p.question, correct_answer=p.answer, response=c, dataset_index=p.index)
            for p, group in zip(prompts, completions, strict=True)
            for c in group
        ]
        verdicts = await asyncio.gather(*(self.verifier(s) for s in samples))
        failed = [v.error for v in verdicts if v.error is not None]
        if failed and len(failed) == len(verdicts):  # no reward at all: training on it would learn nothing, silently
            raise RunFailed(f"the verify function failed on every completion of the batch ({len(failed)}): {failed[0]}")
        if failed:
            log.warning("the verify function failed on %d of %d completions: %s", len(failed), len(verdicts), failed[0])
        return torch.tensor([v.reward for v in verdicts], dtype=torch.float32).view(len(prompts), -1)


Question = tuple[int, str, str | None]  # (index, question, answer)


async def questions_from_db(db: Database, dataset: str) -> list[Question]:
    async with db.sessions() as s:
        rows = await s.scalars(
            select(DatasetSample).where(DatasetSample.dataset == dataset).order_by(DatasetSample.index)
        )
        return [(r.index, r.question, r.answer) for r in rows]


def questions_from_jsonl(path: Path) -> list[Question]:
    _, lines = parse_dataset_file(path, path.stem)
    return [(i, line.question, answer_text(line.answer)) for i, line in enumerate(lines)]


async def load_questions(dataset: str | None, file_path: Path | None, db_url: str | None = None) -> list[Question]:
    """The questions of a JSONL file, or of a data set in the SQL store (bundled sets are loaded on first use)."""
    if file_path is not None:
        return questions_from_jsonl(file_path)
    assert dataset is not None  # a data set or a file: RLDataConfig asks for exactly one
    from utu.db.dataset_io import ensure_dataset

    async with Database(db_url) as db:
        await db.create_tables()
        await ensure_dataset(db, dataset)
        return await questions_from_db(db, dataset)


class GRPOEnv:
    def __init__(
        self,
        questions: list[Question],
        template: PromptTemplate,
        verifier: Verifier,
        batch_size: int = 4,
        seed: int = 0,
        tools: ToolChat | None = None,
    ):
        """`tools`: the agent's tools; completions then run several turns in which the model calls them."""
        self.prompts = [Prompt(i, q, a, template.messages(q)) for i, q, a in questions]
        self.tools = tools
        self.rewards = RewardAdapter(verifier)
        self.batch_size = batch_size
        self.seed = seed

    @classmethod
    async def from_db(cls, db: Database, dataset: str, template: PromptTemplate, verifier: Verifier, **kw) -> "GRPOEnv":
        return cls(await questions_from_db(db, dataset), template, verifier, **kw)

    @classmethod
    def from_jsonl(cls, path: Path, template: PromptTemplate, verifier: Verifier, **kw) -> "GRPOEnv":
        return cls(questions_from_jsonl(path), template, verifier, **kw)

    def batches(self, epoch: int) -> Iterator[list[Prompt]]:
        order = list(self.prompts)
        random.Random(f"{self.seed}:{epoch}").shuffle(order)
        for start in range(0, len(order), self.batch_size):
            yield order[start : start + self.batch_size]

    def batch_at(self, step: int) -> list[Prompt]:
        """The prompts of training step `step` (0-based): a pure function of the step, so a resumed run
        sees exactly the batches an uninterrupted one would."""
        if not self.prompts:
            raise ValueError("the environment has no prompts")
        per_epoch = -(-len(self.prompts) // self.batch_size)
        epoch, index = divmod(step, per_epoch)
        return list(self.batches(epoch))[index]
