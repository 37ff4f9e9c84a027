"""The learning suite's report, from the saved runs: benchmarks/results/learning_suite.json.

For each task and method, the held-out Mean@2 of each run and its gain over the task's baseline, paired by
question; for the seeded methods (practice, GEPA) a hierarchical bootstrap, seeds then questions, gives the
mean gain's 95% CI, and the same resampling gives practice − GEPA (paired by seed: GEPA's budget is that seed's
practice calls). A candidate (a change to practice) is reported as candidate - practice, paired by seed. The suite
mean averages the tasks with equal weight. A practice run that kept nothing counts as the baseline agent (a gain
of zero): it is what the user gets.
"""

import json
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import write_result  # noqa: E402
from suite import CANDIDATES, RESULTS, TASKS, plan, registered_in, result_path, run_name  # noqa: E402

BOOTSTRAP = 4000
Scores = dict[str, float]  # question index -> mean reward over its K attempts


def per_question(run: dict, baseline: Scores) -> Scores:
    rewards = run.get("heldout_rewards")
    if rewards is None:  # kept nothing: the baseline agent
        return dict(baseline)
    return {q: sum(r) / len(r) for q, r in rewards.items()}


Pairs = list[tuple[Scores, Scores]]  # (a run of a method, what it is compared with), per seed
# (first, second): first - second, paired by seed (GEPA's budget is that seed's practice calls)
COMPARED = [("practice", "gepa"), *((c, "practice") for c in CANDIDATES)]


def mean_difference(pairs: Pairs, questions: list[str]) -> float:
    return statistics.fmean(statistics.fmean(a[q] - b[q] for q in questions) for a, b in pairs)


def resampled(pairs: Pairs, questions: list[str], rng: random.Random) -> float:
    """One bootstrap draw of `mean_difference`: the pairs (seeds) resampled, then the questions."""
    return mean_difference([rng.choice(pairs) for _ in pairs], [rng.choice(questions) for _ in questions])


def interval(draws: list[float]) -> list[float]:
    draws = sorted(draws)
    return [draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]]


def hierarchical_ci(runs: list[Scores], baseline: Scores, rng: random.Random) -> tuple[float, list[float]]:
    """Mean gain over runs and questions, and its 95% CI resampling runs (seeds), then questions."""
    pairs, questions = [(r, baseline) for r in runs], sorted(baseline)
    return mean_difference(pairs, questions), interval([resampled(pairs, questions, rng) for _ in range(BOOTSTRAP)])


def paired_difference(a: list[Scores], b: list[Scores], rng: random.Random) -> tuple[float, list[float]]:
    """Mean of a − b, run i of a paired with run i of b; CI resampling the pairs, then questions."""
    pairs, questions = list(zip(a, b, strict=True)), sorted(a[0])
    return mean_difference(pairs, questions), interval([resampled(pairs, questions, rng) for _ in range(BOOTSTRAP)])


def load(task: str, method: str, seed: int | None) -> dict | None:
    path = result_path(task, method, seed)
    return json.loads(path.read_text()) if path.exists() else None


def task_report(task: str, rng: random.Random) -> dict | None:
    base_run = load(task, "baseline", None)
    if base_run is None:
        return None
    baseline = per_question(base_run, {})
    out: dict = {"baseline": statistics.fmean(baseline.values()), "methods": {}}
    seeded: dict[str, list[Scores]] = {}
    for t, method, seed in plan():
        run = load(task, method, seed) if t == task and method != "baseline" else None
        if run is None:
            continue
        scores = per_question(run, baseline)
        entry = {
            "mean": statistics.fmean(scores.values()),
            "gain": statistics.fmean(scores[q] - baseline[q] for q in baseline),
            "kept_nothing": run.get("kept_nothing", False),
            # GEPA's metric calls are its agent calls, one each, counted across sittings by its saved state
            "agent_calls": run.get("metric_calls", run.get("agent_calls")),
            "learner_calls": run.get("learner_calls"),
            "library": run.get("library") or run.get("rules") or run.get("best_prompt"),
            "file": str(result_path(task, method, seed).relative_to(RESULTS.parent.parent.parent)),
        }
        out["methods"][run_name(method, seed)] = entry
        if seed is not None and (method in ("practice", "gepa") or method in CANDIDATES):
            seeded.setdefault(method, {})[seed] = scores
    for method, runs in seeded.items():
        gain, ci = hierarchical_ci(list(runs.values()), baseline, rng)
        out[f"{method}_gain"] = {"seeds": len(runs), "mean": gain, "ci95": ci, "below_baseline": ci[1] < 0}
    for first, second in COMPARED:
        pairs = seed_pairs(seeded, first, second)
        if pairs:
            diff, ci = paired_difference([a for a, _ in pairs], [b for _, b in pairs], rng)
            out[f"{first}_minus_{second}"] = {"seeds": len(pairs), "mean": diff, "ci95": ci}
    out["_scores"] = {"baseline": baseline, **seeded}
    return out


def seed_pairs(seeded: dict, first: str, second: str) -> Pairs:
    """(first's run, second's run) for each seed both have."""
    a, b = seeded.get(first, {}), seeded.get(second, {})
    return [(a[s], b[s]) for s in sorted(a.keys() & b.keys())]


def across_tasks(tasks: dict[str, Pairs], questions: dict[str, list[str]], rng: random.Random) -> dict | None:
    """Equal-weight mean over tasks of their mean differences, the tasks' bootstraps drawn together."""
    if not tasks:
        return None
    point = statistics.fmean(mean_difference(pairs, questions[t]) for t, pairs in tasks.items())
    draws = [statistics.fmean(resampled(p, questions[t], rng) for t, p in tasks.items()) for _ in range(BOOTSTRAP)]
    return {"tasks": sorted(tasks), "mean": point, "ci95": interval(draws)}


