"""Where practice starts: an empty library, or one learned before (multi-stage practice).

Practising on an easier set and then on harder examples means starting the second stage from the first
stage's library. It comes either from the agent config (an exported enhanced agent carries its library
under `experiences`) or from `practice.init_library`:

    init_library: P@last          # experiment P, its last step (or @best, or @3)
    init_library: runs/P/enhanced_agent.yaml   # a YAML/JSON file: an agent with `experiences`, or id -> text
"""

import argparse
import json
import re
from pathlib import Path

import yaml

from utu.cli import DB_INT_MAX, step_argument
from utu.config.loader import load_agent_config
from utu.config.models import AgentConfig, PracticeArguments
from utu.db import Database
from utu.db.dataset_io import one_value_per_key
from utu.errors import ConfigError
from utu.names import is_plain_name
from utu.practice.library import Library
from utu.practice.store import PracticeStore
from utu.practice.types import StepStats

# The keys of an agent config (its settings, and a defaults list): a library file with these beside `experiences`
# is an agent's, read through OmegaConf as `--agent_config` reads it (practice's exports escape `${`).
AGENT_KEYS = {*AgentConfig.model_fields, "defaults"}


async def initial_library(db: Database, spec: str | None, agent_experiences: dict[str, str]) -> Library:
    """The library before step 0. Two sources at once would leave one unused: refused, not guessed."""
    if spec and agent_experiences:
        raise ConfigError(
            f"practice.init_library ({spec}) and the agent config's own {len(agent_experiences)} experiences both "
            "give a starting library: use one (an enhanced agent already carries its library)"
        )
    if not spec:
        return library_of(dict(agent_experiences), _source(spec))
    named = None if Path(spec).exists() else reference(spec, "practice.init_library ")  # (a file may have an @)
    if named:
        return await _from_experiment(db, *named)
    return library_of(_from_file(Path(spec)), _source(spec))


def _source(spec: str | None) -> str:
    return f"practice.init_library {spec}" if spec else "the agent config's experiences"


def check_starting_library(library: Library, practice: PracticeArguments) -> None:
    """Refuse, before any work, a starting library this practice could not have grown: more experiences than
    `max_experiences`, or (screening on) a text longer than the screening lets a learned one be."""
    source, cap, screening = _source(practice.init_library), practice.max_experiences, practice.screening
    if cap is not None and len(library.experiences) > cap:
        raise ConfigError(
            f"{source}: {len(library.experiences)} experiences, more than practice.max_experiences ({cap}); "
            "raise the cap or start from fewer"
        )
    for key, text in library.experiences.items() if screening.enabled else ():
        if len(text) > screening.max_chars:
            raise ConfigError(
                f"{source}: experience {key} is {len(text)} characters long, more than the screening lets a learned "
                f"one be (practice.screening.max_chars: {screening.max_chars}); shorten it, or raise the limit"
            )


def reference(text: str, where: str = "") -> tuple[str, str | int] | None:
    """EXP_ID@STEP as (the experiment, its step: a number, best or last); None if `text` names no experiment,
    a `ConfigError` (`where` before its text) if it names an experiment and no step."""
    exp_id, at, step = text.rpartition("@")
    if not at or not is_plain_name(exp_id) or any(c in step for c in "./\\"):  # "my@lib.yaml": a file
        return None
    try:
        return exp_id, step_argument(step)
    except argparse.ArgumentTypeError as e:
        raise ConfigError(f"{where}{text}: {e}") from None


def library_of(experiences: dict[str, str], source: str) -> Library:
    """A library holding these experiences (from `source`, as an error names it); new ids continue after the
    highest "G<n>"."""
    numbers = [int(m[1]) for key in experiences if (m := re.fullmatch(r"G(\d+)", key))]
    if max(numbers, default=0) >= DB_INT_MAX:  # the ids that follow would not fit the database's integers
        raise ConfigError(f"{source}: experience id G{max(numbers)}: too large a number; renumber the library from G0")
    return Library(experiences, max(numbers, default=-1) + 1)


