"""The toolkit interface and the helpers toolkits share (they import this module; it imports none of them)."""

import json
from typing import Any, Protocol


class Toolkit(Protocol):
    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI `tools` entries ({"type": "function", "function": {...}})."""

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one tool; the result is the text the model sees."""


def function_schema(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def as_text(result: dict[str, Any]) -> str:
    return json.dumps(result, ensure_ascii=False)


def cut_middle(text: str, limit: int) -> str:
    """`text`, cut in the middle to about `limit` characters (the start and the end say most)."""
    return text if len(text) <= limit else f"{text[: limit // 2]}\n... [cut] ...\n{text[-limit // 2 :]}"