def suite_mean(tasks: dict[str, dict], method: str, rng: random.Random) -> dict | None:
    """A seeded method's gain over the baseline, across the tasks that have runs of it."""
    pairs = {
        t: [(run, r["_scores"]["baseline"]) for run in r["_scores"][method].values()]
        for t, r in tasks.items()
        if r["_scores"].get(method)
    }
    return across_tasks(pairs, {t: sorted(tasks[t]["_scores"]["baseline"]) for t in pairs}, rng)


def suite_difference(tasks: dict[str, dict], first: str, second: str, rng: random.Random) -> dict | None:
    """first - second (seed-paired), across the tasks that have both."""
    pairs = {t: p for t, r in tasks.items() if (p := seed_pairs(r["_scores"], first, second))}
    return across_tasks(pairs, {t: sorted(tasks[t]["_scores"]["baseline"]) for t in pairs}, rng)


def build_report(seed: int = 0) -> dict:
    rng = random.Random(seed)
    tasks = {t: r for t in TASKS if (r := task_report(t, rng)) is not None}
    report = {
        "registered_in": registered_in(),
        "runs_saved": sum(result_path(*r).exists() for r in plan()),
        "runs_planned": len(plan()),
        "suite": {
            "practice": suite_mean(tasks, "practice", rng),
            "gepa": suite_mean(tasks, "gepa", rng),
            "practice_minus_gepa": suite_difference(tasks, "practice", "gepa", rng),
            **{f"{c}_minus_practice": suite_difference(tasks, c, "practice", rng) for c in CANDIDATES},
            "tasks_below_baseline": sorted(
                t for t, r in tasks.items() if r.get("practice_gain", {}).get("below_baseline")
            ),
        },
        "tasks": {t: {k: v for k, v in r.items() if k != "_scores"} for t, r in tasks.items()},
    }
    return report


def write_report() -> Path:
    """benchmarks/results/learning_suite.json (an earlier report kept in results/history/)."""
    return write_result("learning_suite", build_report())


# --- the tables README and docs/results.md quote ------------------------------------------------------------------


def _gain(entry: dict | None) -> str:
    """ "+0.075 (+0.013 to +0.138)" for a mean with its CI, "+0.063" for one run; "–" when not run."""
    if not entry:
        return "–"
    if "ci95" in entry:
        low, high = entry["ci95"]
        n = len(entry.get("tasks", []))  # a suite mean says over how many tasks, while the suite fills
        over = f", {n} task{'s' if n > 1 else ''}" if n else ""
        return f"{entry['mean']:+.3f} ({low:+.3f} to {high:+.3f}){over}"
    return f"{entry['gain']:+.3f}"


def _seeded(task: dict, method: str) -> str:
    """A seeded method's gain, its seeds, and how many of them kept nothing."""
    gain = task.get(f"{method}_gain")
    if not gain:
        return "–"
    runs = [e for name, e in task["methods"].items() if name.rsplit("_s", 1)[0] == method]
    nothing = sum(e["kept_nothing"] for e in runs)
    kept = f", kept nothing in {nothing}" if nothing else ""
    return f"{_gain(gain)}, {gain['seeds']} seed{'s' if gain['seeds'] > 1 else ''}{kept}"


def _calls(task: dict, method: str) -> str:
    calls = [e["agent_calls"] for name, e in task["methods"].items() if name.rsplit("_s", 1)[0] == method]
    return f"{statistics.fmean(calls):.0f}" if calls else "–"


def markdown(report: dict) -> str:
    """The suite as tables: gains over each task's baseline on its 40 held-out questions (K=2), with 95% CIs
    where there are seeds; then the one-seed ablations and the candidates, as differences from practice."""
    names = {t: TASKS[t].source for t in report["tasks"]}
    lines = [
        "| task | baseline | reference rule | placebo | practice | GEPA | practice − GEPA "
        "| agent calls: practice / GEPA |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for t, r in report["tasks"].items():
        m = r["methods"]
        lines.append(
            f"| {names[t]} | {r['baseline']:.3f} | {_gain(m.get('reference'))} | {_gain(m.get('placebo'))} | "
            f"{_seeded(r, 'practice')} | {_seeded(r, 'gepa')} | {_gain(r.get('practice_minus_gepa'))} | "
            f"{_calls(r, 'practice')} / {_calls(r, 'gepa')} |"
        )
    suite = report["suite"]
    lines.append(
        f"| **suite mean** | | | | {_gain(suite['practice'])} | {_gain(suite['gepa'])} | "
        f"{_gain(suite['practice_minus_gepa'])} | |"
    )
    ablations = [("hinted_s0", "hinted objective"), ("paper_s0", "the paper's algorithm")]
    lines += [
        "",
        "| task | " + " | ".join([label for _, label in ablations] + [f"{c} − practice" for c in CANDIDATES]) + " |",
        "|---|" + "---|" * (len(ablations) + len(CANDIDATES)),
    ]
    for t, r in report["tasks"].items():
        cells = [_gain(r["methods"].get(name)) for name, _ in ablations]
        cells += [_gain(r.get(f"{c}_minus_practice")) for c in CANDIDATES]
        lines.append(f"| {names[t]} | " + " | ".join(cells) + " |")
    cells = ["" for _ in ablations] + [_gain(suite.get(f"{c}_minus_practice")) for c in CANDIDATES]
    lines.append("| **suite mean** | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
