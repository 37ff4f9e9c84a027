"""Training-Free GRPO from Python: the whole practice run behind `utu-practice`, as one object.

    from utu.practice import TrainingFreeGRPO, run_practice

    outcome = run_practice("local_mawps", exp_id="mine", overrides=["practice.epochs=1"])
    print(outcome.agent_path, outcome.library.experiences)

    # or, inside async code, from a config object:
    config = load_practice_config("math_reasoning", ["practice.grpo_n=3"])
    outcome = await TrainingFreeGRPO(config, db_url="sqlite:///runs/p.db").run()

A run that learned nothing raises `RunFailed` (nothing is exported); bad configs raise `ConfigError`.
"""

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path

from utu.app import Claim, check_claim, claim_experiment
from utu.config import TrainingFreeGRPOConfig, config_root
from utu.config.loader import compose_config, validate
from utu.config.models import TopUpConfig, check_run_size, shaping_dump
from utu.db import Database
from utu.db.dataset_io import check_dataset_reachable, content_digest, ensure_dataset, select_questions
from utu.db.models import DatasetSample
from utu.errors import ConfigError, RunFailed
from utu.names import inside, writable_folder
from utu.practice.data_manager import PracticeData
from utu.practice.export import (
    check_export_target,
    export_paths,
    forget_outputs,
    practice_agent_path,
    write_outputs,
)
from utu.practice.initial import check_starting_library, initial_library, pick_step
from utu.practice.library import Library
from utu.practice.loop import PracticeLoop, PracticeResult
from utu.practice.parts import open_practice
from utu.practice.plan import PracticePlan, planned_steps, practice_plan
from utu.practice.store import EVAL_PREFIX, PracticeStore
from utu.practice.types import StepStats
from utu.tracing import setup_tracing
from utu.verify import check_answers, file_digest, load_verifier

log = logging.getLogger("practice")


@dataclass
class PracticeOutcome:
    """What a practice run produced: the exported library, every step's statistics, the files written."""

    library: Library
    steps: list[StepStats] = field(default_factory=list)
    initial: Library = field(default_factory=Library)
    agent_path: Path | None = None  # runs/<exp_id>/enhanced_agent.yaml
    files: dict[str, Path] = field(default_factory=dict)


def load_practice_config(name: str, overrides: list[str] | None = None) -> TrainingFreeGRPOConfig:
    """`configs/practice/<name>.yaml` with Hydra overrides (`key=value`), validated."""
    return load_practice(name, overrides)[0]


def load_practice(name: str, overrides: list[str] | None = None) -> tuple[TrainingFreeGRPOConfig, dict | None]:
    """The config, and its agent as its files write it (`agent_as_written`)."""
    composed = compose_config("practice", name, overrides)
    config = validate(composed.data, TrainingFreeGRPOConfig, composed.files, composed.source)
    return config, agent_as_written(composed.source)


def agent_as_written(practice_source: dict) -> dict:
    """The practice config's agent (`evaluation.agent`) as its files write it, before interpolation: the export
    keeps its `${oc.env:...}` references, so the enhanced agent uses the endpoint and keys of when it is used."""
    return practice_source.get("evaluation", {}).get("agent", {})


@dataclass
class _Checked:
    initial: Library
    shaping: dict
    plan: PracticePlan


