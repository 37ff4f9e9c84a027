"""The knob tables of docs/configuration.md, generated from the config models (one source per knob).

    python -m utu.config.docs docs/configuration.md      # rewrite every table between its markers
    python -m utu.config.docs --check docs/configuration.md

A table sits between `<!-- knobs NAME -->` and `<!-- /knobs -->`, NAME being a model below. The test suite
runs `--check`, so a page that disagrees with the models fails it.
"""

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from utu.config import models
from utu.config.rl import GRPOSettings, RLConfig

MODELS: dict[str, type[BaseModel]] = {
    cls.__name__: cls
    for cls in (
        models.PracticeArguments,
        models.ValidationConfig,
        models.ScreeningConfig,
        models.TopUpConfig,
        models.DataArguments,
        models.EvalConfig,
        models.AgentConfig,
        models.DataConfig,
        models.ModelConfig,
        models.ModelProvider,
        models.ModelSettings,
        models.Pricing,
        models.ToolkitConfig,
        models.ToolRouterConfig,
        models.RouterEmbeddingsConfig,
        GRPOSettings,
        RLConfig,
    )
}
TABLE = re.compile(r"(<!-- knobs (\w+) -->\n)(.*?)(<!-- /knobs -->)", re.DOTALL)


def knob_table(model: type[BaseModel]) -> str:
    lines = ["| knob | default | range | what it does |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        text = (field.description or "").replace("|", "\\|")
        if extra.get("source"):
            text += f" Source: {extra['source']}."
        if extra.get("shapes_results") is False:
            text += " *May change when a run resumes.*"
        lines.append(f"| `{name}` | {_default(field)} | {_range(field.metadata)} | {text} |")
    return "\n".join(lines) + "\n"


def render(text: str) -> str:
    """`text` with every marked table regenerated."""

    def table(match: re.Match) -> str:
        name = match.group(2)
        if name not in MODELS:
            raise SystemExit(f"error: the page marks a table for unknown model {name!r}; known: {', '.join(MODELS)}")
        return match.group(1) + knob_table(MODELS[name]) + match.group(4)

    return TABLE.sub(table, text)


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        return "see its table" if isinstance(value, BaseModel) else f"`{value!r}`"
    if field.default is PydanticUndefined:
        return "required"
    value = field.default
    if isinstance(value, str) and len(value) > 30:
        return "(text)"
    return f"`{'none' if value is None else value}`"


def _range(metadata: list[Any]) -> str:
    parts = []
    for item in metadata:
        for kind, symbol in (
            (annotated_types.Gt, ">"),
            (annotated_types.Ge, "≥"),
            (annotated_types.Lt, "<"),
            (annotated_types.Le, "≤"),
        ):
            if isinstance(item, kind):
                parts.append(f"{symbol} {getattr(item, kind.__name__.lower())}")
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--check", action="store_true", help="exit 1 if the file is not up to date")
    args = parser.parse_args()
    text = args.path.read_text()
    fresh = render(text)
    if args.check:
        if fresh != text:
            sys.exit(
                f"{args.path}: knob tables differ from the config models; run python -m utu.config.docs {args.path}"
            )
        return
    args.path.write_text(fresh)


if __name__ == "__main__":
    main()
