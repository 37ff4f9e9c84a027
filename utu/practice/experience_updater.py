"""The learner: five LLM stages that turn a batch of judged groups into library operations.

Per group (stages 1–3 run as soon as the group is judged, overlapping other groups' rollouts):
  1. summarise each attempt (its trajectory cut to a token budget); an attempt no longer than a summary
     may be goes on as it is, without a call;
  2. compare the group's attempts (against the ground truth, if given) and extract at most
     `num_experiences_per_query` experiences "When <condition>, <strategy>." — the semantic advantage (a group
     whose attempts all lost is skipped, or, `all_lost_groups_per_step` of them, set against the ground truth);
  3. propose ADD / UPDATE / DELETE / NONE operations against the current library.
  Stages 2-3 run `learner_passes` times, one after another, as independent samples; all their proposals go on.
  When every proposal of a step is refused, stages 2-5 run again on the same summaries (`learner_retries`).
Per batch:
  4. consolidate all groups' operations (merge similar ADDs; DELETE wins over UPDATE); a proposal the
     consolidation neither kept nor merged is kept as it was;
  5. restate each proposal that says what to do and that the screening would refuse only for telling its
     question's story (its names, numbers or words; its answer or the verifier's note in the condition: a
     strategy that may hold, told as one question), once;
     the library screens the restatement again (`practice.restate_refused`).
Every stage asks for JSON matching a pydantic schema. A reply that stays invalid after one retry is
recorded as a `LearnerFailure` and the step goes on without it.
"""

import asyncio
import json
from typing import Any, TypeVar

from pydantic import BaseModel

from utu.config.models import PracticeArguments
from utu.errors import LLMError, StructuredOutputError
from utu.llm.client import LLMClient
from utu.practice import prompts
from utu.practice.library import Library, Operation, ProposedOp, StoryCheck
from utu.practice.schemas import (
    SUMMARY_MAX_CHARS,
    AttemptSummary,
    ConsolidatedList,
    GroupAdvantage,
    OperationList,
    Restated,
)
from utu.practice.screening import Question, similarity
from utu.practice.types import GroupAttempt, GroupOutcome, LearnerFailure
from utu.tasks import gather_or_cancel
from utu.tracing.spans import CHAIN, set_io, span

CHARS_PER_TOKEN = 4  # a rough, model-independent estimate for the trajectory budget
# Rollouts (priority 0) waiting for a slot of a shared client go first: see utu/llm/slots.py.
LEARNER_PRIORITY = 1
M = TypeVar("M", bound=BaseModel)


