"""Running the tool calls a model made, for the agent (`utu.agents.agent`) and for GRPO with tools (`utu.rl.turns`).

A call becomes a `tool` message and a tool-log entry {"tool", "arguments_chars", "seconds", "error"}. Whatever
goes wrong (arguments that are not a JSON object, an unknown tool, a toolkit that raises) is the call's result,
an {"error": ...} object the model reads, never an exception: a tool's failure is the model's to handle. Each
toolkit applies its own timeout.
"""

import asyncio
import json
import time
from typing import Any

from utu.tools.base import Toolkit
from utu.tracing.spans import TOOL, set_io, span

# Calls of one turn run at once, up to this many; the rest are answered with an error, not run: a model (or an
# instruction injected through a tool's output) asking for thousands would start as many sandboxes.
MAX_CALLS_PER_TURN = 16


class ToolRunner:
    def __init__(self, toolkits: list[Toolkit]):
        self.toolkits = toolkits
        self.owner = {s["function"]["name"]: tk for tk in toolkits for s in tk.schemas()}
        self.schemas = [s for tk in toolkits for s in tk.schemas()] or None  # None: send no `tools` at all

    @property
    def names(self) -> set[str]:
        return set(self.owner)

    def only(self, names: list[str]) -> "ToolRunner":
        """A runner offering only `names` (a router's choice): a call to any other tool is an unknown tool."""
        narrowed = ToolRunner([])
        narrowed.toolkits = self.toolkits
        narrowed.owner = {name: self.owner[name] for name in names}
        narrowed.schemas = [s for s in self.schemas or [] if s["function"]["name"] in names] or None
        return narrowed

    async def run_turn(self, calls: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """One turn's calls, concurrently, each answered in call order (`run`); beyond `MAX_CALLS_PER_TURN`
        answered with an error and not run."""
        done = await asyncio.gather(*(self.run(call) for call in calls[:MAX_CALLS_PER_TURN]))
        too_many = {"error": f"more than {MAX_CALLS_PER_TURN} tool calls in one turn: not run; call it again"}
        return done + [self._answer(call, json.dumps(too_many), time.perf_counter()) for call in calls[len(done) :]]

    async def run(self, call: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The `tool` message for one API-style call, and its tool-log entry."""
        named, given, _ = _parts(call)
        name = named if isinstance(named, str) else ""
        given = given or "{}"
        start = time.perf_counter()
        try:
            # an object as such, as some servers send it; else the JSON text of one
            arguments = given if isinstance(given, dict) else json.loads(given) if isinstance(given, str) else None
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
        except (json.JSONDecodeError, ValueError, RecursionError) as e:
            why = "nested too deeply" if isinstance(e, RecursionError) else e
            content = json.dumps({"error": f"invalid arguments for {name or repr(named)}: {why}"})
        else:
            toolkit = self.owner.get(name)
            if toolkit is None:
                content = json.dumps({"error": f"unknown tool {name!r}; available: {sorted(self.owner)}"})
            else:
                with span(f"tool {name}", TOOL, input=arguments, **{"tool.name": name}) as current:
                    try:
                        content = await toolkit.call(name, arguments)
                        if not isinstance(content, str):  # a toolkit of one's own may return a value
                            content = json.dumps(content, ensure_ascii=False, default=str)
                    except Exception as e:  # noqa: BLE001 - a toolkit's bug is the call's result, not a crash
                        content = json.dumps({"error": f"{name} failed: {type(e).__name__}: {e}"})
                    set_io(current, "output", content)
        return self._answer(call, content, start)

    @staticmethod
    def _answer(call: Any, content: str, start: float) -> tuple[dict[str, Any], dict[str, Any]]:
        """The `tool` message answering `call` with `content`, and its tool-log entry."""
        name, given, call_id = _parts(call)
        entry = {
            "tool": name if isinstance(name, str) else "",
            "arguments_chars": len(given) if isinstance(given, str) else len(str(given or "")),
            "seconds": round(time.perf_counter() - start, 4),
            "error": error_of(content),
        }
        return {"role": "tool", "tool_call_id": call_id if isinstance(call_id, str) else "", "content": content}, entry


def _parts(call: Any) -> tuple[Any, Any, Any]:
    """A call's tool name, arguments and id as the model gave them: a model's reply can have any shape at all."""
    function = call.get("function") if isinstance(call, dict) else None
    function = function if isinstance(function, dict) else {}
    return function.get("name"), function.get("arguments"), call.get("id") if isinstance(call, dict) else None


def error_of(content: str) -> str | None:
    """A tool result's error: every toolkit reports failures as a JSON object with a non-empty "error"."""
    if not content.startswith("{"):
        return None
    try:
        error = json.loads(content).get("error")
    except (json.JSONDecodeError, AttributeError, RecursionError):
        return None
    return str(error)[:300] if error else None
