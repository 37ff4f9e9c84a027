"""How often the learning suite's 95% intervals cover the true gain: the report's own bootstrap on simulated suites.

    python benchmarks/learning/suite_coverage.py [--repeats 200]   # -> benchmarks/results/learning_suite_coverage.json

Each simulated task has 40 questions and 3 seeds, as the suite has; a seed's per-question difference from the
baseline comes from one of three regimes the suite can show:
- `seeds_differ`: each seed learned a library of its own worth (a seed effect of sd 0.05), evaluation noise small;
- `some_keep_nothing`: a seed keeps nothing (a difference of exactly 0) one time in three, else a rule worth +0.1
  with noisy questions (sd 0.3); the true gain is the mixture's mean, 0.1 x 2/3;
- `evaluation_noise`: no effect at all, each question's K=2 attempts against a baseline's K=2 (p = 0.5), the
  baseline shared by the seeds.
A task's interval (`bootstrap_ci`, the seeds widened by t(2)) and the suite mean's over 5 tasks (`across_tasks`, the
seeds widened by t(seeds_df)) are drawn `--repeats` times each; coverage is the share that holds the truth. And one
suite whose tasks differ, suite mean only: one task as `seeds_differ` (`one_task_varies`) or `some_keep_nothing`
(`one_task_keeps_sometimes`) beside four whose every seed keeps nothing (seed 0 of practice kept nothing on 3 of
5 tasks).
"""

import argparse
import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import suite_report  # noqa: E402
from _common import at_least, write_result  # noqa: E402

QUESTIONS, SEEDS, TASKS = 40, 3, 5
Scores = dict[str, float]
Task = Callable[[random.Random], list[tuple[Scores, Scores]]]  # a task's (seed's run, baseline) pairs


def _task(differences: Callable[[random.Random], list[list[float]]]) -> Task:
    """A task whose seeds differ from a baseline of zeros by `differences(rng)`: a list per seed, one per question."""

    def draw(rng: random.Random) -> list[tuple[Scores, Scores]]:
        zero = {str(q): 0.0 for q in range(QUESTIONS)}
        return [(dict(zip(zero, d, strict=True)), zero) for d in differences(rng)]

    return draw


def _seeds_differ(rng: random.Random) -> list[list[float]]:
    effects = [rng.gauss(0, 0.05) for _ in range(SEEDS)]
    return [[e + rng.gauss(0, 0.02) for _ in range(QUESTIONS)] for e in effects]


def _some_keep_nothing(rng: random.Random) -> list[list[float]]:
    kept = [rng.random() < 2 / 3 for _ in range(SEEDS)]
    return [[0.1 + rng.gauss(0, 0.3) if k else 0.0 for _ in range(QUESTIONS)] for k in kept]


def _evaluation_noise(rng: random.Random) -> list[list[float]]:
    def k2() -> int:  # right attempts of 2 at p = 0.5
        return (rng.random() < 0.5) + (rng.random() < 0.5)

    baseline = [k2() for _ in range(QUESTIONS)]  # one evaluation, shared by the seeds
    return [[(k2() - b) / 2 for b in baseline] for _ in range(SEEDS)]


REGIMES: dict[str, tuple[Task, float]] = {
    "seeds_differ": (_task(_seeds_differ), 0.0),
    "some_keep_nothing": (_task(_some_keep_nothing), 0.1 * 2 / 3),
    "evaluation_noise": (_task(_evaluation_noise), 0.0),
}


def _kept_nothing(rng: random.Random) -> list[list[float]]:
    return [[0.0] * QUESTIONS for _ in range(SEEDS)]


# suites whose tasks differ: a task per position, and the suite mean's truth
MIXED: dict[str, tuple[list[Task], float]] = {
    "one_task_varies": ([_task(_seeds_differ), *[_task(_kept_nothing)] * (TASKS - 1)], 0.0),
    "one_task_keeps_sometimes": (
        [_task(_some_keep_nothing), *[_task(_kept_nothing)] * (TASKS - 1)],
        0.1 * 2 / 3 / TASKS,
    ),
}


def suite_coverage(tasks: list[Task], truth: float, repeats: int, rng: random.Random) -> float:
    """The share of `repeats` suites of these tasks whose suite-mean interval (`across_tasks`) holds `truth`."""
    held = []
    for _ in range(repeats):
        drawn = {str(t): task(rng) for t, task in enumerate(tasks)}
        questions = {t: sorted(pairs[0][0]) for t, pairs in drawn.items()}
        low, high = suite_report.across_tasks(drawn, questions, rng)["ci95"]  # type: ignore[index]
        held.append(low <= truth <= high)
    return statistics.fmean(held)


def coverage(repeats: int, seed: int = 0) -> dict:
    rng = random.Random(seed)
    out: dict = {}
    for name, (task, truth) in REGIMES.items():
        held, widths = [], []
        for _ in range(repeats):
            _, (low, high) = suite_report.bootstrap_ci(task(rng), rng)
            held.append(low <= truth <= high)
            widths.append(high - low)
        out[name] = {
            "truth": truth,
            "task_coverage": statistics.fmean(held),
            "task_mean_width": statistics.fmean(widths),
            "suite_coverage": suite_coverage([task] * TASKS, truth, repeats, rng),
        }
    for name, (tasks, truth) in MIXED.items():
        out[name] = {"truth": truth, "suite_coverage": suite_coverage(tasks, truth, repeats, rng)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=at_least(1), default=200)
    parser.add_argument(
        "--bootstrap", type=at_least(40), default=1000, help="draws per interval, at least 40 (the report's: 4000)"
    )
    args = parser.parse_args()
    suite_report.BOOTSTRAP = args.bootstrap
    result = {
        "questions": QUESTIONS,
        "seeds": SEEDS,
        "tasks": TASKS,
        "repeats": args.repeats,
        "bootstrap": args.bootstrap,
        "regimes": coverage(args.repeats),
    }
    write_result("learning_suite_coverage", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
