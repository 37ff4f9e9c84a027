"""Tool calls a model wrote as text instead of through the API's `tool_calls`.

Small local models often do: Qwen2.5-Coder-0.5B under llama.cpp answers a question that needs a tool with
```json {"name": "convert_units", "arguments": {...}} ``` as its content, which the server's parser does not
recognise. A reply is read as calls only when it is unambiguous: the whole reply is one JSON object (or a
list of them) with a `name` of an offered tool and `arguments` an object, bare or in one ```json fence (a
missing closing brace or two, or doubled outer braces, forgiven); or it holds <tool_call>...</tool_call>
blocks (Qwen's own format), each such an object. Anything else is an ordinary answer.
"""

import json
from typing import Any

# Found by string search: a regex with `\s*(.*?)\s*` backtracks for minutes over a long run of whitespace (a
# small model's degenerate reply), and would hold the event loop all that time.
FENCE = "```"
OPEN, CLOSE = "<tool_call>", "</tool_call>"
ID_PREFIX = "text_call_"  # a call read from text has no id from the API: text_call_0, text_call_1, ...


def text_tool_calls(content: str, tools: set[str], bare: bool = True, first: int = 0) -> list[dict[str, Any]]:
    """The calls `content` makes, as API-style tool calls (ids text_call_<first>, ...), or [] when it makes none.
    `bare=False` reads <tool_call> blocks only (the chat template's format), not a reply that is only JSON.
    `first`: the first id's number, past those the conversation used, so that no two of its calls share an id."""
    text = content.strip()
    blocks = _tagged(text) or ([_unfenced(text)] if bare else [])
    calls: list[dict[str, Any]] = []
    for block in blocks:
        value = _loads(block)
        if value is None:
            return []
        for item in value if isinstance(value, list) else [value]:
            if not _is_call(item, tools):
                return []
            arguments = json.dumps(item.get("arguments", {}), ensure_ascii=False)
            calls.append(
                {
                    "id": f"{ID_PREFIX}{first + len(calls)}",
                    "type": "function",
                    "function": {"name": item["name"], "arguments": arguments},
                }
            )
    return calls


def _tagged(text: str) -> list[str]:
    """What each <tool_call>...</tool_call> block of `text` holds, in order."""
    blocks = []
    start = text.find(OPEN)
    while start != -1:
        end = text.find(CLOSE, start + len(OPEN))
        if end == -1:
            break
        blocks.append(text[start + len(OPEN) : end].strip())
        start = text.find(OPEN, end + len(CLOSE))
    return blocks


def _unfenced(text: str) -> str:
    """`text` without the ```json fence around the whole of it, if it has one."""
    if len(text) < 2 * len(FENCE) or not (text.startswith(FENCE) and text.endswith(FENCE)):
        return text
    inner = text[len(FENCE) : -len(FENCE)]
    return inner.removeprefix("json").strip()


def _is_call(item: Any, tools: set[str]) -> bool:
    name = item.get("name") if isinstance(item, dict) else None
    return isinstance(name, str) and name in tools and isinstance(item.get("arguments", {}), dict)


def _loads(block: str) -> Any:
    """The JSON value of `block`, forgiving up to two missing closing braces (the 0.5B drops the last one) and
    doubled outer braces (the 1.5B writes `{{...}}`, its chat template's escaping)."""
    doubled = block.startswith("{{") and block.endswith("}}")
    for text in (block, block + "}", block + "}}", *([block[1:-1]] if doubled else [])):
        try:
            return json.loads(text)
        except (json.JSONDecodeError, RecursionError):  # (nested too deeply is no call either)
            continue
    return None