class TrainingFreeGRPO:
    """One practice run. `config`: a `TrainingFreeGRPOConfig` or the name of a practice config."""

    def __init__(
        self,
        config: TrainingFreeGRPOConfig | str,
        *,
        db_url: str | None = None,
        output_dir: Path | str = "runs",
        fresh: bool = False,
        pipeline: bool = True,
        export_step: str | int = "last",
        export_to: str | None = None,
        agent_source: dict | None = None,
    ):
        if isinstance(config, str):
            config, written = load_practice(config)
            agent_source = written if agent_source is None else agent_source
        if fresh:  # every step recomputed, as --fresh does (the loop reuses the steps restart_step leaves)
            config = config.model_copy(update={"practice": config.practice.model_copy(update={"restart_step": 0})})
        self.config = config
        self.db_url = db_url
        self.run_dir = inside(Path(output_dir), self.config.exp_id)  # names and paths are checked before any work
        writable_folder(self.run_dir)
        self.fresh = fresh
        self.pipeline = pipeline
        self.export_step = export_step
        self.export_to = export_to
        # the agent as written (with ${oc.env:...}), so the export keeps the references
        self.agent_source = agent_source
        # why the enhanced agent goes to runs/<exp_id>/ only, said again at the end (None: it does not)
        self.export_agent, self.not_exported_because = self.config.export_agent, None
        if not self.export_agent:
            self.export_agent, self.not_exported_because = default_export_agent(self.config.exp_id)
        if self.config.export_agent:
            agent_path = practice_agent_path(config_root(), self.config.export_agent)
            writable_folder(agent_path.parent, f"set export_agent to null (the agent still goes to {self.run_dir})")
        if export_to is not None:
            check_export_target(config_root(), export_to)
            if export_to == self.export_agent:
                raise ConfigError(
                    f"--export_to {export_to}: practice writes the enhanced agent to configs/agents/practice/"
                    f"{export_to}.yaml already (export_agent); choose another name, or leave out --export_to"
                )
            for folder in {path.parent for path in export_paths(config_root(), export_to)}:
                writable_folder(folder, "leave out --export_to")
        ev = self.config.evaluation
        self.verify = load_verifier(ev.verify_filename, ev.verify_func_name)  # one that cannot load fails now

    async def run(self) -> PracticeOutcome:
        """Practise, then export the enhanced agent; `RunFailed` if the library did not change."""
        outcome = await self.learn()
        self.export(outcome)
        return outcome

    async def learn(self) -> PracticeOutcome:
        """Every step (reusing what is stored), and the library `export_step` names; nothing written to files."""
        config = self.config
        setup_tracing()
        async with contextlib.AsyncExitStack() as resources:
            db = await resources.enter_async_context(Database(self.db_url))  # its URL checked, nothing opened
            # every client answers its preflight call before anything is written: a dead endpoint leaves no trace
            parts = await open_practice(resources, config, self.verify, self.run_dir)
            initial = await self._prepare(resources, db)
            loop = parts.loop(config, db, initial, pipeline=self.pipeline)
            result = await loop.run()
            library = await chosen_library(loop, result, self.export_step)
        return PracticeOutcome(library, result.steps, initial)

    def _datasets(self) -> list[str]:
        """The data sets this practice reads: practice, in-step evaluation, validation."""
        config, validation = self.config, self.config.practice.validation
        needed = [
            config.data.practice_dataset_name,
            config.evaluation.data.dataset if config.practice.do_eval else None,
            validation.dataset if validation else None,
        ]
        return list(dict.fromkeys(filter(None, needed)))

    async def plan(self) -> PracticePlan:
        """What this practice would spend on its agent (`--plan`): its data and its claim on the experiment checked as
        a run checks them, no model called, nothing of the experiment taken or written (a bundled data set is loaded
        into the database, as a run does)."""
        async with Database(self.db_url) as db:
            checked = await self._checked(db)
            await check_claim(db, self._claim(checked))
            return checked.plan

    async def _prepare(self, resources: contextlib.AsyncExitStack, db: Database) -> Library:
        """Data sets checked and the experiment claimed (released with `resources`); the initial library."""
        config, checked = self.config, await self._checked(db)
        await claim_experiment(resources, db, self._claim(checked))
        if self.fresh:
            agent = practice_agent_path(config_root(), self.export_agent) if self.export_agent else None
            forget_outputs(config.exp_id, self.run_dir, agent)
        log.info("%s", checked.plan.describe())  # after the claim: a resume it refuses is said in one line
        return checked.initial

    def _claim(self, checked: _Checked) -> Claim:
        """What this practice claims: its experiment, the attempt rows of its epochs and of its in-step evaluations."""
        config = self.config
        epoch_ids = [PracticeData.epoch_exp_id_of(config.exp_id, e) for e in range(config.practice.epochs)]
        in_step_evals = (EVAL_PREFIX.format(config.exp_id),) if config.practice.do_eval else ()
        return Claim(config.exp_id, "practice", checked.shaping, epoch_ids, self.fresh, in_step_evals)

    async def _checked(self, db: Database) -> _Checked:
        """Every data set this practice reads, selected and checked before any work; what shapes its results."""
        config, ev = self.config, self.config.evaluation
        for name in self._datasets():
            check_dataset_reachable(db, name)  # before the database file is made
        await db.create_tables()
        for name in self._datasets():
            await ensure_dataset(db, name)
        practice_set = config.data.practice_dataset_name
        questions = await select_questions(db, practice_set, config.data.rollout_data_truncate)
        if questions and len(questions) < (config.data.rollout_data_truncate or 0):
            log.warning(
                "data set %s holds %d questions, fewer than rollout_data_truncate %d: practising on those",
                *(practice_set, len(questions), config.data.rollout_data_truncate),
            )
        check_answers(self.verify, questions, practice_set)
        initial = await initial_library(db, config.practice.init_library, ev.agent.experiences)
        check_starting_library(initial, config.practice)
        if initial.experiences:
            log.info("starting from a library of %d experiences", len(initial.experiences))
        shaping = shaping_config(config, content_digest(questions)) | {"initial_library": initial.experiences}
        steps = planned_steps(config, len(questions))
        reserve, validation, evaluated = [], [], 0
        if config.practice.top_up:
            reserve = await self._reserve(db, steps, config.practice.top_up)
            shaping["data"]["reserve"] = content_digest(reserve)
        if config.practice.validation:
            validation = await self._validation_questions(db, questions)
            shaping["practice"]["validation"]["content"] = content_digest(validation)
        if config.practice.do_eval:
            evaluated = await self._check_in_step_eval(db)
        if verifier := file_digest(self.verify):  # its steps learned from the rewards it gave
            shaping["evaluation"]["verify_file_sha256"] = verifier
        self._check_export_step(steps)
        restart = config.practice.restart_step  # (0 with fresh)
        saved = await PracticeStore(db, config.exp_id).saved_steps(steps if restart is None else min(steps, restart))
        plan = practice_plan(config, len(questions), len(reserve), len(validation), evaluated, saved)
        return _Checked(initial, shaping, plan)

    async def _check_in_step_eval(self, db: Database) -> int:
        """The in-step evaluation's questions, checked before any work, not at the end of the first step: it
        selects some, answers the verifier reads, and not more attempts than a run takes. Returns how many."""
        data, pass_k = self.config.evaluation.data, self.config.evaluation.pass_k
        limit = self.config.data.eval_data_truncate or data.limit  # as PracticeLoop.evaluate selects them
        questions = await select_questions(db, data.dataset, limit, data.offset)
        if not questions:
            raise ConfigError(
                f"practice.do_eval: evaluation data set {data.dataset!r} has no question at offset {data.offset}: "
                "lower evaluation.data.offset, or upload more questions"
            )
        try:
            remedy = "lower evaluation.pass_k or data.eval_data_truncate"
            check_run_size(len(questions), pass_k, "the in-step evaluation's ", remedy)
        except ValueError as e:
            raise ConfigError(f"practice.do_eval: {e}") from None
        check_answers(self.verify, questions, data.dataset)
        return len(questions)

    async def _reserve(self, db: Database, steps: int, top_up: TopUpConfig) -> list[DatasetSample]:
        """The questions `practice.top_up` may roll out in `steps` steps (PracticeData.reserve), checked: none of
        the validation questions (whose docs suggest the slice past the practised ones), answers the verifier
        reads; fewer than the steps may need is said."""
        config, v = self.config, self.config.practice.validation
        name, first, per_step = (
            config.data.practice_dataset_name,
            config.data.rollout_data_truncate or 0,
            top_up.questions,
        )
        end = first + steps * per_step
        if v and v.dataset == name and v.offset < end and first < v.offset + v.size:
            raise ConfigError(
                f"practice.top_up's reserve is {name} questions {first}-{end - 1} (rollout_data_truncate {first} + "
                f"{steps} steps x top_up.questions {per_step}), and practice.validation takes {v.offset}-"
                f"{v.offset + v.size - 1} of it: move the validation offset past {end - 1}"
            )
        reserve = await select_questions(db, name, end - first, first)
        if len(reserve) < end - first:
            log.warning(
                "practice.top_up: %s holds %d reserve questions of the %d its steps may take",
                name,
                len(reserve),
                end - first,
            )
        check_answers(self.verify, reserve, name)
        return reserve

    async def _validation_questions(self, db: Database, practised: list[DatasetSample]) -> list[DatasetSample]:
        """The gate's questions, checked before any work: a slice that selects none would decide every update on
        nothing, and answers the verifier cannot read would score every library alike. `practised`: the practice
        questions, which the gate's should not be."""
        v = self.config.practice.validation
        assert v is not None
        questions = await select_questions(db, v.dataset, v.size, v.offset)
        if not questions:
            raise ConfigError(
                f"practice.validation: data set {v.dataset!r} has no question at offset {v.offset}: lower "
                "practice.validation.offset, or upload more questions"
            )
        if len(questions) < v.size:
            log.warning(
                "practice.validation: %s holds %d questions from offset %d, not the %d of validation.size",
                v.dataset,
                len(questions),
                v.offset,
                v.size,
            )
        data = self.config.data
        last = v.offset + len(questions) - 1
        practised_last = last if data.rollout_data_truncate is None else min(last, data.rollout_data_truncate - 1)
        if v.dataset == data.practice_dataset_name and v.offset <= practised_last:
            log.warning(
                "practice.validation: %s questions %d-%d are practice questions too: the gate then judges on what "
                "practice learned from; set practice.validation.offset past them (or rollout_data_truncate)",
                *(v.dataset, v.offset, practised_last),
            )
        elif v.dataset != data.practice_dataset_name:  # another set, maybe the same questions under another name
            texts = {" ".join(q.question.split()) for q in practised}
            shared = sum(" ".join(q.question.split()) in texts for q in questions)
            if shared:
                log.warning(
                    "practice.validation: %d of its %d questions (%s) are practice questions too (%s, by their text):"
                    " the gate then judges on what practice learned from; validate on other questions",
                    *(shared, len(questions), v.dataset, data.practice_dataset_name),
                )
        check_answers(self.verify, questions, v.dataset)
        return questions

    def _check_export_step(self, steps: int) -> None:
        """A step number past the run's last step (of `steps`) is refused before any work, not after the whole run."""
        if self.export_step == "best" and not (self.config.practice.validation or self.config.practice.do_eval):
            raise ConfigError(
                "--export_step best: no step of this practice is scored; set practice.validation (or do_eval), "
                "or export `last` or a step number"
            )
        if self.export_step in ("last", "best"):
            return
        if not 0 <= int(self.export_step) < steps:
            raise ConfigError(f"--export_step {self.export_step}: this practice has steps 0 to {steps - 1}")

    def export(self, outcome: PracticeOutcome) -> dict[str, Path]:
        """Write the enhanced agent (and with `export_to` the configs); `RunFailed` if nothing was learned."""
        check_learned(outcome)
        outcome.files = write_outputs(
            self.config.evaluation,
            outcome.library,
            exp_id=self.config.exp_id,
            output_dir=self.run_dir,
            export_to=self.export_to,
            configs=config_root(),
            agent_source=self.agent_source,
            export_agent=self.export_agent,
        )
        outcome.agent_path = outcome.files["agent"]
        return outcome.files


