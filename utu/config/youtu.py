"""Youtu-Agent's config formats, read as ours (so its users switch without editing their YAML files).

An agent in Youtu-Agent's format:

    type: simple
    agent: {name: math_agent, instructions: "..."}
    model: {model_provider: {...}, model_settings: {...}, model_params: {temperature: 0.3, top_p: 0.95}}
    toolkits: {python_executor: {name: python_executor, mode: builtin, env_mode: local}}
    max_turns: 50

becomes `name`, `instructions`, `model` (with `model_params` applied over `model_settings`), `toolkits` as a
list and `max_turns`. Keys that have no counterpart here are named in one warning, never dropped silently.
"""

import logging
import re
from typing import Any

log = logging.getLogger(__name__)

AGENT_TYPES = ("simple",)
TOOLKITS = ("python_executor", "search", "function", "mcp")
# Youtu-Agent keys we accept without acting on them, and why (shown in the warning).
UNUSED_AGENT_KEYS = {
    "context_manager": "utu keeps the whole conversation",
    "env": "tools run in utu's own sandbox",
    "runner": "utu runs its own ReAct loop",
    "enabled_skills": "skills need Youtu-Agent's shell_local env",
    "stop_at_tool_names": "the agent stops when it answers without a tool call",
}
# The keys of Youtu-Agent's ToolkitConfig that change nothing for utu's builtin toolkits, with its defaults (a
# saved agent writes them all): only a value other than its default is worth a warning.
UNUSED_TOOLKIT_KEYS: dict[str, Any] = {
    "mode": "builtin",
    "env_mode": "local",
    "activated_tools": None,
    "config": {},
    "customized_filepath": None,
    "customized_classname": None,
    "config_llm": None,
    "mcp_transport": "stdio",
    "mcp_client_session_timeout_seconds": 20,
}
SETTINGS = ("temperature", "top_p", "max_tokens", "seed")
# Keys of the openai-agents ModelSettings Youtu-Agent's model configs use that are not request fields:
# usage is always read here; headers and query parameters are not sent.
NOT_REQUEST_FIELDS = ("include_usage", "extra_headers", "extra_query")
SETTINGS_KEYS = {"extra_args", *NOT_REQUEST_FIELDS}  # any of them marks a model_settings in Youtu's format


def is_youtu_agent(data: Any) -> bool:
    return isinstance(data, dict) and (
        isinstance(data.get("agent"), dict) or "type" in data or isinstance(data.get("toolkits"), dict)
    )


def agent_from_youtu(data: dict[str, Any]) -> dict[str, Any]:
    """Our agent settings from a Youtu-Agent agent config (raises ValueError naming what cannot be used)."""
    data = dict(data)
    kind = data.pop("type", "simple")
    if kind not in AGENT_TYPES:
        raise ValueError(f"agent type {kind!r} is not supported: utu runs `simple` agents (tools in a ReAct loop)")
    inner = data.pop("agent", None) or {}
    if not isinstance(inner, dict):
        raise ValueError("`agent` must be a mapping with name and instructions")
    data |= {k: inner[k] for k in ("name", "instructions") if inner.get(k) is not None}
    if isinstance(data.get("instructions"), str) and not data.get("experiences"):
        data["instructions"], experiences = split_experiences(data["instructions"])
        if experiences:
            data["experiences"] = experiences
    if isinstance(data.get("toolkits"), dict):
        data["toolkits"] = [_toolkit(key, value) for key, value in data["toolkits"].items()]
    ignored = [f"{k} ({why})" for k, why in UNUSED_AGENT_KEYS.items() if data.pop(k, None) is not None]
    if ignored:
        log.warning("Youtu-Agent agent keys without effect in utu: %s", "; ".join(ignored))
    return data


# How Youtu-Agent's practice writes a library into an enhanced agent's instructions (its pre-learned agents).
EXPERIENCE_HEADER = (
    "\n\nWhen solving problems, you MUST first carefully read and understand "
    "the helpful instructions and experiences:\n"
)
_EXPERIENCE_LINE = re.compile(r"\[([^\]\n]+)\]\.(?: |$)")  # (with no text, the line may end at the dot)


def split_experiences(instructions: str) -> tuple[str, dict[str, str]]:
    """(instructions, library) from a Youtu-Agent enhanced agent's instructions: the `[G0]. text` lines after
    EXPERIENCE_HEADER are its library. Instructions without that block come back as they are, with no library."""
    head, found, block = instructions.rpartition(EXPERIENCE_HEADER)
    if not found or not _EXPERIENCE_LINE.match(block):
        return instructions, {}
    experiences: dict[str, str] = {}
    for line in block.split("\n"):
        start = _EXPERIENCE_LINE.match(line)
        if start:
            experiences[start.group(1)] = line[start.end() :].strip()
        elif experiences and line.strip():  # an experience that ran over more than one line
            last = next(reversed(experiences))
            experiences[last] += "\n" + line.strip()
    empty = [key for key, text in experiences.items() if not text]
    if empty:  # (an agent's experience must say something; Youtu-Agent wrote these lines and placed nothing)
        log.warning("Youtu-Agent instructions: experience %s without text, left out", ", ".join(empty))
    return head, {key: text for key, text in experiences.items() if text}