class ExperienceUpdater:
    def __init__(self, llm: LLMClient, practice: PracticeArguments):
        self.llm = llm
        self.p = practice
        self.objectives = {
            "agent_objective": practice.agent_objective,
            "learning_objective": practice.learning_objective,
        }

    def skip_reason(self, attempts: list[GroupAttempt], all_lost: bool = False) -> str | None:
        """Why a group teaches nothing, or None. Only groups of G > 1 with ground truth can be all-equal; `all_lost`:
        the group is studied though every attempt lost (`all_lost_groups_per_step`)."""
        judged = [a for a in attempts if a.reward is not None]
        if not judged:
            return "no judged attempt"
        if self.p.grpo_n > 1:
            if len(judged) < 2:
                return "fewer than 2 judged attempts"
            if self.p.given_ground_truth and len({a.reward for a in judged}) == 1 and not all_lost:
                return f"all rewards equal ({judged[0].reward:g})"
        return None

    async def learn(self, attempts: list[GroupAttempt], library: Library, all_lost: bool = False) -> GroupOutcome:
        """Stages 1-3 for one question's group: summarise; then, `learner_passes` times, the group advantage and
        the proposals it makes against `library` (one CHAIN span, a child span per stage). `all_lost`: a group whose
        attempts all lost, studied against the ground truth (`all_lost_groups_per_step`)."""
        index = attempts[0].dataset_index
        rewards = [a.reward for a in attempts]
        with span(
            "learner group", CHAIN, input=attempts[0].question, **{"question.index": index, "rewards": rewards}
        ) as s:
            outcome = await self.summarise(attempts, all_lost)
            # Passes one after another, so the same prompt again may come from the server's prompt cache (llama.cpp's
            # slot that read it, an API's prefix cache); sent at once, 2 passes took about 4 times one pass's time on
            # the embedded 1.5B (one replicate).
            for _ in range(self.p.learner_passes if outcome.studied else 0):
                failed_before = len(outcome.failures)
                advantage = await self.advantage(outcome)
                outcome.add_pass(await self.proposals(advantage, library, outcome), failed_before)
            set_io(
                s,
                "output",
                {
                    "used": outcome.used,
                    "skip_reason": outcome.skip_reason,
                    "operations": [p.op.model_dump() for p in outcome.proposed],
                },
            )
            return outcome

    async def learn_again(self, outcome: GroupOutcome, library: Library, refused: list[str]) -> GroupOutcome:
        """Stages 2-3 again on a studied group's summaries (stage 1 is not repeated), for a step whose every
        proposal was refused (`practice.learner_retries`). With `refused` (one line each: a text and why), the
        comparison is shown them, so the new sample looks elsewhere; without, its prompt is the first try's, a
        fresh sample (a near copy at temperature 0)."""
        again = GroupOutcome(
            dataset_index=outcome.dataset_index,
            used=outcome.used,
            skip_reason=outcome.skip_reason,
            all_lost=outcome.all_lost,
        )
        if not outcome.studied:
            return again
        again.studied = outcome.studied
        with span("learner group, again", CHAIN, input=outcome.studied[0][0].question) as s:
            for _ in range(self.p.learner_passes):
                failed_before = len(again.failures)
                advantage = await self.advantage(again, refused)
                again.add_pass(await self.proposals(advantage, library, again), failed_before)
            set_io(s, "output", [p.op.model_dump() for p in again.proposed])
        return again

    async def summarise(self, attempts: list[GroupAttempt], all_lost: bool = False) -> GroupOutcome:
        """Stage 1 for one question's group: skipped (and why), or its judged attempts summarised (`studied`)."""
        index = attempts[0].dataset_index
        reason = self.skip_reason(attempts, all_lost)
        if reason:
            return GroupOutcome(dataset_index=index, used=False, skip_reason=reason)
        outcome = GroupOutcome(dataset_index=index, used=True, all_lost=all_lost)
        judged = [a for a in attempts if a.reward is not None]
        with span("learner.summary", CHAIN, **{"attempts": len(judged)}):
            summaries = await asyncio.gather(*(self._summarise(a, outcome) for a in judged))
        outcome.studied = [(a, s) for a, s in zip(judged, summaries, strict=True) if s is not None]
        if not outcome.studied:
            outcome.skip_reason = "no attempt could be summarised"
        return outcome

    async def consolidate(
        self, library: Library, groups: list[GroupOutcome], step_failures: list[LearnerFailure]
    ) -> list[ProposedOp]:
        """Stage 4. With operations from one group only there is nothing to merge, and no call is made."""
        proposed = [p for g in groups for p in g.proposed if p.op.operation != "NONE"]
        if len({tuple(p.source_questions) for p in proposed}) < 2:
            return proposed
        numbered = "\n".join(
            f"{i}. {json.dumps(p.op.model_dump(exclude_none=True), ensure_ascii=False)}" for i, p in enumerate(proposed)
        )
        messages = self._messages(
            prompts.BATCH_UPDATE_SYSTEM, prompts.BATCH_UPDATE_USER, library=library.render(), operations=numbered
        )
        try:
            with span("learner.batch_update", CHAIN, input=numbered):
                result = await self._ask(messages, ConsolidatedList, "batch_update")
        except LLMError as e:
            step_failures.append(_failure("batch_update", None, e))
            return proposed  # apply the groups' operations unmerged rather than lose the step's learning
        out, covered = [], set()
        for op in result.operations:
            operation = op.to_operation()
            merged = {i for i in op.merged_from if 0 <= i < len(proposed) and _merged_into(proposed[i], operation)}
            if not merged:  # the 1.5B copied a step's proposals with no merged_from: a copy covers what it copies
                merged = {i for i, p in enumerate(proposed) if _same_change(p.op, operation)}
            covered |= merged
            out.append(ProposedOp(operation, sorted({q for i in merged for q in proposed[i].source_questions})))
        # Consolidation merges; it does not get to drop: a proposal it merged into nothing, or into a text
        # that does not resemble it, is kept as it was (the 1.5B learner collapsed a step's five distinct ADDs
        # into one). Duplicates of what is kept, or of the library, are refused by the screening.
        return out + [p for i, p in enumerate(proposed) if i not in covered]

    async def restate(
        self,
        proposed: list[ProposedOp],
        story_check: StoryCheck,
        questions: dict[int, Question],
        step_failures: list[LearnerFailure],
    ) -> list[ProposedOp]:
        """Stage 5. `story_check`: why the screening would refuse a text only for its question's story, or None;
        `questions`: the step's, by index. The restatement replaces the proposal, and its rationale keeps what
        the learner first wrote, for the operation log."""
        if not self.p.restate_refused:
            return proposed

        async def one(p: ProposedOp) -> ProposedOp:
            text = (p.op.content or "").strip()
            reason = story_check(text, p.source_questions) if text and p.op.operation in ("ADD", "UPDATE") else None
            if not reason:
                return p
            # Its own questions; all of the step's when a consolidation lost that record (the screening, too,
            # looks for the particulars of every question of the step).
            own = [questions[i] for i in p.source_questions if i in questions] or list(questions.values())
            messages = self._messages(
                prompts.RESTATE_SYSTEM,
                prompts.RESTATE_USER,
                question="\n\n".join(q.text for q in own),
                experience=text,
                reason=reason,
            )
            index = next(iter(p.source_questions), None)
            try:
                with span("learner.restate", CHAIN, input=text) as s:
                    restated = (await self._ask(messages, Restated, "restate")).experience
                    set_io(s, "output", restated)
            except LLMError as e:
                step_failures.append(_failure("restate", index, e))
                return p  # refused as it was
            if not restated:
                step_failures.append(LearnerFailure(stage="restate", dataset_index=index, error="a blank restatement"))
                return p
            if restated == text:
                return p
            rationale = f"restated; the learner first wrote {text!r}, which {reason}"
            if p.op.rationale:
                rationale = f"{p.op.rationale} ({rationale})"
            return ProposedOp(p.op.model_copy(update={"content": restated, "rationale": rationale}), p.source_questions)

        return await gather_or_cancel(*(one(p) for p in proposed))

    async def _ask(self, messages: list[dict[str, str]], schema: type[M], stage: str) -> M:
        return await self.llm.structured(messages, schema, tag=f"learner.{stage}", priority=LEARNER_PRIORITY)

    async def _summarise(self, attempt: GroupAttempt, outcome: GroupOutcome) -> str | None:
        own = render_trajectory(agent_part(attempt.trajectory), self.p.summary_token_budget)
        if len(own) <= SUMMARY_MAX_CHARS:  # no shorter than what a summary may be: the attempt itself, no call
            return own
        gt = self.p.given_ground_truth
        messages = self._messages(
            prompts.SUMMARY_SYSTEM,
            prompts.SUMMARY_USER,
            question=attempt.question,
            ground_truth=attempt.answer if gt else "[hidden]",
            outcome=outcome_of(attempt, gt) or "[hidden]",
            critique=attempt.critique or "[none]",
            trajectory=render_trajectory(attempt.trajectory, self.p.summary_token_budget),
        )
        try:
            return (await self._ask(messages, AttemptSummary, "summary")).summary
        except LLMError as e:
            outcome.failures.append(_failure("summary", attempt.dataset_index, e))
            return None

    async def advantage(self, outcome: GroupOutcome, refused: list[str] | None = None) -> GroupAdvantage | None:
        """Stage 2, one pass: the group's semantic advantage, compared from its summaries (`outcome.studied`); with
        `refused`, the texts a second look is shown. None when the learner failed (recorded on `outcome`)."""
        with span("learner.advantage", CHAIN) as s:
            advantage = await self._advantage(outcome, refused)
            set_io(s, "output", advantage.model_dump() if advantage else None)
        return advantage

    async def _advantage(self, outcome: GroupOutcome, refused: list[str] | None) -> GroupAdvantage | None:
        try:
            result = await self._ask(self.advantage_messages(outcome, refused), GroupAdvantage, "advantage")
        except LLMError as e:
            outcome.failures.append(_failure("advantage", outcome.dataset_index, e))
            return None
        result.experiences = [x.strip() for x in result.experiences if x and x.strip()]
        return result

    def advantage_messages(self, outcome: GroupOutcome, refused: list[str] | None = None) -> list[dict[str, str]]:
        """Stage 2's prompt for a studied group: its attempts' summaries, each with its reward (given the ground
        truth), its tool calls and the verifier's note (when any attempt has them); a second look's refused texts
        at the end."""
        kept = outcome.studied
        gt = self.p.given_ground_truth
        with_tools = any(a.tools for a, _ in kept)
        with_notes = gt and any(verifier_note(a.critique) for a, _ in kept)  # a note can give the ground truth
        blocks = [
            f"Attempt {i + 1}"
            + (f" ({told})" if (told := outcome_of(a, gt)) else "")
            + (f"\nTools called: {tool_usage(a.tools)}" if with_tools else "")
            + (f"\nVerifier: {note}" if with_notes and (note := verifier_note(a.critique)) else "")
            + f":\n{summary}"
            for i, (a, summary) in enumerate(kept)
        ]
        first = kept[0][0]
        judged_by = ", their rewards and the verifier's notes" if with_notes else " and their rewards"
        compare, verifier_part, tool_part = (
            (
                prompts.ADVANTAGE_COMPARE_ALL_LOST,
                prompts.ADVANTAGE_VERIFIER_NOTE_ALL_LOST,
                prompts.ADVANTAGE_TOOL_NOTE_ALL_LOST,
            )
            if outcome.all_lost  # none is better: each is set against the ground truth
            else (prompts.ADVANTAGE_COMPARE, prompts.ADVANTAGE_VERIFIER_NOTE, prompts.ADVANTAGE_TOOL_NOTE)
        )
        system = prompts.ADVANTAGE_SYSTEM.format(
            **self.objectives,
            compare=compare.format(
                against_truth=f" against the ground truth{judged_by}" if gt else "",
                notes=" and the verifier's note" if with_notes else "",
            ),
            num_experiences=self.p.num_experiences_per_query,
            verifier_note=verifier_part if with_notes else "",
            tool_note=tool_part if with_tools else "",
        )
        user = prompts.ADVANTAGE_USER.format(
            question=first.question, ground_truth=first.answer if gt else "[hidden]", attempts="\n\n".join(blocks)
        )
        if refused:  # at the end, so the prompt's beginning is the first try's (a server's prompt cache)
            instead = prompts.REFUSED_INSTEAD_ALL_LOST if outcome.all_lost else prompts.REFUSED_INSTEAD
            user += prompts.ADVANTAGE_REFUSED.format(
                refused="\n".join(f"- {line}" for line in refused), instead=instead
            )
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    async def proposals(
        self, advantage: GroupAdvantage | None, library: Library, outcome: GroupOutcome
    ) -> list[Operation]:
        """Stage 3, one pass: the advantage's experiences (at most `num_experiences_per_query`) as operations
        against `library`."""
        if advantage is None or not advantage.experiences:
            return []
        experiences = advantage.experiences[: self.p.num_experiences_per_query]
        with span("learner.group_update", CHAIN, input=experiences) as s:
            operations = await self._operations(experiences, library, outcome)
            set_io(s, "output", [op.model_dump() for op in operations])
        return operations

    async def _operations(self, experiences: list[str], library: Library, outcome: GroupOutcome) -> list[Operation]:
        if not library.experiences:
            # Nothing to update, merge or delete: each new experience is an ADD, without a call (small models
            # asked anyway answered NONE to everything). Screening still decides what enters the library.
            return [Operation(operation="ADD", content=x, rationale="new; the library is empty") for x in experiences]
        messages = self._messages(
            prompts.GROUP_UPDATE_SYSTEM,
            prompts.GROUP_UPDATE_USER,
            library=library.render(),
            experiences="\n".join(f"- {x}" for x in experiences),
        )
        try:
            return (await self._ask(messages, OperationList, "group_update")).to_operations()
        except LLMError as e:
            outcome.failures.append(_failure("group_update", outcome.dataset_index, e))
            return []

    def _messages(self, system: str, user: str, **values: Any) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": system.format(**self.objectives)},
            {"role": "user", "content": user.format(**values)},
        ]


