"""The learning suite's report, from the saved runs: benchmarks/results/learning_suite.json.

For each task and method, the held-out Mean@2 of each run and its gain over the task's baseline, paired by
question. For the seeded methods (practice, GEPA, the candidates) a bootstrap over seeds and questions gives the
mean gain's 95% CI, and the same resampling gives practice − GEPA (paired by seed: GEPA's budget is that seed's
practice calls) and candidate − practice (paired by seed). The suite mean averages the tasks with equal weight.
A run that kept nothing (practice that kept no experience, GEPA whose best prompt is the one it started from)
counts as the baseline agent, a gain of exactly zero: it is what the user gets.
"""

import math
import random
import statistics
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from markdown_it import MarkdownIt

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import write_result  # noqa: E402
from suite import (  # noqa: E402
    CANDIDATES,
    HELDOUT_SIZE,
    RESULTS,
    SEEDS,
    TASKS,
    K,
    plan,
    read_result,
    registered_in,
    result_path,
    run_name,
)

from utu.names import replace_text  # noqa: E402

BOOTSTRAP = 4000
Scores = dict[str, float]  # question index -> mean reward over its K attempts
Pairs = list[tuple[Scores, Scores]]  # (a run of a method, what it is compared with), per seed
# (first, second): first - second, paired by seed (GEPA's budget is that seed's practice calls, so a candidate's
# difference from GEPA is not at the candidate's own budget: the tables say so and show both counts)
COMPARED = [("practice", "gepa"), *((c, other) for c in CANDIDATES for other in ("practice", "gepa"))]
SEEDED = ("practice", "gepa", *CANDIDATES)


# The seed prompt of the GEPA runs saved before a result recorded its own (`seed_prompt`; ElapsedTime seed 0): the
# suite agent's instructions at their commit, d84f032. Pinned here, not read from today's config, which an edit
# would make another text and so flip that run from "kept nothing" to a gain.
FIRST_RUNS_SEED_PROMPT = "Solve the math word problem. Think briefly, then give the final number as \\boxed{answer}.\n"


def kept_nothing(run: dict) -> bool:
    """Practice that kept no experience, or GEPA that kept the prompt it started from: the user gets the baseline
    agent (GEPA's first run was evaluated all the same; its scores are a rerun of the baseline's)."""
    if run.get("kept_nothing"):
        return True
    return run.get("method") == "gepa" and run.get("best_prompt") == run.get("seed_prompt", FIRST_RUNS_SEED_PROMPT)


def per_question(run: dict, baseline: Scores) -> Scores:
    if kept_nothing(run):  # the baseline agent
        return dict(baseline)
    rewards = run.get("heldout_rewards")
    if rewards is None:  # a run that kept something was evaluated: never score it as the baseline
        raise SystemExit(f"{run.get('task')} {run.get('method')} seed {run.get('seed')}: no held-out rewards saved")
    return {q: sum(r) / len(r) for q, r in rewards.items()}


def seed_means(pairs: Pairs, questions: list[str]) -> list[float]:
    """Each seed's mean difference over `questions` (in a bootstrap draw, a list with repeats)."""
    return [statistics.fmean(a[q] - b[q] for q in questions) for a, b in pairs]


def mean_difference(pairs: Pairs, questions: list[str]) -> float:
    return statistics.fmean(seed_means(pairs, questions))


# Student's t, 97.5th percentile, by degrees of freedom (a degree not listed takes the next one below: wider).
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 8: 2.306, 10: 2.228, 15: 2.131, 20: 2.086}


def t975(df: int) -> float:
    return T975[max(k for k in T975 if k <= df)]


def unbiased(n: int) -> float:
    """The seeds' spread widened so that it estimates their variance, not the (n-1)/n of it that a bootstrap of n
    values has."""
    return math.sqrt(n / (n - 1))


def t_widened(n: int, df: int | None = None) -> float:
    """`unbiased`, and by t(df)/z as well, the seeds' variance being estimated from few of them: df = n - 1 for
    one task (2 with 3 seeds); across tasks, `seeds_df` (2 to 10 for 5 tasks of 3 seeds)."""
    return unbiased(n) * t975(df or n - 1) / 1.96


Widening = Callable[[int], float]


