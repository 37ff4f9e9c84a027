"""Verify functions, shared by practice, evaluation and the GRPO trainer.

Contract:
    def verify_func(sample, timeout_score: float = 0, **kwargs) -> {"reward": 0.0..1.0, "reasoning": str | None}
(optionally also "extracted_final_answer" and an integer "confidence", stored with the attempt)
`sample` has `raw_question`, `correct_answer`, `response` (and the other `EvaluationSample` fields);
`kwargs["llm"]` is the judge client; `kwargs["timeout"]` the time budget. Sync or async: a sync function
loaded from a file or module runs in a worker process (`utu.verify.workers`), in its main thread, where
math-verify's signal-based timeout works and a hung call is killed; one handed over from Python (a lambda) runs
in a thread of its own.

`load_verifier` finds the function; `Verifier` calls it with a timeout and turns every failure into
`timeout_score` plus a recorded error, never a crash or a silent loss.
"""

import asyncio
import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import logging
import os
import posix
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn, TypeVar, cast

from utu.errors import ConfigError, EndpointError
from utu.verify import workers
from utu.verify.watchdog import LoopHeld, watchdog

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger(__name__)
VERIFY_DIR = Path(__file__).resolve().parent
GUIDE_VERIFY_DIR = Path("utu/practice/verify")  # where Youtu-Agent's practice guide puts a domain's verify file
GRACE_SECONDS = 2.0  # beyond the verifier's own budget, before we stop waiting for it
LOOP_HELD_SECONDS = 5.0  # beyond that, before an async verifier still holding the event loop is stopped (watchdog.py)
USER_MODULE_PREFIX = "utu_user_verify_"  # the module a user's verify file is imported as, its path after this
MAX_HUNG_CALLS = 256  # sync calls still running (e.g. hung) before a verifier is not started again


def load_verifier(verify_filename: str, verify_func_name: str = "verify_func") -> Callable[..., Any]:
    """Resolve a verifier from a file path (relative to the working directory, or in ./utu/practice/verify/ where
    Youtu-Agent's guide puts it), a built-in file in utu/verify/, or a dotted module name.

    `module.path:func` is also accepted (then `verify_func_name` is ignored). Anything that cannot be
    loaded is a `ConfigError` at start, never a silent fallback.
    """
    from utu.config.loader import config_root  # (the config package is not needed to judge)

    target, _, func_name = verify_filename.partition(":")
    func_name = func_name or verify_func_name
    # a user's file before a built-in: by path, in the guide's folder here or beside the user's configs/
    candidates = [
        Path(target),
        GUIDE_VERIFY_DIR / target,
        config_root().parent / GUIDE_VERIFY_DIR / target,
        VERIFY_DIR / target,
    ]
    path = next((p for p in candidates if p.suffix == ".py" and p.is_file()), None)
    try:
        if path is not None and path.resolve().parent == VERIFY_DIR:
            # Built-in verifiers import as real modules, so worker processes can unpickle their functions.
            module = importlib.import_module(f"{__name__}.{path.stem}")
        elif path is not None:
            module = _import_file(path)
        elif target.endswith(".py"):
            where = f"., ./{GUIDE_VERIFY_DIR}, {VERIFY_DIR}"
            raise ConfigError(f"verify_filename: {target!r} not found (looked in {where})")
        else:
            module = importlib.import_module(target)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"verify_filename: cannot load {target!r}: {type(e).__name__}: {e}") from e
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(f"verify_func_name: {target!r} has no function {func_name!r}")
    if not inspect.iscoroutinefunction(func):  # run in a worker process, which loads it again from this
        func.__utu_verifier__ = (str(path.resolve()) if path is not None else target, func_name)
    return func


def file_digest(func: Callable[..., Any]) -> str | None:
    """The sha256 of the file a user's verify function is written in, so that a verifier edited in place is
    noticed; None for utu's own (versioned with utu, as the rest of its code) and a function with no file."""
    try:
        source = inspect.getsourcefile(inspect.unwrap(func))
    except TypeError:
        return None
    path = Path(source) if source else None
    if path is None or not path.is_file() or path.resolve().parent == VERIFY_DIR:
        return None
    return hashlib.sha256(path.read_bytes()).hexdigest()


def needs_answer(func: F) -> F:
    """Mark a verify function that can only judge against a gold answer: questions without one are refused
    before any work (`check_answers`), instead of each scoring `timeout_score` with an error."""
    cast(Any, func).needs_answer = True  # a function attribute, which a callable's type does not declare
    return func


