"""Command-line flags derived from the config models: the type, choices and help text of `--name` come from
the field `name`, so a flag can never drift from the knob it sets."""

import argparse
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined


def parse_bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_flags(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    names: Iterable[str] | None = None,
    prefix: str = "",
    over_a_config: bool = True,
) -> list[str]:
    """A `--<prefix>name` flag for each scalar field of `model` (or only for `names`), default None (= not
    given). Returns the field names it added, to pick the given values out of the parsed arguments.
    `over_a_config`: a flag not given leaves the config file's value, which the help says before the knob's."""
    wanted = list(names) if names is not None else list(model.model_fields)
    added = []
    for name in wanted:
        field = model.model_fields[name]
        kind = _scalar(field.annotation)
        if kind is None:
            if names is not None:
                raise TypeError(f"{model.__name__}.{name} is not a scalar field")
            continue
        knob = None if field.default is PydanticUndefined else _show(field.default)
        if over_a_config:
            default = "default: the config's" + ("" if knob is None else f", else {knob}")
        else:
            default = "no default" if knob is None else f"default: {knob}"
        options: dict[str, Any] = {"default": None, "help": f"{field.description} ({default})"}
        if kind is bool:
            options |= {"type": parse_bool, "metavar": "{true,false}"}
        elif get_origin(kind) is Literal:
            options |= {"choices": list(get_args(kind))}
        elif kind is not field.annotation:  # `int | None`: "none" sets None
            options |= {"type": _or_none(kind), "metavar": kind.__name__.upper()}
        else:
            options["type"] = kind
        parser.add_argument(f"--{prefix}{name}", **options)
        added.append(name)
    return added


def add_db_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db_url", help="SQLAlchemy URL (default: UTU_DB_URL, else ./utu.db)")


def add_place_flags(parser: argparse.ArgumentParser, outputs: str) -> None:
    """`--db_url` and `--output_dir`, the same on every command; `outputs` says what OUTPUT_DIR/<exp_id>/ holds."""
    add_db_flag(parser)
    parser.add_argument("--output_dir", type=Path, default=Path("runs"), help=f"OUTPUT_DIR/<exp_id>/ holds {outputs}")


class _NoneGiven:
    """`--knob none`: the knob set to None (the default of every flag, None, means "not given")."""

    def __repr__(self) -> str:
        return "none"


NONE_GIVEN = _NoneGiven()


def _or_none(kind: type) -> Any:
    def parse(text: str) -> Any:
        if text.lower() in ("none", "null"):
            return NONE_GIVEN
        try:
            return kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__} or none, got {text!r}") from None

    return parse


def given(args: argparse.Namespace, names: Iterable[str], prefix: str = "") -> dict[str, Any]:
    """The flags among `names` that were given on the command line (`none` given as None)."""
    values = {name: getattr(args, prefix + name) for name in names}
    return {name: None if value is NONE_GIVEN else value for name, value in values.items() if value is not None}


def _scalar(annotation: Any) -> Any:
    """int, float, str, bool or a Literal (also inside `X | None`); None for anything else."""
    if get_origin(annotation) in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return _scalar(options[0]) if len(options) == 1 else None
    if annotation in (int, float, str, bool) or get_origin(annotation) is Literal:
        return annotation
    return None


def _show(value: Any) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= 40 else text[:37] + "..."
