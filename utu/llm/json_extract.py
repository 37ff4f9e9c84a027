"""Find the JSON value in a model's text reply: bare, fenced in ```json, or wrapped in prose."""

import json
import re

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


def extract_json(text: str) -> object:
    """Return the first JSON object or array found in `text`; raise ValueError if there is none."""
    stripped = text.strip()
    if not stripped:
        raise ValueError("the reply is empty")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(stripped):
        try:
            return json.loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for i, ch in enumerate(stripped):
        if ch in "{[":
            try:
                value, _ = decoder.raw_decode(stripped, i)
                return value
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON object or array found in the reply")