def resampled(pairs: Pairs, questions: list[str], rng: random.Random, widen: Widening) -> float:
    """One bootstrap draw of `mean_difference`. The questions are drawn once for every seed (each seed answers the
    same questions), then the seeds, whose spread `widen(n)` scales. With one seed only the questions vary: the
    interval says nothing of practice's run-to-run spread. Coverage, simulated by suite_coverage.py: see
    benchmarks/results/learning_suite_coverage.json."""
    drawn = [rng.choice(questions) for _ in questions]
    per_seed = seed_means(pairs, drawn)
    whole, n = statistics.fmean(per_seed), len(per_seed)
    if n == 1:
        return whole
    seeds = statistics.fmean(rng.choice(per_seed) for _ in per_seed)
    return whole + widen(n) * (seeds - whole)


def interval(draws: list[float]) -> list[float]:
    """The 2.5th and 97.5th percentiles: as many draws left out below as above."""
    draws = sorted(draws)
    return [draws[int(0.025 * len(draws))], draws[int(0.975 * len(draws)) - 1]]


def bootstrap_ci(pairs: Pairs, rng: random.Random, widen: Widening = t_widened) -> tuple[float, list[float]]:
    """Mean of a − b over the pairs (seeds) and questions, and its 95% CI (`resampled`)."""
    questions = sorted(pairs[0][0])
    draws = [resampled(pairs, questions, rng, widen) for _ in range(BOOTSTRAP)]
    return mean_difference(pairs, questions), interval(draws)


def gain_ci(runs: list[Scores], baseline: Scores, rng: random.Random) -> tuple[float, list[float]]:
    """Mean gain over runs (seeds) and questions, and its 95% CI."""
    return bootstrap_ci([(r, baseline) for r in runs], rng)


def agent_calls(run: dict) -> int | None:
    """What a run spent on the agent. GEPA's are counted twice, by GEPA (metric calls, one per agent call) and by
    our client, and each count missed some in the suite's first GEPA runs: ours kept the last sitting's only
    (fixed in 97c7b43), GEPA's missed the calls a resume spent past its end (9b4dd5d). The larger is the spend."""
    counts = [run[key] for key in ("metric_calls", "agent_calls") if run.get(key) is not None]
    return max(counts) if counts else None


def over_budget(run: dict) -> int | None:
    """The agent calls a GEPA run spent past its budget: up to one iteration's (GEPA checks its budget before each),
    and an iteration's again for each time it was parked in the middle of one."""
    spent, budget = agent_calls(run), run.get("budget_agent_calls")
    return None if spent is None or budget is None else spent - budget


def load(task: str, method: str, seed: int | None) -> dict | None:
    path = result_path(task, method, seed)
    return read_result(path) if path.exists() else None


def rng_for(*comparison: object) -> random.Random:
    """Each interval its own generator, seeded by what it compares: a run saved elsewhere in the suite does not
    move it."""
    return random.Random(":".join(map(str, comparison)))


def task_report(task: str) -> dict | None:
    base_run = load(task, "baseline", None)
    if base_run is None:
        return None
    baseline = per_question(base_run, {})
    out: dict = {"baseline": statistics.fmean(baseline.values()), "methods": {}}
    seeded: dict[str, dict[int, Scores]] = {}  # method -> seed -> scores
    for t, method, seed in plan():
        run = load(task, method, seed) if t == task and method != "baseline" else None
        if run is None:
            continue
        scores = per_question(run, baseline)
        out["methods"][run_name(method, seed)] = {
            "method": method,
            "seed": seed,
            "mean": statistics.fmean(scores.values()),
            "gain": statistics.fmean(scores[q] - baseline[q] for q in baseline),
            "kept_nothing": kept_nothing(run),
            "agent_calls": agent_calls(run),
            "budget_agent_calls": run.get("budget_agent_calls"),  # GEPA's: its seed's practice calls
            "over_budget": over_budget(run),
            "learner_calls": run.get("learner_calls"),
            "library": run.get("library") or run.get("rules") or run.get("best_prompt"),
            "file": str(result_path(task, method, seed).relative_to(RESULTS.parent.parent.parent)),
        }
        if seed is not None and method in SEEDED:
            seeded.setdefault(method, {})[seed] = scores
    for method, runs in seeded.items():
        gain, ci = gain_ci(list(runs.values()), baseline, rng_for(task, method))
        out[f"{method}_gain"] = {"seeds": len(runs), "mean": gain, "ci95": ci, "below_baseline": ci[1] < 0}
    for first, second in COMPARED:
        pairs = seed_pairs(seeded, first, second)
        if pairs:
            diff, ci = bootstrap_ci(pairs, rng_for(task, first, second))
            out[f"{first}_minus_{second}"] = {"seeds": len(pairs), "mean": diff, "ci95": ci}
    out["_scores"] = {"baseline": baseline, **seeded}
    return out