def every_attempt_lost(attempts: list[GroupAttempt]) -> bool:
    """Whether a group's attempts were all judged, by verdicts, the same reward below a full one: none is better
    to compare with. (A failed attempt, or a verifier's failure, is no verdict.)"""
    rewards = {a.reward for a in attempts}
    verdicts = all(a.reward is not None and not a.verifier_failed for a in attempts)
    return len(attempts) > 1 and verdicts and len(rewards) == 1 and (reward := rewards.pop()) is not None and reward < 1


MERGE_SIMILARITY = 0.5  # word-sequence similarity a source must keep with the text it was merged into


def outcome_of(attempt: GroupAttempt, given_ground_truth: bool) -> str:
    """What the learner is told of an attempt's result: its reward (when given), and whether it ran out of room
    (without it, an attempt cut by the token limit reads like one that reasoned wrong)."""
    parts = [f"reward {attempt.reward:g}"] if given_ground_truth else []
    if attempt.cut:
        parts.append("cut off at the agent's token limit before it finished")
    return "; ".join(parts)


VERIFIER_NOTE_CHARS = 300


def verifier_note(critique: str | None) -> str:
    """The verifier's reason for an attempt's reward on one line ("extracted 11; gold 11.33"): what tells the
    learner that a worse attempt lost on the form of its answer rather than on its method."""
    note = " ".join((critique or "").split())
    return note if len(note) <= VERIFIER_NOTE_CHARS else note[: VERIFIER_NOTE_CHARS - 3] + "..."