def default_export_agent(exp_id: str) -> tuple[str | None, str | None]:
    """Where Youtu-Agent always writes the enhanced agent: configs/agents/practice/<exp_id>_agent.yaml (the
    agent its guide's next eval config names), when the user has a configs/ folder (utu never makes one
    unasked), and None; or None and why not, said in a warning, if a file there is not practice's own."""
    if not config_root().is_dir():
        return None, None
    name = f"{exp_id}_agent"
    try:
        writable_folder(practice_agent_path(config_root(), name).parent, "make it writable")
    except ConfigError as e:
        log.warning("the enhanced agent goes to runs/<exp_id>/ only: %s", e)
        return None, str(e)
    return name, None


def run_practice(
    config: TrainingFreeGRPOConfig | str, *, exp_id: str | None = None, overrides: list[str] | None = None, **options
) -> PracticeOutcome:
    """The one-call way, for scripts (not inside a running event loop): practise and export."""
    if isinstance(config, str):
        config, written = load_practice(config, overrides)
        options.setdefault("agent_source", written)
    elif overrides:
        raise ConfigError("overrides apply to a config name; change a config object with model_copy instead")
    if exp_id is not None:
        config = config.model_copy(update={"exp_id": exp_id})
    return asyncio.run(TrainingFreeGRPO(config, **options).run())


