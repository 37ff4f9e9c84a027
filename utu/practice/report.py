"""A report folder for a practice run: a markdown summary and PNG plots, from what the database holds.

    python -m utu.practice.report --exp_id demo_practice [--baseline EXP --enhanced EXP] [--db_url URL]

Writes runs/<exp_id>/report.md, reward_per_step.png, library_size.png and tokens_per_stage.png.
"""

import argparse
from collections import Counter
from pathlib import Path

from sqlalchemy import select

from utu import cli
from utu.config.flags import add_place_flags
from utu.db import Database, EvaluationSample, ExperienceSnapshot
from utu.errors import ConfigError
from utu.eval.metrics import ScoredAttempt, compare, compute_metrics
from utu.practice.store import PracticeStore
from utu.practice.types import StepStats


async def load(db: Database, exp_id: str) -> tuple[list[StepStats], dict[str, str]]:
    steps = await PracticeStore(db, exp_id).steps()
    async with db.sessions() as s:
        last = await s.scalar(
            select(ExperienceSnapshot)
            .where(ExperienceSnapshot.exp_id == exp_id)
            .order_by(ExperienceSnapshot.step.desc())
        )
    return steps, dict(last.experiences) if last else {}


async def attempts(db: Database, exp_id: str) -> list[ScoredAttempt]:
    async with db.sessions() as s:
        rows = await s.scalars(select(EvaluationSample).where(EvaluationSample.exp_id == exp_id))
        return [ScoredAttempt.from_row(r) for r in rows]


def plot(steps: list[StepStats], out: Path, group_size: int) -> list[str]:
    try:
        import matplotlib
    except ImportError:
        raise ConfigError("the report's plots need matplotlib: pip install 'utu[report]'") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [s.step for s in steps]
    files = []

    def save(name: str, title: str, ylabel: str) -> None:
        plt.xticks(x)
        plt.title(title)
        plt.xlabel("step")
        plt.ylabel(ylabel)
        plt.grid(alpha=0.3)
        plt.tight_layout()
        plt.savefig(out / name, dpi=100)
        plt.close()
        files.append(name)

    plt.figure(figsize=(6, 3.5))
    plt.plot(x, [s.mean_at_g for s in steps], marker="o", label=f"Mean@{group_size} (practice)")
    evals = [(s.step, s.eval) for s in steps if s.eval is not None]
    if evals:
        label = f"Mean@{evals[0][1].k} (eval)"
        plt.plot([step for step, _ in evals], [e.mean_at_k for _, e in evals], marker="s", label=label)
    plt.ylim(-0.05, 1.05)
    plt.legend()
    save("reward_per_step.png", "Reward per step", "mean reward")

    plt.figure(figsize=(6, 3.5))
    plt.bar(x, [s.library_size for s in steps])
    save("library_size.png", "Experience library size", "experiences")

    stages = sorted({tag for s in steps for tag in s.usage})
    plt.figure(figsize=(6, 3.5))
    bottom = [0] * len(steps)
    for tag in stages:
        values = [s.usage[tag].prompt_tokens + s.usage[tag].completion_tokens if tag in s.usage else 0 for s in steps]
        plt.bar(x, values, bottom=bottom, label=tag)
        bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    plt.legend(fontsize=7)
    save("tokens_per_stage.png", "Tokens per stage", "tokens")

    tools = sorted({tool for s in steps for tool in s.tools})
    if tools:  # calls per step (solid) and the failed ones (dashed), per tool
        plt.figure(figsize=(6, 3.5))
        for tool in tools:
            line = plt.plot(x, [s.tools[tool].calls if tool in s.tools else 0 for s in steps], marker="o", label=tool)
            errors = [s.tools[tool].errors if tool in s.tools else 0 for s in steps]
            plt.plot(x, errors, linestyle="--", color=line[0].get_color(), label=f"{tool} errors")
        plt.legend(fontsize=7)
        save("tool_calls_per_step.png", "Tool calls per step", "calls")
    return files


def meaning(ci95: tuple[float, float], questions: int) -> str:
    """What a paired difference's confidence interval lets one claim."""
    low, high = ci95
    if low > 0:
        return "The interval excludes zero: on these questions the enhanced agent is measurably better."
    if high < 0:
        return "The interval excludes zero: on these questions the enhanced agent is measurably worse."
    return (
        f"The interval includes zero: on {questions} questions no difference can be claimed either way "
        "(more questions, or a larger K, narrow it)."
    )