def check_answers(func: Callable[..., Any], questions: Sequence[Any], dataset: str) -> None:
    """`ConfigError` if `func` needs gold answers and some of `questions` (rows with `index`, `answer`) have none."""
    if not getattr(func, "needs_answer", False):
        return
    missing = [q.index for q in questions if q.answer is None or not str(q.answer).strip()]
    if missing:
        raise ConfigError(
            f"data set {dataset!r}: {len(missing)} of {len(questions)} questions have no answer (first: #{missing[0]}),"
            " and this verifier judges only against one: add the answers and upload again with --replace, or use a"
            " verifier that needs none"
        )
    problem = getattr(func, "answer_problem", None)  # a verifier's own check of its gold answers' form
    bad = [(q.index, why) for q in questions if problem and (why := problem(str(q.answer)))]
    if bad:
        raise ConfigError(
            f"data set {dataset!r}: {len(bad)} of {len(questions)} answers cannot be judged by this verifier (first:"
            f" #{bad[0][0]}, {bad[0][1]}): correct the answers and upload again with --replace, or use another verifier"
        )


def warm_up(func: Callable[..., Any]) -> None:
    """Let a verifier's module get ready in the background (its optional `warm_up()`: e.g. the math verifier
    starts its worker processes), so the first judgement of a run does not wait for it."""
    hook = getattr(inspect.getmodule(func), "warm_up", None)
    if callable(hook):
        hook()


def _call_loaded(spec: tuple[str, str], fields: dict[str, Any], timeout_score: float, timeout: float) -> Any:
    """In a worker process: the sync verify function `spec` names, called in the worker's main thread (where
    math-verify's signal-based timeout works). It gets no judge client: that lives in the run's process.
    A function that exits (sys.exit, os._exit) fails its judgement with that said: a worker that exits with
    status 0 is not seen as dead by the pool, and the call was reported as a timeout."""
    real_exit = os._exit
    os._exit = posix._exit = _exit_refused
    try:
        return load_verifier(*spec)(SimpleNamespace(**fields), timeout_score, timeout=timeout, llm=None)
    except SystemExit as e:
        raise RuntimeError(f"the verify function exited (sys.exit({e.code!r})) instead of returning") from None
    finally:
        os._exit = posix._exit = real_exit


def _exit_refused(status: int) -> NoReturn:  # os._exit's signature
    raise RuntimeError(f"the verify function exited (os._exit({status!r})) instead of returning")


def _import_file(path: Path):
    name = USER_MODULE_PREFIX + "".join(c if c.isalnum() else "_" for c in str(path.resolve()))
    if name in sys.modules:
        return sys.modules[name]
    log.info("verify function from %s", path.resolve())  # once: which file judges, when it is the user's
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Verdict:
    reward: float
    reasoning: str | None = None
    error: str | None = None  # set when the verifier failed or timed out (reward is then timeout_score)
    extracted_final_answer: str | None = None  # optional: the answer the verifier read from the response
    confidence: int | None = None  # optional: a judge's confidence (Youtu-Agent's column)

    @property
    def correct(self) -> bool:
        return self.error is None and self.reward >= 1.0


