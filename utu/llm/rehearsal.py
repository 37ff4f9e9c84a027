"""A scripted agent and learner for rehearsing the whole workflow on the stub (docs/guide.md), no model needed.

    python -m utu.llm.stub --port 8765 --rehearse

The agent answers "when does it end?" questions (a clock time plus a duration, "3:15 pm ... 2 h 50 min"). Like a
small model, it forgets to carry minutes into hours on every other attempt at a question ("5:65 pm"), unless its
instructions say to carry one hour. The learner answers each practice stage with what a capable model would write: the
carry rule. So practice has contrast to learn from, and the enhanced agent scores higher than the baseline. It
is a rehearsal of the commands and files, not a measurement of anything.
"""

import json
import re
import threading
from collections import Counter
from typing import Any

CARRY_RULE = (
    "Adding a duration to a clock time: when the minutes add up to 60 or more, carry one hour and keep the "
    "remainder as the minutes, then box the time with am or pm."
)
_CLOCK = re.compile(r"(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\b", re.I)
_DURATION = re.compile(r"(\d+)\s*h(?:ours?)?\s*(?:and\s*)?(\d+)\s*min", re.I)


def schema_of(body: dict[str, Any]) -> str:
    """The structured-output schema a request asks for ("" for the agent's free-text requests)."""
    fmt = body.get("response_format", {})
    return fmt.get("json_schema", {}).get("name") or fmt.get("schema", {}).get("title", "")


def is_probe(body: dict[str, Any]) -> bool:
    """The client's one-time probe of which structured output the endpoint accepts."""
    return body.get("max_tokens") in (4, 8) and '{"ok": true}' in body["messages"][-1]["content"]


def proposed_operations(body: dict[str, Any]) -> list[dict]:
    """The numbered operations a consolidation request shows the learner ("0. {...}")."""
    lines = re.findall(r"^\d+\. .*$", body["messages"][1]["content"], re.M)
    return [json.loads(line.split(". ", 1)[1]) for line in lines]


class Rehearsal:
    """The reply function: `Rehearsal()(body)`. Attempts are counted per question, so each group of two or more
    attempts holds a right and a wrong one whatever order the requests come in."""

    def __init__(self) -> None:
        self._attempts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        if is_probe(body):
            return '{"ok": true}'
        schema = schema_of(body)
        return self._learn(schema, body) if schema else self._answer(body)

    def _answer(self, body: dict[str, Any]) -> str:
        messages = body["messages"]
        question = messages[-1]["content"]
        instructions = " ".join(m["content"] for m in messages if m["role"] == "system").lower()
        clock, duration = _CLOCK.search(question), _DURATION.search(question)
        if not (clock and duration):
            return "I can only add a duration to a clock time here. \\boxed{?}"
        with self._lock:
            attempt = self._attempts[question]
            self._attempts[question] += 1
        start = (int(clock[1]) % 12 + (12 if clock[3].lower() == "p" else 0)) * 60 + int(clock[2] or 0)
        hours, minutes = int(duration[1]), int(duration[2])
        if "carry one hour" not in instructions and attempt % 2 == 0 and start % 60 + minutes >= 60:
            wrong = f"{(start // 60 + hours - 1) % 12 + 1}:{start % 60 + minutes} {'pm' if start >= 720 else 'am'}"
            return f"Hours: {hours}, minutes: {minutes}. It ends at \\boxed{{{wrong}}}."
        end = (start + hours * 60 + minutes) % (24 * 60)
        text = f"{(end // 60 - 1) % 12 + 1}:{end % 60:02d} {'pm' if end >= 720 else 'am'}"
        return f"{start % 60} + {minutes} minutes, carrying the full hours. It ends at \\boxed{{{text}}}."

    def _learn(self, schema: str, body: dict[str, Any]) -> str:
        if schema == "AttemptSummary":
            return json.dumps({"summary": "Added the hours and the minutes of the duration to the start time."})
        if schema == "GroupAdvantage":
            return json.dumps(
                {
                    "analysis": "The right attempts carried 60 minutes into an hour; the wrong ones boxed a time with "
                    "more than 59 minutes.",
                    "problem_kind": "adding a duration to a clock time",
                    "experiences": [CARRY_RULE],
                }
            )
        if schema == "OperationList":  # the library already holds the rule: nothing to change
            return json.dumps({"operations": [{"operation": "NONE", "rationale": "the rule is in the library"}]})
        if schema == "ConsolidatedList":
            merged: dict[str, dict] = {}  # the groups proposed the same rule: one operation covers them all
            for i, op in enumerate(proposed_operations(body)):
                if op.get("operation") != "NONE":
                    merged.setdefault(json.dumps(op, sort_keys=True), op | {"merged_from": []})["merged_from"].append(i)
            return json.dumps({"operations": list(merged.values())})
        return json.dumps({"error": f"the rehearsal has no answer for {schema!r}"})
