"""Scripted replies for the practice benchmarks' stub: the agent answers, the learner returns valid JSON."""

import json
import re
from collections import Counter

_served: Counter = Counter()


def reply(body: dict) -> str:
    schema = body.get("response_format", {}).get("json_schema", {}).get("name")
    if schema == "AttemptSummary":
        return json.dumps({"summary": "The agent computed the sum."})
    if schema == "GroupAdvantage":
        return json.dumps({"analysis": "mixed", "experiences": ["When adding, check each digit."]})
    if schema == "OperationList":
        return json.dumps({"operations": [{"operation": "ADD", "content": "When adding, check each digit."}]})
    if schema == "ConsolidatedList":
        return json.dumps(
            {"operations": [{"operation": "ADD", "content": "When adding, check each digit.", "merged_from": [0]}]}
        )
    question = body["messages"][-1]["content"]
    numbers = [int(x) for x in re.findall(r"\d+", question)[:2]]
    # Every other attempt at a question is wrong, so that groups have both and the learner runs.
    _served[question] += 1
    answer = sum(numbers) if _served[question] % 2 else -1
    return f"The answer is \\boxed{{{answer}}}."