def seed_pairs(seeded: dict, first: str, second: str) -> Pairs:
    """(first's run, second's run) for each seed both have."""
    a, b = seeded.get(first, {}), seeded.get(second, {})
    return [(a[s], b[s]) for s in sorted(a.keys() & b.keys())]


def first_seed_difference(candidate: str) -> float | None:
    """A candidate's first seed minus practice's, averaged over the tasks (point estimate); None until both ran
    on every task."""
    seed, differences = SEEDS[0], []
    for task in TASKS:
        base_run, ours, theirs = load(task, "baseline", None), load(task, candidate, seed), load(task, "practice", seed)
        if base_run is None or ours is None or theirs is None:
            return None
        baseline = per_question(base_run, {})
        differences.append(
            mean_difference([(per_question(ours, baseline), per_question(theirs, baseline))], sorted(baseline))
        )
    return statistics.fmean(differences)


def stopped_after_first_seed(difference: float | None) -> bool:
    """A candidate whose first seed ran on every task and did not beat practice's (`first_seed_difference`): a
    futility stop, its other seeds do not run."""
    return difference is not None and difference <= 0


def seeds_df(tasks: dict[str, Pairs], questions: dict[str, list[str]]) -> int:
    """The Welch-Satterthwaite degrees of freedom of the suite mean's seed variance, rounded down: the tasks'
    seed variances are not equal (a task whose every seed kept nothing has none), and where one task carries
    all of it the df are that task's n - 1, not the sum over tasks (with the sum, a simulated suite of one
    varying task beside four that keep nothing was covered 86% of the time)."""
    terms = []  # (a task's seed variance of its mean, its df)
    for t, pairs in tasks.items():
        if len(pairs) > 1:
            terms.append((statistics.variance(seed_means(pairs, questions[t])) / len(pairs), len(pairs) - 1))
    total = sum(v for v, _ in terms)
    if total == 0:  # no seed spread anywhere: the widening has nothing to scale
        return max(1, sum(df for _, df in terms))
    return max(1, math.floor(total**2 / sum(v * v / df for v, df in terms) + 1e-9))  # 10 is not 9.999...


def across_tasks(tasks: dict[str, Pairs], questions: dict[str, list[str]], rng: random.Random) -> dict | None:
    """Equal-weight mean over tasks of their mean differences, the tasks' bootstraps drawn together, each task's
    seeds widened by t over the suite's seed degrees of freedom (`seeds_df`); `seeds` is the fewest any task
    has, `most_seeds` the most."""
    if not tasks:
        return None
    point = statistics.fmean(mean_difference(pairs, questions[t]) for t, pairs in tasks.items())
    widen = partial(t_widened, df=seeds_df(tasks, questions))
    draws = [
        statistics.fmean(resampled(p, questions[t], rng, widen) for t, p in tasks.items()) for _ in range(BOOTSTRAP)
    ]
    seeds = [len(p) for p in tasks.values()]
    return {
        "tasks": sorted(tasks),
        "seeds": min(seeds),
        "most_seeds": max(seeds),
        "mean": point,
        "ci95": interval(draws),
    }


def suite_mean(tasks: dict[str, dict], method: str) -> dict | None:
    """A seeded method's gain over the baseline, across the tasks that have runs of it."""
    pairs = {
        t: [(run, r["_scores"]["baseline"]) for run in r["_scores"][method].values()]
        for t, r in tasks.items()
        if r["_scores"].get(method)
    }
    return across_tasks(pairs, {t: sorted(tasks[t]["_scores"]["baseline"]) for t in pairs}, rng_for("suite", method))


def suite_difference(tasks: dict[str, dict], first: str, second: str) -> dict | None:
    """first - second (seed-paired), across the tasks that have both."""
    pairs = {t: p for t, r in tasks.items() if (p := seed_pairs(r["_scores"], first, second))}
    questions = {t: sorted(tasks[t]["_scores"]["baseline"]) for t in pairs}
    return across_tasks(pairs, questions, rng_for("suite", first, second))


