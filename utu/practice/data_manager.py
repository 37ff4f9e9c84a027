"""Practice data: which questions each step works on, and their G attempt rows in `evaluation_data`.

An epoch takes the first `rollout_data_truncate` questions, shuffles them with a seed derived from the
epoch (really shuffled: batches differ between epochs), and cuts them into batches of `batch_size`
questions (the last batch may be smaller). Step numbers run on across epochs. A step may add questions of
the set past the truncation (`reserve`, for `practice.top_up`). Each attempt is a row with
exp_id `<exp_id>_epoch_<e>`, its `step` and `owner` = the practice's exp_id, so a resumed run finds exactly
its step's attempts and no other experiment can read or delete them.
"""

import random

from sqlalchemy import delete, insert, select

from utu.db.dataset_io import select_questions
from utu.db.engine import Database
from utu.db.models import DatasetSample, EvaluationSample


class PracticeData:
    def __init__(
        self,
        db: Database,
        exp_id: str,
        dataset: str,
        grpo_n: int,
        batch_size: int,
        truncate: int | None = None,
        shuffle: bool = True,
        seed: int = 42,
    ):
        self.db = db
        self.exp_id = exp_id
        self.dataset = dataset
        self.grpo_n = grpo_n
        self.batch_size = batch_size
        self.truncate = truncate
        self.shuffle = shuffle
        self.seed = seed
        self._questions: list[DatasetSample] | None = None

    def epoch_exp_id(self, epoch: int) -> str:
        return self.epoch_exp_id_of(self.exp_id, epoch)

    @staticmethod
    def epoch_exp_id_of(exp_id: str, epoch: int) -> str:
        return f"{exp_id}_epoch_{epoch}"

    async def questions(self) -> list[DatasetSample]:
        if self._questions is None:
            self._questions = await select_questions(self.db, self.dataset, self.truncate)
        return self._questions

    async def batches_per_epoch(self) -> int:
        return self.batch_count(len(await self.questions()), self.batch_size)

    @staticmethod
    def batch_count(questions: int, batch_size: int) -> int:
        return -(-questions // batch_size)

    async def epoch_batches(self, epoch: int) -> list[list[DatasetSample]]:
        """The epoch's batches of questions, in order."""
        questions = list(await self.questions())
        if self.shuffle:
            random.Random(f"{self.seed}:{epoch}").shuffle(questions)
        return [questions[i : i + self.batch_size] for i in range(0, len(questions), self.batch_size)]

    async def reserve(self, step: int, size: int) -> list[DatasetSample]:
        """The step's top-up questions (`practice.top_up`): the practice set past `truncate`, `size` a step."""
        assert self.truncate, "practice.top_up needs data.rollout_data_truncate"
        return await select_questions(self.db, self.dataset, size, self.truncate + step * size)

    async def step_rows(self, epoch: int, step: int, batch: list[DatasetSample]) -> list[EvaluationSample]:
        """The step's G attempts per question, creating those that do not exist yet."""
        exp = self.epoch_exp_id(epoch)
        async with self.db.transaction() as s:
            existing = {
                (r.dataset_index, r.attempt): r
                for r in await s.scalars(
                    select(EvaluationSample).where(
                        EvaluationSample.exp_id == exp,
                        EvaluationSample.owner == self.exp_id,
                        EvaluationSample.step == step,
                    )
                )
            }
            missing = [
                {
                    "exp_id": exp,
                    "owner": self.exp_id,
                    "dataset": q.dataset,
                    "dataset_index": q.index,
                    "attempt": k,
                    "step": step,
                    "source": q.source,
                    "level": q.level,
                    "raw_question": q.question,
                    "correct_answer": q.answer,
                    "stage": "init",
                }
                for q in batch
                for k in range(self.grpo_n)
                if (q.index, k) not in existing
            ]
            if missing:  # one bulk INSERT ... RETURNING: adding objects one by one was ~7% of a fast step
                created = await s.scalars(insert(EvaluationSample).returning(EvaluationSample), missing)
                existing |= {(r.dataset_index, r.attempt): r for r in created}
        return [existing[(q.index, k)] for q in batch for k in range(self.grpo_n)]

    async def reset_from(self, step: int) -> None:
        """Forget the attempts of steps >= `step` (for --restart_step)."""
        async with self.db.transaction() as s:
            await s.execute(
                delete(EvaluationSample).where(
                    EvaluationSample.owner == self.exp_id,
                    EvaluationSample.step.is_not(None),
                    EvaluationSample.step >= step,
                )
            )
