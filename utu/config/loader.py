"""Load YAML configs with Hydra's compose API and validate them with pydantic.

Every error becomes a `ConfigError` whose message has one line per bad field, naming the YAML file that
field comes from, so a user knows exactly what to edit.
"""

import contextlib
import importlib.resources
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, ValidationError

from utu.config.models import AgentConfig, ModelConfig
from utu.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def config_root() -> Path:
    """The user's `configs/` folder: `UTU_CONFIG_DIR`, else `./configs`. Exports are written here, and a
    config here takes precedence over the packaged one of the same name."""
    env = os.environ.get("UTU_CONFIG_DIR")
    return Path(env).resolve() if env else Path.cwd() / "configs"


def packaged_configs() -> Path:
    """The configs shipped inside the package (in a checkout: the repository's `configs/`)."""
    return Path(str(importlib.resources.files("utu") / "_configs")).resolve()


def config_dirs() -> list[Path]:
    """Where configs are looked up, first match wins: the user's folder (if any), then the packaged one."""
    dirs = [config_root().resolve()] if config_root().is_dir() else []
    return dirs + [d for d in [packaged_configs()] if d not in dirs]


def find_config(group: str, name: str) -> Path:
    """The YAML file of `group/name` (first in `config_dirs()`); `ConfigError` listing what exists."""
    name = name.removesuffix(".yaml")
    for root in config_dirs():
        path = root / group / f"{name}.yaml"  # a name, never a path out of the group's folder ("/x", "../x")
        if path.is_file() and (root / group) in Path(os.path.normpath(path)).parents:
            return path
    available = sorted(
        {
            str(p.relative_to(root / group).with_suffix(""))
            for root in config_dirs()
            for p in (root / group).rglob("*.yaml")
        }
    )
    wanted: Path | str = config_root() / group / f"{name}.yaml"
    if Path(name).is_absolute() or ".." in Path(name).parts:
        wanted = f"{name}: a config name under {group}/, not a path"
    raise ConfigError(f"{wanted}: no such config; available under {group}/: {', '.join(available) or 'none'}")


@dataclass
class Composed:
    """A composed config: `data` resolved, `source` as written (`${...}` references kept, to export them as
    references), and the file of each package (dotted prefix -> YAML file), to name files in error messages."""

    data: dict
    source: dict
    files: dict[str, Path | str]  # a value given on the command line: "command line (key=value)"


GLOBAL_GROUPS = ("eval", "practice", "rl", "agents")  # whose configs hold a run's (or an agent's) settings at the top


