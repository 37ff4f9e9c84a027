"""Where practice starts: an empty library, or one learned before (multi-stage practice).

Practising on an easier set and then on harder examples means starting the second stage from the first
stage's library. It comes either from the agent config (an exported enhanced agent carries its library
under `experiences`) or from `practice.init_library`:

    init_library: P@last          # experiment P, its last step (or @best, or @3)
    init_library: runs/P/enhanced_agent.yaml   # a YAML/JSON file: an agent with `experiences`, or id -> text
"""

import json
import re
from pathlib import Path

import yaml

from utu.db import Database
from utu.errors import ConfigError
from utu.practice.library import Library
from utu.practice.store import PracticeStore
from utu.practice.types import StepStats

REFERENCE = re.compile(r"^(?P<exp_id>[\w.\-]+)@(?P<step>best|last|\d+)$")


async def initial_library(db: Database, spec: str | None, agent_experiences: dict[str, str]) -> Library:
    """The library before step 0. Two sources at once would leave one unused: refused, not guessed."""
    if spec and agent_experiences:
        raise ConfigError(
            f"practice.init_library ({spec}) and the agent config's own {len(agent_experiences)} experiences both "
            "give a starting library: use one (an enhanced agent already carries its library)"
        )
    if not spec:
        return library_of(dict(agent_experiences))
    match = REFERENCE.match(spec)
    if match and not Path(spec).exists():
        return await _from_experiment(db, match["exp_id"], match["step"])
    return library_of(_from_file(Path(spec)))


def library_of(experiences: dict[str, str]) -> Library:
    """A library holding these experiences; new ids continue after the highest "G<n>"."""
    numbers = [int(m[1]) for key in experiences if (m := re.fullmatch(r"G(\d+)", key))]
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
            raise ConfigError(f"{what} best: no step was scored; set practice.validation (or do_eval)")
        return -max(scored)[1]
    return int(which)


async def _from_experiment(db: Database, exp_id: str, which: str) -> Library:
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
    if not path.is_file():
        raise ConfigError(f"{where}: no such file (expected EXP_ID@STEP, or a YAML/JSON file)")
    try:
        data = json.loads(path.read_text()) if path.suffix == ".json" else yaml.safe_load(path.read_text())
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{where}: cannot read it: {' '.join(str(e).split())[:200]}") from e
    if isinstance(data, dict) and isinstance(data.get("experiences"), dict):
        data = data["experiences"]  # an (enhanced) agent config
    if not isinstance(data, dict) or not all(isinstance(v, str) and v.strip() for v in data.values()):
        raise ConfigError(f"{where}: expected a mapping id -> experience text, or an agent with `experiences`")
    return {str(key): text.strip() for key, text in data.items()}