def tool_lines(steps: list[StepStats]) -> list[str]:
    """Per step and tool: calls, errors, latency, and the mean reward of attempts with and without the tool."""
    rows = [(s.step, tool, t) for s in steps for tool, t in s.tools.items()]
    if not rows:
        return []
    lines = [
        "",
        "## Tools",
        "",
        "| step | tool | calls | errors | mean s | reward with (attempts) | reward without |",
        "|---|---|---|---|---|---|---|",
    ]
    for step, tool, t in rows:
        with_, without = t.rewards_text()
        lines.append(
            f"| {step} | {tool} | {t.calls} | {t.errors} | {t.mean_seconds:.2f} | {with_} "
            f"({t.attempts_using}) | {without} |"
        )
    return lines


async def write_report(
    db: Database, exp_id: str, out: Path, baseline: str | None = None, enhanced: str | None = None, note: str = ""
) -> Path:
    steps, library = await load(db, exp_id)
    if not steps:
        raise ConfigError(f"--exp_id {exp_id!r}: no practice steps stored for it (is it an eval's exp_id?)")
    if bool(baseline) != bool(enhanced):
        raise ConfigError("--baseline and --enhanced go together: the report compares the two")
    compared = [await attempts(db, exp) for exp in (baseline, enhanced) if exp]
    for exp, rows in zip((baseline, enhanced), compared, strict=False):  # (both, or none)
        if not rows:
            raise ConfigError(f"--baseline/--enhanced: no attempts stored for exp_id {exp!r}: run its eval first")
    out.mkdir(parents=True, exist_ok=True)
    g = steps[0].group_size
    images = plot(steps, out, g)
    lines = [f"# Practice report: {exp_id}", ""]
    if note:
        lines += [note, ""]
    if len(compared) == 2:
        a, b = compared
        k = max(Counter(x.question for x in a).values(), default=1)  # attempts per question
        diff = compare(a, b)
        lines += ["## Baseline vs enhanced agent", "", f"| | Mean@{k} | 95% CI | Pass@{k} |", "|---|---|---|---|"]
        for label, exp in (("baseline", baseline), ("enhanced", enhanced)):
            m = compute_metrics(a if exp == baseline else b, k)
            low, high = m.mean_at_k_ci95
            lines.append(f"| {label} (`{exp}`) | {m.mean_at_k:.3f} | {low:.3f}–{high:.3f} | {m.pass_at_k:.3f} |")
        lines += [
            "",
            f"Paired difference (enhanced − baseline) over {len(diff.rows)} questions: **{diff.mean_diff:+.3f}** "
            f"(95% CI {diff.ci95[0]:+.3f} to {diff.ci95[1]:+.3f}). {meaning(diff.ci95, len(diff.rows))}",
            "",
        ]
    groups = "groups used/skipped (+topped up)"
    header = f"| step | epoch | Mean@{g} | {groups} | library | ADD/UPDATE/DELETE | refused | tokens |"
    lines += ["## Steps", "", header, "|---|---|---|---|---|---|---|---|"]
    for s in steps:
        ops = s.operations
        lines.append(
            f"| {s.step} | {s.epoch} | {s.mean_at_g:.3f} | {s.groups} | {s.library_size} | "
            f"{ops['ADD']}/{ops['UPDATE']}/{ops['DELETE']} | {s.operations_refused} | {s.tokens} |"
        )
    lines += tool_lines(steps)
    lines += ["", "## Learned library", ""]
    shown = [f"- **{cli.markdown_text(key)}** {cli.markdown_text(text)}" for key, text in library.items()]
    lines += shown or ["(empty)"]
    lines += ["", "## Plots", ""] + [f"![{name}]({name})" for name in images]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exp_id", required=True)
    parser.add_argument("--baseline")
    parser.add_argument("--enhanced")
    add_place_flags(parser, "the report (report.md) and its plots")
    args = parser.parse_args()
    async with Database(args.db_url) as db:
        path = await write_report(db, args.exp_id, args.output_dir / args.exp_id, args.baseline, args.enhanced)
    print(f"report written to {path}")
    return 0


if __name__ == "__main__":
    cli.setup()
    cli.run(main)