def goal(suite: dict, tasks: dict[str, dict]) -> dict:
    """The issue's goal: across the whole suite (every task, every seed of practice and GEPA), practice's mean
    gain above GEPA's (the CI of the difference above zero), and no task's practice significantly below its
    baseline. Not met while the suite is incomplete, whatever the partial numbers say."""
    complete = set(tasks) == set(TASKS) and all(
        len(r["_scores"].get(m, {})) == len(SEEDS) for r in tasks.values() for m in ("practice", "gepa")
    )
    difference = suite["practice_minus_gepa"]
    above = bool(difference and difference["ci95"][0] > 0)
    return {
        "complete": complete,
        # null until the suite is complete: a partial suite's numbers are no verdict
        "practice_above_gepa": above if complete else None,
        "no_task_below_baseline": not suite["tasks_below_baseline"] if complete else None,
        "met": complete and above and not suite["tasks_below_baseline"],
    }


def candidate_verdict(first: float | None, difference: dict | None) -> str:
    """What the suite says of a candidate so far, from its `first_seed_difference` and its difference from
    practice: `kept` only when that difference, over every task and seed, is above zero (its CI)."""
    if first is None:
        return "first seed not yet run on every task"
    if stopped_after_first_seed(first):
        return "stopped after its first seed (no better than practice on the suite mean)"
    if difference is None or difference["seeds"] < len(SEEDS) or len(difference["tasks"]) < len(TASKS):
        return "later seeds running"
    return "kept: better than practice" if difference["ci95"][0] > 0 else "dropped: not better than practice"


def build_report() -> dict:
    tasks = {t: r for t in TASKS if (r := task_report(t)) is not None}
    suite = {
        "practice": suite_mean(tasks, "practice"),
        "gepa": suite_mean(tasks, "gepa"),
        **{f"{a}_minus_{b}": suite_difference(tasks, a, b) for a, b in COMPARED},
        "tasks_below_baseline": sorted(t for t, r in tasks.items() if r.get("practice_gain", {}).get("below_baseline")),
    }
    first = {c: first_seed_difference(c) for c in CANDIDATES}
    suite["candidates"] = {c: candidate_verdict(first[c], suite[f"{c}_minus_practice"]) for c in CANDIDATES}
    stopped = [c for c in CANDIDATES if stopped_after_first_seed(first[c])]
    return {
        "registered_in": registered_in(),
        "runs_saved": sum(result_path(*r).exists() for r in plan()),
        "runs_planned": len(plan()),
        "runs_stopped_for_futility": sum(m in stopped and s != SEEDS[0] for _, m, s in plan()),
        "goal": goal(suite, tasks),
        "suite": suite,
        "tasks": {t: {k: v for k, v in r.items() if k != "_scores"} for t, r in tasks.items()},
    }


def write_report() -> Path:
    """benchmarks/results/learning_suite.json (an earlier report kept in results/history/)."""
    return write_result("learning_suite", build_report())


# --- the tables README and docs/results.md quote ------------------------------------------------------------------


def _gain(entry: dict | None) -> str:
    """ "+0.075 (+0.013 to +0.138), 3 seeds" for a mean with its CI (a suite mean says over how many tasks while
    the suite fills), "+0.063" for one run; "–" when not run."""
    if not entry:
        return "–"
    if "ci95" not in entry:
        return f"{entry['gain']:+.3f}" + (" (kept nothing)" if entry.get("kept_nothing") else "")
    low, high = entry["ci95"]
    text = f"{entry['mean']:+.3f} ({low:+.3f} to {high:+.3f})"
    if "seeds" in entry:
        most = entry.get("most_seeds", entry["seeds"])
        seeds = f"{entry['seeds']}" if most == entry["seeds"] else f"{entry['seeds']}–{most}"
        text += f", {seeds} seed{'s' if most > 1 else ''}"
    if n := len(entry.get("tasks", [])):
        text += f", {n} task{'s' if n > 1 else ''}"
    return text


def _runs(task: dict, method: str) -> list[dict]:
    return [e for e in task["methods"].values() if e["method"] == method]


def _seeded(task: dict, method: str) -> str:
    """A seeded method's gain, its seeds, and how many of them kept nothing."""
    nothing = sum(e["kept_nothing"] for e in _runs(task, method))
    return _gain(task.get(f"{method}_gain")) + (f", kept nothing in {nothing}" if nothing else "")


def _calls(task: dict, method: str, seeds: set | None = None) -> str:
    """A method's mean agent calls over its runs (those of `seeds` only, when given)."""
    runs = [e for e in _runs(task, method) if seeds is None or e["seed"] in seeds]
    calls = [e["agent_calls"] for e in runs if e["agent_calls"] is not None]
    return f"{statistics.fmean(calls):.0f}" if calls else "–"


