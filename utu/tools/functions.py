"""Your own Python functions as tools: `{name: function, function: "mypkg.tools:convert_units"}`.

The target is a function, or a class whose public methods become tools (instantiated without arguments).
Each tool's JSON schema comes from its type hints (through pydantic) and its docstring: the first paragraph
describes the tool, an `Args:` section describes the parameters. Sync functions run in a thread, async ones
are awaited; every call has the toolkit's timeout. Bad arguments, exceptions and timeouts become the tool
result the model sees (`{"error": ...}`), never a crash of the run. These functions run in the agent's
process, with your permissions: only name code you trust (model-written code belongs in python_executor).
"""

import asyncio
import importlib
import inspect
import json
import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from utu.config.models import ToolkitConfig
from utu.errors import ConfigError
from utu.tools.base import as_text, cut_middle


class FunctionToolkit:
    def __init__(self, config: ToolkitConfig):
        self.config = config
        self.tools = {fn.__name__: (fn, _arguments_model(fn)) for fn in _load(config.function or "")}
        if not self.tools:
            raise ConfigError(f"toolkit function {config.function!r}: no public function to offer as a tool")

    def schemas(self) -> list[dict[str, Any]]:
        out = []
        for name, (fn, model) in self.tools.items():
            parameters = model.model_json_schema()
            parameters.pop("title", None)
            out.append(
                {"type": "function", "function": {"name": name, "description": _summary(fn), "parameters": parameters}}
            )
        return out

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        fn, model = self.tools[name]
        try:
            values = dict(model.model_validate(arguments))
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or name}: {err['msg']}" for err in e.errors()[:3])
            return as_text({"error": f"invalid arguments for {name}: {problems}"})
        try:
            if inspect.iscoroutinefunction(fn):
                result = await asyncio.wait_for(fn(**values), self.config.timeout)
            else:
                result = await asyncio.wait_for(asyncio.to_thread(fn, **values), self.config.timeout)
            # a result JSON cannot write (an int past Python's 4300 digits) is the tool's failure too
            text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        except TimeoutError:
            return as_text({"error": f"{name} timed out after {self.config.timeout:g}s"})
        except Exception as e:  # the tool's own failure is the model's to see and handle
            return as_text({"error": f"{name} failed: {type(e).__name__}: {e}"})
        return cut_middle(text, self.config.max_output_chars)


def _load(path: str) -> list[Callable[..., Any]]:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"toolkit function {path!r}: expected 'module.path:function' (or ':Class')")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"toolkit function {path!r}: cannot load it ({type(e).__name__}: {e})") from e
    if inspect.isclass(target):
        try:
            instance = target()  # one instance, made with no arguments: its public methods are the tools
        except Exception as e:
            why = f"the class is made with no arguments ({e}); give them defaults"
            raise ConfigError(
                f"toolkit function {path!r}: {why if _needs_arguments(target) else f'making the class failed ({e!r})'}"
            ) from e
        return [
            getattr(instance, n) for n, _ in inspect.getmembers(target, inspect.isfunction) if not n.startswith("_")
        ]
    if not callable(target):
        raise ConfigError(f"toolkit function {path!r} is not a function or a class")
    return [target]


def _needs_arguments(cls: type) -> bool:
    """Whether a class's constructor has parameters without defaults (read only once making it failed: a decorated
    constructor may be made without them though its signature says otherwise)."""
    try:
        inspect.signature(cls).bind()
    except TypeError:
        return True
    except ValueError:  # no signature to read (a builtin class)
        return False
    return False


def _arguments_model(fn: Callable[..., Any]) -> type[BaseModel]:
    docs = _parameter_docs(fn)
    fields: dict[str, Any] = {}  # (annotation, FieldInfo) pairs; Any, as create_model's keywords take other types
    for name, p in inspect.signature(fn).parameters.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = Any if p.annotation is inspect.Parameter.empty else p.annotation
        default = ... if p.default is inspect.Parameter.empty else p.default
        fields[name] = (annotation, Field(default, description=docs.get(name)))
    return create_model(f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields)


def _summary(fn: Callable[..., Any]) -> str:
    doc = inspect.getdoc(fn) or fn.__name__
    return doc.split("\n\n")[0].strip()


def _parameter_docs(fn: Callable[..., Any]) -> dict[str, str]:
    """`name: description` lines of a Google-style `Args:` section."""
    doc = inspect.getdoc(fn) or ""
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", doc, re.M)
    if not section:
        return {}
    return {m[1]: m[2].strip() for m in re.finditer(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", section[1], re.M)}