def model_from_youtu(data: dict[str, Any]) -> dict[str, Any]:
    """`model_params` (Youtu-Agent's sampling settings, e.g. a judge's temperature) override `model_settings`;
    other model_settings keys (tool_choice, parallel_tool_calls, ...) go with every request as they are;
    `extra_args.timeout` becomes `timeout`; `termination_max_tokens` caps `max_tokens` when that is unset."""
    data = dict(data)
    settings = dict(data.get("model_settings") or {})
    params = data.pop("model_params", None) or {}
    extra = settings.pop("extra_args", None) or {}
    if isinstance(extra, dict) and "timeout" in extra:
        data["timeout"] = extra.pop("timeout")
    budget = data.pop("termination_max_tokens", None)
    if budget is not None:
        settings.setdefault("max_tokens", budget)
    dropped = [k for k in NOT_REQUEST_FIELDS if settings.pop(k, None) not in (None, True, {})]
    if dropped:
        log.warning("model_settings: %s not sent (utu sends no extra headers or query parameters)", ", ".join(dropped))
    unknown = {k: settings.pop(k) for k in list(settings) if k not in (*SETTINGS, "extra_body")}
    for key, value in {**extra, **unknown, **params}.items():
        if key in SETTINGS:
            settings[key] = value
        elif value is not None:  # e.g. parallel_tool_calls: sent with every request as it is
            settings.setdefault("extra_body", {})[key] = value
    if settings:
        data["model_settings"] = settings
    return data


def _toolkit(key: str, value: Any) -> dict[str, Any]:
    value = dict(value or {})
    if value.get("mode") == "mcp":
        return _mcp_toolkit(key, value)
    name = value.pop("name", None) or key
    if name not in TOOLKITS:
        raise ValueError(
            f"toolkit {name!r} is not available: utu's toolkits are {', '.join(TOOLKITS)} (remove it, or use one)"
        )
    unused = [k for k, default in UNUSED_TOOLKIT_KEYS.items() if value.pop(k, default) not in (default, None)]
    if unused:
        log.warning("toolkit %s: Youtu-Agent keys without effect in utu: %s", name, ", ".join(unused))
    return {"name": name, **value}


def _mcp_toolkit(key: str, value: dict[str, Any]) -> dict[str, Any]:
    """`mode: mcp` with `config: {command, args, env}` (stdio) or `config: {url, headers}`; `activated_tools`
    becomes `include`."""
    server = dict(value.get("config") or {})
    out: dict[str, Any] = {"name": "mcp"}
    if server.get("command"):
        out["command"] = [server["command"], *(server.get("args") or [])]
        out["env"] = server.get("env") or {}
    elif server.get("url"):
        out |= {"url": server["url"], "headers": server.get("headers") or {}}
    else:
        raise ValueError(f"toolkit {key!r} (mode mcp): its `config` needs `command` (with `args`) or `url`")
    if value.get("activated_tools"):
        out["include"] = list(value["activated_tools"])
    if value.get("mcp_client_session_timeout_seconds"):
        out["timeout"] = value["mcp_client_session_timeout_seconds"]
    if value.get("mcp_transport") == "sse":
        raise ValueError(f"toolkit {key!r}: mcp_transport sse is not supported: serve it over streamable_http")
    return out


DATA_KEYS_UNDER_PRACTICE = ("rollout_data_truncate", "eval_data_truncate")


def practice_from_youtu(data: dict[str, Any]) -> dict[str, Any]:
    """Youtu-Agent keeps `rollout_data_truncate` and `eval_data_truncate` under `practice`; utu under `data`,
    with the practice set they cut. Either place is read; the same key in both with two values is refused."""
    practice = data.get("practice")
    if not isinstance(practice, dict) or not any(k in practice for k in DATA_KEYS_UNDER_PRACTICE):
        return data
    practice, moved = dict(practice), dict(data.get("data") or {})
    for key in DATA_KEYS_UNDER_PRACTICE:
        if key in practice:
            value = practice.pop(key)
            if moved.get(key) is not None and value is not None and moved[key] != value:
                raise ValueError(f"practice.{key} ({value}) and data.{key} ({moved[key]}) differ: keep one")
            if moved.get(key) is None:
                moved[key] = value
    return {**data, "practice": practice, "data": moved}