def shaping_config(config: TrainingFreeGRPOConfig, content: dict) -> dict:
    """What determines a step's results (the config's shaping knobs): resuming under a change here is refused.
    `content`: the practice questions' digest, so a data set replaced under the same name is noticed."""
    shaping = shaping_dump(config)
    for key in ("data", "pass_k"):  # the in-step evaluation's set and K do not change what a step computes
        shaping["evaluation"].pop(key)
    shaping["data"]["content"] = content
    return shaping


async def chosen_library(loop: PracticeLoop, result: PracticeResult, which: str | int) -> Library:
    """The library the enhanced agent gets (export_step): the last, the best scored, or step N's."""
    if which == "last" or not result.steps:  # (no step: nothing learned, which `check_learned` says)
        return result.library
    if which == "best" and not any(s.score is not None for s in result.steps) and loop.config.practice.validation:
        return result.library  # no step proposed a change, each of which the gate scores: `check_learned` says so
    step = pick_step(result.steps, which, "--export_step")
    if which == "best" and loop.config.practice.validation is None:  # (pick_step found scores: the eval's)
        log.warning(
            "--export_step best: chosen by the in-step evaluation, on the eval set's questions: scored on them again,"
            " the enhanced agent looks better than it is; judge it on other questions, or set practice.validation"
        )
    library = await loop.store.snapshot(step)
    if library is None:
        done = ", ".join(str(s.step) for s in result.steps)
        raise ConfigError(f"--export_step {which}: there is no step {step} (steps: {done})")
    log.info("exporting the library of step %d (%d experiences)", step, len(library.experiences))
    return library