class Verifier:
    """A loaded verify function plus its budget: `await verifier(sample)` always returns a `Verdict`."""

    def __init__(self, func: Callable[..., Any], timeout: float = 10.0, timeout_score: float = 0.0, llm: Any = None):
        self.func = func
        self.timeout = timeout
        self.timeout_score = timeout_score
        self.llm = llm
        self.name = _name_of(func)
        self._running = 0  # sync calls whose thread has not returned (finished, pending or hung)

    async def __call__(self, sample: Any) -> Verdict:
        kwargs = {"timeout": self.timeout, "llm": self.llm}
        try:
            if hasattr(self.func, "__utu_verifier__"):  # sync, loaded from a file or module: a worker process
                fields = {k: v for k, v in vars(sample).items() if not k.startswith("_")}
                spec = self.func.__utu_verifier__
                # (the pool's timeout runs from when a worker starts the call, not while it waits for one)
                result = await workers.run(
                    _call_loaded, spec, fields, self.timeout_score, self.timeout, timeout=self.timeout
                )
            elif inspect.iscoroutinefunction(self.func):  # in the run's event loop, watched: it may not give it back
                coroutine = self.func(sample, self.timeout_score, **kwargs)
                with watchdog.watching(coroutine, self.timeout + GRACE_SECONDS + LOOP_HELD_SECONDS) as watch:
                    result = await asyncio.wait_for(_without_exit(coroutine), self.timeout + GRACE_SECONDS)
                if watch.fired:  # it caught LoopHeld (an `except Exception` around its work) and went on
                    raise LoopHeld
            else:  # a sync callable handed over in Python (a thread: the event loop is not blocked)
                result = await asyncio.wait_for(self._in_own_thread(sample, kwargs), self.timeout + GRACE_SECONDS)
        except (TimeoutError, workers.WorkerTimeout):
            return Verdict(self.timeout_score, None, f"{self.name}: timed out after {self.timeout:g}s")
        except LoopHeld:
            held = f"held the run past its timeout ({self.timeout:g}s) without awaiting, and was stopped"
            remedy = "make it a plain def: it then runs in a worker process, where a call past its timeout is killed"
            return Verdict(self.timeout_score, None, f"{self.name}: {held}; {remedy}")
        except EndpointError:
            raise  # the judge's endpoint refuses everything: stop the run
        except Exception as e:
            return Verdict(self.timeout_score, None, f"{self.name}: {type(e).__name__}: {_short(str(e))}")
        return self._check(result)

    def _in_own_thread(self, sample: Any, kwargs: dict[str, Any]) -> asyncio.Future:
        """Run a sync verifier in a daemon thread of its own, not in the loop's shared pool: a call that hangs
        is abandoned at its timeout without holding a pool slot, and never keeps the process from exiting.
        At most `MAX_HUNG_CALLS` abandoned calls are tolerated; beyond that the verifier is not started again."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        if self._running >= MAX_HUNG_CALLS:
            raise RuntimeError(f"{self._running} earlier calls are still running (hung?); not starting another")
        self._running += 1

        def deliver(result: Any, error: BaseException | None) -> None:
            self._running -= 1
            if future.done():  # abandoned at its timeout
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def work() -> None:
            try:
                result, error = self.func(sample, self.timeout_score, **kwargs), None
            except BaseException as e:  # noqa: BLE001 - handed to the caller, whatever it is
                result, error = None, e
            with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
                loop.call_soon_threadsafe(deliver, result, error)

        threading.Thread(target=work, name=f"verify {self.name}", daemon=True).start()
        return future

    def _check(self, result: Any) -> Verdict:
        if not isinstance(result, dict) or "reward" not in result:
            got = _short(repr(result))
            return Verdict(self.timeout_score, None, f"{self.name}: returned {got}, expected a dict with 'reward'")
        reward = result["reward"]
        if isinstance(reward, bool) or not isinstance(reward, int | float) or not 0.0 <= reward <= 1.0:
            return Verdict(
                self.timeout_score, None, f"{self.name}: reward {_short(repr(reward))} is not a number in [0, 1]"
            )
        if result.get("timed_out"):
            return Verdict(float(reward), result.get("reasoning"), f"{self.name}: {result.get('reasoning')}")
        extracted, confidence = result.get("extracted_final_answer"), result.get("confidence")
        return Verdict(
            float(reward),
            result.get("reasoning"),
            extracted_final_answer=None if extracted is None else str(extracted),
            confidence=confidence if type(confidence) is int and -(2**63) <= confidence < 2**63 else None,  # a column
        )


async def _without_exit(call: Any) -> Any:
    """An async verifier runs in the run's own process: its sys.exit must fail its judgement, not end the run (a
    task that raises SystemExit stops the event loop)."""
    try:
        return await call
    except SystemExit as e:
        raise RuntimeError(f"the verify function exited (sys.exit({e.code!r})) instead of returning") from None


def _name_of(func: Callable[..., Any]) -> str:
    """How errors name a verify function: module.function, or file.py:function for a user's file (imported
    under a name made of its whole path)."""
    module, name = getattr(func, "__module__", "?"), getattr(func, "__name__", "?")
    if module.startswith(USER_MODULE_PREFIX):
        with contextlib.suppress(TypeError):
            return f"{Path(inspect.getsourcefile(func) or module).name}:{name}"
    return f"{module}.{name}"


def _short(text: str, limit: int = 300) -> str:
    """An error's quote of what a verifier gave, cut: the error is one line, not the whole value."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