def compose_config(group: str, name: str, overrides: list[str] | None = None) -> Composed:
    """Compose `configs/<group>/<name>.yaml` with overrides, once, into both the resolved and the written form.
    Defaults a user's config names may come from the packaged configs."""
    cfg, files = _compose(group, name, overrides)
    source = _to_dict(cfg, resolve=False)
    # a run's config without its package line: Hydra put its settings under the folder's name (for practice, one
    # level down its own `practice:` key), and they failed as unknown or missing fields
    if group in GLOBAL_GROUPS and isinstance(source.get(group), dict) and not has_package_header(Path(files[""])):
        raise ConfigError(
            f"{files['']}: its settings are under '{group}', where Hydra puts those of a config in a folder of that "
            "name: put '# @package _global_' on its first line"
        )
    try:
        data = _to_dict(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", "") or ""
        raise ConfigError(f"{_file_of(files, key)}: {key or 'config'}: {_one_line(e)}") from e
    return Composed(data, source, files)


def compose_dict(
    group: str, name: str, overrides: list[str] | None = None, resolve: bool = True
) -> tuple[dict, dict[str, Path | str]]:
    """`compose_config`'s resolved dict (with `resolve=False`: the dict as written) and files."""
    if resolve:
        composed = compose_config(group, name, overrides)
        return composed.data, composed.files
    cfg, files = _compose(group, name, overrides)
    return _to_dict(cfg, resolve=False), files


def written_value(group: str, name: str, key: str, overrides: list[str]) -> Any:
    """One value as the config's files give it: composed with the command line's other overrides (a `???` they
    fill, a reference they make resolvable), not those that set `key` or a key above it; resolved alone where it
    can be, else as written; None where even that cannot be read."""
    above = {".".join(key.split(".")[:n]) for n in range(1, key.count(".") + 2)}
    others = [o for o in overrides if o.split("=", 1)[0].lstrip("~+") not in above]
    try:
        cfg, _ = _compose(group, name, others)
        try:
            return OmegaConf.select(cfg, key, throw_on_missing=True)
        except OmegaConfBaseException:  # `${oc.env:MY_DATA}` with the variable unset
            parent, _, leaf = key.rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            return _to_dict(node, resolve=False).get(leaf) if isinstance(node, DictConfig) else None
    except (ConfigError, OmegaConfBaseException):
        return None


def _to_dict(cfg: DictConfig, resolve: bool, throw_on_missing: bool = False) -> dict:
    data = OmegaConf.to_container(cfg, resolve=resolve, throw_on_missing=throw_on_missing)
    assert isinstance(data, dict)  # a DictConfig's container is a dict (OmegaConf types it as any container)
    return data


def _compose(group: str, name: str, overrides: list[str] | None) -> tuple[DictConfig, dict[str, Path | str]]:
    primary = find_config(group, name)
    name = name.removesuffix(".yaml")
    # Hydra finds the primary config only in its config_dir: the folder that holds it (the user's, else the
    # packaged one); the others are searched for its defaults after it.
    root = next(d for d in config_dirs() if d in primary.parents)
    others = [d for d in config_dirs() if d != root]
    search = [f"hydra.searchpath=[{','.join(f'file://{d}' for d in others)}]"] if others else []
    given = given_on_the_command_line(overrides or [])  # one that does not parse is named as typed, first
    check_package_line(primary)
    try:
        with initialize_config_dir(config_dir=str(root), version_base="1.3"):
            cfg = compose(
                config_name=f"{group}/{name}",
                overrides=[*search, *map(_add_or_set, overrides or [])],
                return_hydra_config=True,
            )
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as e:
        missing = re.search(r"Could not (?:find|load) '/?agents/practice/([\w.-]+)'", str(e))
        hint = _practice_that_exports(missing.group(1)) if missing else None
        if hint:
            raise ConfigError(f"{primary}: its agent {hint}") from e
        message = _one_line(e)
        typed = _override_at_fault(message, overrides or [])
        raise ConfigError(f"command line ({typed}): {message}" if typed else f"{primary}: {message}") from e
    except UnicodeDecodeError as e:  # Hydra reads the primary config or one of its defaults: say which
        bad = [p for p in [primary, *_yaml_files()] if not _is_utf8(p)]
        path = next((p for p in bad if e.object in p.read_bytes()), bad[0] if bad else primary)
        byte = e.object[e.start]
        raise ConfigError(f"{path}: not UTF-8 text (byte {byte:#04x}); save it as UTF-8") from None
    except ValueError as e:  # Hydra's bare ValueErrors: a header line it cannot split, a group choice of null, ...
        raise ConfigError(_value_error_line(e, primary, overrides or [])) from e
    files: dict[str, Path | str] = {"": primary}
    for key, option in cfg.hydra.runtime.choices.items():
        if option is None or key.startswith("hydra/"):
            continue
        grp, _, package = key.partition("@")
        files[package] = find_config(grp.lstrip("/"), option)
    files |= _path_defaults(primary)
    files |= given
    OmegaConf.set_struct(cfg, False)
    del cfg["hydra"]
    return cfg, files


_PACKAGE_LINE = re.compile(r"\s*#\s*@package\b")
# How Hydra says an override could not be applied (to a key or a config group)
_OVERRIDE_FAILED = re.compile(
    r"Could not (?:override|delete|append)|Override \S+ looks like|Error merging override|force-add of config groups"
    r"|Ambiguous value|Config group override must be"
)


def _override_at_fault(message: str, overrides: list[str]) -> str | None:
    """The override, as typed, that a composition error is about: one Hydra could not apply (by the operation it
    names, then its key), or a group choice that names no file; None where the files are at fault."""
    if failed := _OVERRIDE_FAILED.search(message):
        sign = "+" if "append" in failed.group(0) else "~" if "delete" in failed.group(0) else ""
        candidates = [o for o in overrides if sign and o.startswith(sign)] or overrides
        by_key = [o for o in candidates if f"'{o.split('=', 1)[0].lstrip('~+')}'" in message or o in message]
        found = by_key or candidates
        return found[-1] if found else None
    # a group choice, `agents/practice@agent=nosuch`: "Could not find 'agents/practice/nosuch'"; a choice found whose
    # own defaults name a missing file is that file's fault ("In 'agents/practice/x': Could not find 'model/bse'")
    missing = re.search(r"Could not (?:find|load) '/?([^']*)'", message)
    if missing is None:
        return None
    for typed in overrides:
        key, _, option = typed.partition("=")
        group = key.split("@")[0]
        choice = f"{group.strip('/+')}/{option}"
        if "." not in group and not group.startswith("~") and missing.group(1).endswith(choice):
            return typed
    return None


def _value_error_line(e: ValueError, primary: Path, overrides: list[str]) -> str:
    """One line for a ValueError Hydra raised: a header line it cannot split is named in its file (the one whose
    header holds the line it quotes), else the override or the config it is about."""
    message = _one_line(e)
    quoted = re.search(r"(?:Too many components in|Expected header format: KEY VALUE, got) '(.*)'$", str(e))
    if quoted is not None:
        for path in [primary, *_yaml_files()]:
            header = _header(_text_of(path) or "")
            if any(line.strip().lstrip("#").strip() == quoted.group(1) for _, line in header):
                return _header_problem(path, header) or f"{path}: {message}"
    typed = _override_at_fault(message, overrides)
    return f"command line ({typed}): {message}" if typed else f"{primary}: {message}"


def check_package_line(path: Path) -> None:
    """Refuse a primary config whose `# @package` line Hydra would ignore: it reads one only in a file's header,
    the lines before any other (below a comment, an RL config's keys landed under `rl`, then failed as unknown),
    and not behind a byte-order mark. A default's does not matter where the defaults list names its package
    (`@agent`): practice's exported agents start with a comment."""
    text = _text_of(path)
    if text is None:
        return
    header = _header(text)
    if problem := _header_problem(path, header):
        raise ConfigError(problem)
    if _names_a_package(header):
        return
    for number, line in enumerate(text.splitlines(), 1):
        if _PACKAGE_LINE.match(line.removeprefix("\ufeff")) and not _inside_a_string(text, number):
            where = (
                "behind a byte-order mark: save the file as UTF-8 without one"
                if line.startswith("\ufeff")
                else "as '# @package _global_', its word then a space (not '@package:')"
                if number <= len(header)
                else "only at the top of a file, before any other line or comment: move it to the first line"
            )
            raise ConfigError(f"{path}:{number}: Hydra reads '# @package' {where}")


def _text_of(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # said by the composition, which reads it too


def _header(text: str) -> list[tuple[int, str]]:
    """Hydra's header of a config file's text, numbered: its first lines that are blank or `# @key value`, within
    the first 512 characters, all Hydra reads of it."""
    header = []
    for number, line in enumerate(text[:512].splitlines(), 1):
        if line.strip() and not re.match(r"\s*#\s*@", line):
            break
        header.append((number, line))
    return header


def _header_words(line: str) -> list[str]:
    """A header line's words as Hydra splits them: on spaces only (a tab is part of a word)."""
    return [word for word in line.strip().lstrip("#").strip().split(" ") if word]


def has_package_header(path: Path) -> bool:
    return _names_a_package(_header(_text_of(path) or ""))


def _names_a_package(header: list[tuple[int, str]]) -> bool:
    """Whether Hydra reads a package in a header (`# @package: x` is another key to it)."""
    return any(_header_words(line)[:1] == ["@package"] for _, line in header)


def _header_problem(path: Path, header: list[tuple[int, str]]) -> str | None:
    """`FILE:LINE: ...` for a header line Hydra refuses with a bare ValueError (a traceback): it splits each on
    spaces and takes exactly two words."""
    for number, line in header:
        if line.strip() and len(_header_words(line)) != 2:
            return (
                f"{path}:{number}: a '# @key value' line holds exactly two words, separated by spaces: {line.strip()!r}"
            )
    return None


def _inside_a_string(text: str, number: int) -> bool:
    """Whether line `number` of a YAML text is part of a string value (an agent's instructions), not a comment."""
    try:
        scalars = [t for t in yaml.scan(text) if isinstance(t, yaml.ScalarToken)]
    except yaml.YAMLError:
        return False  # the composition says what is wrong with it
    line = text.splitlines()[number - 1].strip()
    # (a block's span runs on over the comments after it: its value says whether the line is in it)
    return any(t.start_mark.line < number - 1 <= t.end_mark.line and line in t.value for t in scalars)


def _yaml_files() -> list[Path]:
    return [p for d in config_dirs() for p in sorted(d.rglob("*.yaml"))]


def _is_utf8(path: Path) -> bool:
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _add_or_set(override: str) -> str:
    """`key=value` sets the knob whether or not a YAML file wrote it (Hydra's `++`): the configs leave
    defaults out, and which keys a file happens to write is no business of the user's. The model
    validation still refuses a key that is no knob. Group choices (`agents/practice@agent=...`) and
    overrides with a prefix of their own (`+`, `~`, `++`) stay as they are."""
    return f"++{override}" if re.match(r"[A-Za-z_][\w.]*=", override) else override


def load_config(group: str, name: str, model: type[M], overrides: list[str] | None = None) -> M:
    """Compose and validate a config; raise `ConfigError` with one line per bad field."""
    composed = compose_config(group, name, overrides)
    return validate(composed.data, model, composed.files, composed.source)


def load_model_config(name: str = "base") -> ModelConfig:
    """`configs/model/<name>.yaml` (its settings sit under the `model` package)."""
    composed = compose_config("model", name)
    return validate(composed.data.get("model", {}), ModelConfig, composed.files, composed.source, within="model")


def load_agent_config(name_or_path: str) -> AgentConfig:
    """An agent from a config name under configs/agents/ (e.g. `practice/math_agent`) or a YAML file path."""
    path = _agent_file(name_or_path)
    if path is not None:
        return validate(_read_agent_file(path, resolve=True), AgentConfig, {"": path})
    return load_config("agents", name_or_path, AgentConfig)


def agent_source(name_or_path: str) -> dict:
    """The agent's settings as written, `${...}` references unresolved (to export them as references)."""
    path = _agent_file(name_or_path)
    if path is not None:
        return _read_agent_file(path, resolve=False)
    return compose_dict("agents", name_or_path, resolve=False)[0]


def _agent_file(name_or_path: str) -> Path | None:
    """The YAML file meant by `--agent_config`, or None for a config name under configs/agents/."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        return None
    if path.is_file():
        return path
    if any((root / "agents" / path).is_file() for root in config_dirs()):
        return None  # a config name written with its suffix
    raise ConfigError(f"{path}: no such file (an agent config is a YAML file or a name under configs/agents/)")


def _read_agent_file(path: Path, resolve: bool) -> dict:
    """An agent YAML file; a `defaults` list in it (`/model/base@model`, `/tools/...`) is composed against
    the config folders, as for an agent under configs/agents/."""
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
        if isinstance(data, dict) and "defaults" in data:
            search = f"hydra.searchpath=[{','.join(f'file://{d}' for d in config_dirs())}]"
            with initialize_config_dir(config_dir=str(path.resolve().parent), version_base="1.3"):
                cfg = compose(config_name=path.stem, overrides=[search])
            data = OmegaConf.to_container(cfg, resolve=resolve)
        elif resolve:
            data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: {_one_line(e)}") from e
    except UnicodeDecodeError as e:
        byte = e.object[e.start]
        raise ConfigError(f"{path}: not UTF-8 text (byte {byte:#04x} at offset {e.start}); save it as UTF-8") from None
    except ValueError as e:  # Hydra's bare ones: a header line it cannot split, a defaults item it cannot read
        raise ConfigError(_value_error_line(e, path, [])) from e
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of agent settings")
    if not data:  # (every setting at its default would make a run of an agent nobody configured)
        raise ConfigError(f"{path}: the file holds no agent settings; write at least its instructions or model")
    data.pop("defaults", None)
    return data


def validate(
    data: dict, model: type[M], files: Mapping[str, Path | str], source: dict | None = None, within: str = ""
) -> M:
    """`data` as `model`, or a `ConfigError` with a line per bad field that names where its value came from.
    `source`: the config as written, to name the variable a `${oc.env:...}` value came from; `within`: the
    package `data` was taken from."""
    try:
        return model.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            shown = err["type"] != "missing" and not isinstance(err["input"], dict | list)
            got = f" (got {err['input']!r})" if shown else ""
            message = err["msg"].removeprefix("Value error, ")  # a validator's own sentence
            full_key = ".".join(filter(None, (within, key)))
            variables = _env_variables(source, full_key) if shown else []
            origin = f" (from {' / '.join(variables)}, in the environment or .env)" if variables else ""
            lines.append(f"{_file_of(files, full_key)}: {key + ': ' if key else ''}{message}{got}{origin}")
        raise ConfigError("\n".join(lines)) from e


def _env_variables(source: dict | None, key: str) -> list[str]:
    """The environment variables a value written as `${oc.env:NAME,...}` reads."""
    value = _written(source, key.split("."))
    return re.findall(r"oc\.env:([A-Za-z_]\w*)", value) if isinstance(value, str) else []


def _written(tree: object, path: list[str]) -> object:
    """The value at `path` in a config as written, or None."""
    for part in path:
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def given_on_the_command_line(overrides: list[str]) -> dict[str, str]:
    """Each key a `key=value` (or `~key`) override sets, a dict value's keys one by one -> "command line (the
    override as typed)"; a later override of a key replaces an earlier one. Group choices (`agents/practice@agent=x`)
    name files, not values, and are left out."""
    parser = OverridesParser.create()
    given: dict[str, str] = {}
    for typed in overrides:
        try:
            [override] = parser.parse_overrides([_add_or_set(typed)])
        except OverrideParseException as e:
            message = _one_line(e).split(" See https://")[0]
            raise ConfigError(
                f"command line ({typed}): cannot parse it ({message}); quote a value with spaces or non-ASCII text"
            ) from None
        if "/" in override.key_or_group or override.package is not None:
            continue
        value = None if override.is_delete() else override.value()
        for key in _leaves(override.key_or_group, value):
            given.pop(key, None)  # re-inserted last: the latest override wins
            given[key] = f"command line ({typed})"
    return given


def _leaves(key: str, value: object) -> list[str]:
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(f"{key}.{k}", v)]
    return [key]


def _file_of(files: Mapping[str, Path | str], key: str) -> Path | str:
    """Where `key`'s value came from: the command line if an override set it (or a key above it), else the file of
    the deepest package that contains it; the command line too for a key no file has, above one an override
    set (`foo` of `foo.bar=1`, refused as an unknown knob)."""
    given = [where for k, where in files.items() if isinstance(where, str) and (key == k or key.startswith(k + "."))]
    if given:
        return given[-1]
    written = _file_that_wrote(files, key)
    if written is not None:
        return written
    best = ""
    for package, where in files.items():
        in_package = package and (key == package or key.startswith(package + "."))
        if isinstance(where, Path) and in_package and len(package) > len(best):
            best = package
    below = [where for k, where in files.items() if isinstance(where, str) and k.startswith(key + ".")]
    return below[-1] if not best and below else files[best]


def _file_that_wrote(files: Mapping[str, Path | str], key: str) -> Path | None:
    """Of the files whose package holds `key` and that write it, the one whose value Hydra keeps: a file's own
    keys come after its defaults' (`_self_` last, or not listed), so it wins over the files it includes, unless
    it lists `_self_` before them."""
    chain = sorted(
        ((package, where) for package, where in files.items() if isinstance(where, Path)),
        key=lambda item: -len(item[0]),  # deepest first: a file's defaults are deeper than it
    )
    winner = None
    for package, where in chain:
        if package and not (key == package or key.startswith(package + ".")):
            continue
        relative = key[len(package) + 1 :] if package else key
        document = _read_yaml(where)
        if _written(document, relative.split(".")) is None:
            continue
        defaults = document.get("defaults") if isinstance(document, dict) else None
        entries = defaults if isinstance(defaults, list) else []
        self_first = "_self_" in entries and entries.index("_self_") < len(entries) - 1
        winner = (winner or where) if self_first else where  # one that lists _self_ first yields to its defaults
    return winner


def _read_yaml(path: Path) -> object:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None


def _path_defaults(primary: Path) -> dict[str, Path]:
    """Package -> file for defaults written as a path (`- /agents/practice/my_agent@agent`, Youtu-Agent's form),
    which Hydra does not list among its choices."""
    try:
        defaults = yaml.safe_load(primary.read_text()).get("defaults") or []
    except (OSError, yaml.YAMLError, AttributeError):
        return {}
    files = {}
    for entry in defaults:
        if isinstance(entry, str) and entry.startswith("/") and "@" in entry:
            where, _, package = entry.partition("@")
            group, _, name = where.strip("/").rpartition("/")
            with contextlib.suppress(ConfigError):
                files[package] = find_config(group, name)
    return files


def _practice_that_exports(agent: str) -> str | None:
    """'agents/practice/<agent>.yaml does not exist yet: <the practice command that writes it>', if one does."""
    for root in config_dirs():
        for path in sorted((root / "practice").rglob("*.yaml")):
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:  # a link to nothing: not the config being loaded, so not this error's to report
                continue
            exported = re.search(rf"^export_agent:\s*['\"]?{re.escape(agent)}['\"]?\s*$", text, re.M)
            by_exp_id = (
                agent.endswith("_agent")
                and "export_agent:" not in text
                and re.search(rf"^exp_id:\s*['\"]?{re.escape(agent.removesuffix('_agent'))}['\"]?\s*$", text, re.M)
            )  # (the default export: <exp_id>_agent, as Youtu-Agent writes it)
            if exported or by_exp_id:
                name = path.relative_to(root / "practice").with_suffix("")
                return (
                    f"configs/agents/practice/{agent}.yaml does not exist yet: it is written by practice, "
                    f"`python scripts/run_training_free_GRPO.py --config_name {name}`"
                )
    return None


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())