def check_learned(outcome: PracticeOutcome) -> None:
    """A practice whose library is empty, or still the one it started from, produced nothing: say why, fail."""
    initial = outcome.initial
    if outcome.library.experiences and outcome.library.experiences != initial.experiences:
        return
    steps = outcome.steps
    used = sum(s.groups_used for s in steps)
    groups = used + sum(s.groups_skipped for s in steps)
    refused = sum(s.operations_refused for s in steps)
    errors = sum(s.learner_errors for s in steps)
    rejected = sum(1 for s in steps if s.validation and not s.validation.accepted)
    if not groups:
        why = "no step was run"
    elif rejected:
        why = f"validation rejected the proposed library at {rejected} step(s): none did better on it"
    elif not used:
        why = f"none of {groups} groups carried contrast (every attempt of a question got the same reward)"
    elif refused:
        why = f"the code refused all {refused} operations the learner proposed (see experience_operations)"
    elif errors:
        why = f"the learner failed {errors} times and proposed nothing usable (see learner_errors)"
    else:
        why = f"the learner studied {used} groups and proposed no experience"
    state = f"still the {len(initial.experiences)} it started from" if initial.experiences else "empty"
    raise RunFailed(f"practice learned nothing: the library is {state} ({why}); no enhanced agent was exported")