def _calls_beside_practice(task: dict, candidate: str) -> str:
    """ "256 vs 416 calls": a candidate's mean agent calls and practice's on the same seeds (what no_gate saves)."""
    seeds = {e["seed"] for e in _runs(task, candidate)}
    return f"{_calls(task, candidate)} vs {_calls(task, 'practice', seeds)} calls"


def markdown(report: dict) -> str:
    """The suite as tables: gains over each task's baseline on its 40 held-out questions (K=2), with 95% CIs
    where there are seeds (with one seed the CI covers the questions only); then the one-seed ablations and the
    candidates, as differences from practice."""
    names = {t: TASKS[t].source for t in report["tasks"]}
    lines = [
        f"Held-out Mean@{K} on each task's {HELDOUT_SIZE} new problems: the baseline agent's, then each method's gain "
        "over it; a seeded method's with its 95% CI (a bootstrap over seeds and questions) and its runs' mean agent "
        "calls.",
        "",
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
        "The hinted objective and the paper's algorithm (one seed) as gains over the baseline; each candidate as its "
        "difference from practice on the same seeds, then from GEPA.",
        "",
        "| task | " + " | ".join([label for _, label in ablations] + [f"{c} − practice" for c in CANDIDATES]) + " |",
        "|---|" + "---|" * (len(ablations) + len(CANDIDATES)),
    ]
    for t, r in report["tasks"].items():
        cells = [_gain(r["methods"].get(name)) for name, _ in ablations]
        for c in CANDIDATES:
            difference = r.get(f"{c}_minus_practice")
            cells.append(_gain(difference) + (f"; {_calls_beside_practice(r, c)}" if difference else ""))
        lines.append(f"| {names[t]} | " + " | ".join(cells) + " |")
    cells = ["" for _ in ablations] + [_gain(suite.get(f"{c}_minus_practice")) for c in CANDIDATES]
    lines.append("| **suite mean** | " + " | ".join(cells) + " |")
    cells = ["" for _ in ablations] + [_gain(suite.get(f"{c}_minus_gepa")) for c in CANDIDATES]
    # GEPA ran at practice's budget, not at a candidate's (its calls are in the cells above)
    lines.append("| **suite mean, candidate − GEPA at practice's budget** | " + " | ".join(cells) + " |")
    verdicts = suite.get("candidates", {})
    lines.append(
        "| **verdict** | " + " | ".join([""] * len(ablations) + [verdicts.get(c, "") for c in CANDIDATES]) + " |"
    )
    return "\n".join(lines) + "\n"


# --- README and docs/results.md ------------------------------------------------------------------------------------

# The lines between which README and docs/results.md hold the suite's tables (`suite.py report --into FILE`).
START, END = "<!-- learning suite tables: start -->", "<!-- learning suite tables: end -->"


def full(report: dict) -> bool:
    """Every planned run saved, or stopped for futility: the suite is reported only then (docs/results.md)."""
    return report["runs_saved"] + report["runs_stopped_for_futility"] >= report["runs_planned"]


def filled_in(path: Path, tables: str) -> str:
    """`path`'s text with `tables` between its marker lines (each a line of its own, once, in order), the rest as
    it was, line endings too; refused in one line (SystemExit) where the file or its markers are not so."""
    try:
        with path.open(encoding="utf-8", newline="") as f:  # (CRLF kept)
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"--into {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.split(newline)
    markers = [line if line in (START, END) else None for line in outside_code_blocks(lines)]
    if markers.count(START) != 1 or markers.count(END) != 1 or markers.index(START) > markers.index(END):
        raise SystemExit(
            f"--into {path}: put the lines {START} and {END}, once each and outside a code block, where the suite's "
            "tables go"
        )
    start, end = markers.index(START), markers.index(END)
    return newline.join([*lines[: start + 1], *tables.rstrip("\n").split("\n"), *lines[end:]])


def outside_code_blocks(lines: list[str]) -> list[str | None]:
    """`lines` with those of a code block (fenced or indented, as CommonMark reads them) as None: a page that shows
    the marker lines as an example does not get the tables there."""
    kept: list[str | None] = list(lines)
    for token in MarkdownIt("commonmark").parse("\n".join(lines)):
        if token.type in ("fence", "code_block") and token.map:
            first, after = token.map
            kept[first:after] = [None] * (after - first)
    return kept


def write_into(paths: list[Path], tables: str) -> None:
    """The tables put into every file of `paths`, or into none: each is read and checked before any is written.
    A symlink stays one: the file it names is written."""
    texts = {path.resolve(): filled_in(path, tables) for path in paths}
    for path, text in texts.items():
        replace_text(path, text)