def pick_step(steps: list[StepStats], which: str | int, what: str) -> int:
    """The step `which` names: a number, `last`, or `best` (highest validation or eval score, earliest on ties)."""
    if not steps:
        raise ConfigError(f"{what}: no practice step has been recorded")
    if which == "last":
        return max(s.step for s in steps)
    if which == "best":
        scored = [(s.score, -s.step) for s in steps if s.score is not None]
        if not scored:
            raise ConfigError(
                f"{what}: 'best' needs a scored step and none was (no validation or in-step evaluation of a "
                "changed library); name `last` or a step number"
            )
        return -max(scored)[1]
    if int(which) not in {s.step for s in steps}:
        recorded = sorted(s.step for s in steps)
        raise ConfigError(f"{what}: no step {which}; the steps recorded are {recorded[0]} to {recorded[-1]}")
    return int(which)


async def _from_experiment(db: Database, exp_id: str, which: str | int) -> Library:
    return (await library_at(db, exp_id, which, f"practice.init_library {exp_id}@{which}"))[0]


async def library_at(db: Database, exp_id: str, which: str | int, what: str) -> tuple[Library, int]:
    """Experiment `exp_id`'s library after step `which` (a number, best or last), and that step's number."""
    store = PracticeStore(db, exp_id)
    step = pick_step(await store.steps(), which, what)
    library = await store.snapshot(step)
    if library is None:
        raise ConfigError(f"{what}: experiment {exp_id!r} has no library at step {step} (is --db_url the same?)")
    return library, step


def _from_file(path: Path) -> dict[str, str]:
    where = f"practice.init_library {path}"
    if path.is_dir():
        raise ConfigError(f"{where}: that is a folder; name a YAML/JSON file (or EXP_ID@STEP)")
    if not path.is_file():
        raise ConfigError(f"{where}: no such file (expected EXP_ID@STEP, or a YAML/JSON file)")
    if path.suffix.lower() == ".md":
        raise ConfigError(f"{where}: a Markdown export is for reading; export the library as .yaml or .json")
    try:
        text = path.read_text(encoding="utf-8-sig")  # (a byte-order mark is no part of the text)
        if path.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=one_value_per_key)  # (json keeps the last)
        else:
            data = yaml.load(text, Loader=_EachKeyOnce)  # a SafeLoader
    except yaml.MarkedYAMLError as e:  # (its own text names the file "<unicode string>")
        line = f":{e.problem_mark.line + 1}" if e.problem_mark else ""
        raise ConfigError(f"{path}{line}: practice.init_library: cannot read it: {e.problem or e.context}") from e
    except (OSError, ValueError, yaml.YAMLError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else " ".join(str(e).split())[:200]
        raise ConfigError(f"{where}: cannot read it: {why}") from e
    if isinstance(data, dict) and "experiences" in data:  # an (enhanced) agent config, or an export
        # an agent's texts as `--agent_config` reads them; a mapping id -> text, JSON and an export's, as written
        settings = data.keys() - {"exp_id", "step", "experiences"}
        agent = bool(settings) and settings <= AGENT_KEYS and path.suffix.lower() in (".yaml", ".yml")
        data = load_agent_config(str(path)).experiences if agent else data["experiences"]
    elif isinstance(data, dict) and "instructions" in data:
        raise ConfigError(f"{where}: an agent config without `experiences`: it holds no library to start from")
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping id -> experience text, or an agent with `experiences`")
    if not data:
        raise ConfigError(f"{where}: it holds no experience; to start from an empty library, leave init_library out")
    for key, text in data.items():
        if isinstance(key, bool) or not isinstance(key, str | int) or not re.fullmatch(r"[\w.-]+", str(key)):
            raise ConfigError(f"{where}: {key!r} is no experience id (letters, digits, '.', '-', '_': G0, G1, ...)")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{where}: experience {key}: expected its text, got {type(text).__name__} {text!r:.40}")
    return {str(key): text.strip() for key, text in data.items()}


class _EachKeyOnce(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that gives a key twice (it keeps the last, silently); keys are
    compared as the ids they become ("1" and 1 are one id)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *base" brings keys the mapping's own may override
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, bool) or not isinstance(key, str | int):
                continue  # (refused as no id later, or by the loader itself if it cannot be a key)
            if str(key) in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice", key_node.start_mark
                )
            seen.add(str(key))
        return super().construct_mapping(node, deep)
