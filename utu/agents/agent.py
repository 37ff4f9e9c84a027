"""The agent: instructions + optional experiences + tools, run on one question.

A run is a loop of chat turns. When the model calls tools, the calls run and their results go back as
`tool` messages; the run ends with the first reply without tool calls, or at `max_turns` (recorded as
the stop reason, not raised). A final reply cut by the token limit (`finish_reason: length`) is recorded
as stop reason `max_tokens`: the learner is told such an attempt ran out of room. The trajectory is the
full message list, system prompt and tool calls included. With no toolkits the agent sends no `tools` at
all ("no tools" mode, for models without function calling). An agent with a router (`tool_router`, utu/router)
offers the LLM only the tools the router chose for the question; the decision rides on the result, for the
reward to reach the router.
"""

from dataclasses import dataclass, field
from typing import Any, Literal

from utu.agents.experience import build_messages
from utu.agents.text_tool_calls import ID_PREFIX, text_tool_calls
from utu.config.models import AgentConfig
from utu.llm.client import LLMClient
from utu.llm.usage import Usage
from utu.tools.base import Toolkit
from utu.tools.runner import ToolRunner

StopReason = Literal["final", "max_tokens", "max_turns"]


@dataclass
class AgentResult:
    response: str
    trajectory: list[dict[str, Any]]
    turns: int
    tool_calls: int
    stop_reason: StopReason
    usage: Usage = field(default_factory=Usage)
    # One entry per tool call, in order: {"tool", "arguments_chars", "seconds", "error"} (error None when it worked)
    tool_log: list[dict[str, Any]] = field(default_factory=list)
    route: Any = None  # the router's decision (utu.router.router.Decision), when the agent has a router


class Agent:
    def __init__(self, config: AgentConfig, llm: LLMClient, toolkits: list[Toolkit] | None = None, router: Any = None):
        self.config = config
        self.llm = llm
        self.toolkits = toolkits or []
        self.tools = ToolRunner(self.toolkits)
        self.router = router  # utu.router.routing.AgentRouter, built by `open_agent` from `config.tool_router`

    async def run(
        self,
        question: str,
        *,
        experiences: dict[str, str] | None = None,
        tag: str = "rollout",
        explore: bool = False,
        **settings: Any,
    ) -> AgentResult:
        """Answer one question. LLM failures raise `LLMError` (the caller decides about retries). `explore`: the
        router (if any) samples its choice to learn from it, instead of taking its best."""
        messages = build_messages(self.config, question, experiences)
        return await self.run_messages(messages, tag=tag, explore=explore, route_on=question, **settings)

    async def run_messages(
        self,
        messages: list[dict[str, Any]],
        *,
        tag: str = "rollout",
        explore: bool = False,
        route_on: str | None = None,
        tools: ToolRunner | None = None,
        **settings: Any,
    ) -> AgentResult:
        """Continue a conversation whose system prompt and library are in place (`place_library`). `tools`: what
        the LLM is offered, else what the router (if any) chooses from `route_on` (default: the last user
        message), else every tool of the agent."""
        route = None
        if tools is None and self.router is not None:
            route = await self.router.choose(route_on or _last_user_text(messages), explore=explore)
            tools = self.tools.only(self.router.offered(route))
        tools = self.tools if tools is None else tools
        messages = list(messages)
        usage, response = Usage(), ""
        tool_log: list[dict[str, Any]] = []
        for turn in range(1, self.config.max_turns + 1):
            reply = await self.llm.chat(messages, tag=tag, tools=tools.schemas, **settings)
            usage.add(reply.usage)
            message, calls = reply.message, reply.tool_calls
            if not calls and tools.schemas and self.config.text_tool_calls:
                calls = text_tool_calls(reply.content or "", tools.names, first=_next_text_call_number(messages))
                if calls:  # the trajectory shows them as the calls they are, so the next request is well-formed
                    message = {**message, "tool_calls": calls}
            messages.append(message)
            response = reply.content
            if not calls:
                stop: StopReason = "max_tokens" if reply.finish_reason == "length" else "final"
                return AgentResult(response, messages, turn, len(tool_log), stop, usage, tool_log, route)
            results = await tools.run_turn(calls)
            messages.extend(message for message, _ in results)
            tool_log.extend(entry for _, entry in results)  # in call order, not in order of completion
        turns = self.config.max_turns
        return AgentResult(response, messages, turns, len(tool_log), "max_turns", usage, tool_log, route)


def _next_text_call_number(messages: list[dict[str, Any]]) -> int:
    """The number after the highest text call id in the conversation so far, the history it continues included
    (which a client may have trimmed, or sent in any shape): the next text call's id is new in it."""
    numbers = [-1]
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else []:
            call_id = call.get("id") if isinstance(call, dict) else None
            number = call_id.removeprefix(ID_PREFIX) if isinstance(call_id, str) else ""
            if call_id != number and number.isdecimal():
                numbers.append(int(number))
    return max(numbers) + 1


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else str(content)
    return ""
