"""Tool calls a model wrote as text instead of through the API's `tool_calls`.

Small local models often do: Qwen2.5-Coder-0.5B under llama.cpp answers a question that needs a tool with
```json {"name": "convert_units", "arguments": {...}} ``` as its content, which the server's parser does not
recognise. A reply is read as calls only when it is unambiguous: the whole reply is one JSON object (or a
list of them) with a `name` of an offered tool and `arguments` an object, bare or in one ```json fence (a
missing closing brace or two, or doubled outer braces, forgiven); or it holds <tool_call>...</tool_call>
blocks (Qwen's own format), each such an object. Anything else is an ordinary answer.
"""

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json)?\s*(.*?)\s*```", re.S)
_TAG = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def text_tool_calls(content: str, tools: set[str], bare: bool = True) -> list[dict[str, Any]]:
    """The calls `content` makes, as API-style tool calls (ids text_call_0, ...), or [] when it makes none.
    `bare=False` reads <tool_call> blocks only (the chat template's format), not a reply that is only JSON."""
    text = content.strip()
    fenced = _FENCE.fullmatch(text)
    blocks = _TAG.findall(text) or ([fenced.group(1) if fenced else text] if bare else [])
    calls: list[dict[str, Any]] = []
    for block in blocks:
        value = _loads(block)
        if value is None:
            return []
        for item in value if isinstance(value, list) else [value]:
            if not (
                isinstance(item, dict) and item.get("name") in tools and isinstance(item.get("arguments", {}), dict)
            ):
                return []
            arguments = json.dumps(item.get("arguments", {}), ensure_ascii=False)
            calls.append(
                {
                    "id": f"text_call_{len(calls)}",
                    "type": "function",
                    "function": {"name": item["name"], "arguments": arguments},
                }
            )
    return calls


def _is_call(item: Any, tools: set[str]) -> bool:
    return isinstance(item, dict) and item.get("name") in tools and isinstance(item.get("arguments", {}), dict)


def _loads(block: str) -> Any:
    """The JSON value of `block`, forgiving up to two missing closing braces (the 0.5B drops the last one) and
    doubled outer braces (the 1.5B writes `{{...}}`, its chat template's escaping)."""
    doubled = block.startswith("{{") and block.endswith("}}")
    for text in (block, block + "}", block + "}}", *([block[1:-1]] if doubled else [])):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            continue
    return None