def tool_usage(log: list[dict[str, Any]]) -> str:
    """An attempt's tool calls in one line: "convert_units x2 (ok); search x1 (1 failed: timed out after 30s)"."""
    if not log:
        return "none"
    by_tool: dict[str, list[str | None]] = {}
    for call in log:
        by_tool.setdefault(call["tool"], []).append(call["error"])
    parts = []
    for tool, errors in by_tool.items():
        failed = [e for e in errors if e]
        outcome = f"{len(failed)} failed: {failed[0][:120]}" if failed else "ok"
        parts.append(f"{tool} x{len(errors)} ({outcome})")
    return "; ".join(parts)


def _same_change(a: Operation, b: Operation) -> bool:
    return (a.operation, a.id, a.content) == (b.operation, b.id, b.content)


def _merged_into(source: ProposedOp, merged: Operation) -> bool:
    """Whether `merged` really carries `source` on: same kind and id, and a text resembling the source's."""
    if source.op.operation != merged.operation or (source.op.id and source.op.id != merged.id):
        return False
    if not source.op.content or not merged.content:
        return source.op.content == merged.content
    return similarity(source.op.content, merged.content) >= MERGE_SIMILARITY


def _failure(stage: str, index: int | None, e: LLMError) -> LearnerFailure:
    raw = e.raw if isinstance(e, StructuredOutputError) else None
    return LearnerFailure(stage=stage, dataset_index=index, error=str(e), raw_reply=raw)


def agent_part(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the agent did: the messages after the question (its replies, tool calls and their results)."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), -1)
    return messages[first_user + 1 :]


def render_trajectory(messages: list[dict[str, Any]], token_budget: int) -> str:
    """The trajectory as text (system prompt left out), cut in the middle to fit the budget."""
    lines = []
    for m in messages:
        if m.get("role") == "system":
            continue
        text = m.get("content") or ""
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            text += f"\n[tool call] {fn.get('name')}({fn.get('arguments')})"
        lines.append(f"[{m.get('role')}] {text}")
    rendered = "\n".join(lines)
    limit = token_budget * CHARS_PER_TOKEN
    if len(rendered) <= limit:
        return rendered
    head = int(limit * 0.4)
    return f"{rendered[:head]}\n... [{len(rendered) - limit} characters cut] ...\n{rendered[-(limit - head) :]}"
