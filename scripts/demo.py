"""The full demo on the embedded model: baseline evaluation, practice, enhanced evaluation, comparison, report.

    make demo          (or: .venv/bin/python scripts/demo.py)

It runs the same commands a user runs (printed as it goes), on the bundled Portions task, with no key and no
network: how many 250 g bags 3 kg of flour fills, or 200 ml cups 5 litres of juice, where the amount and the portion
are in different units. The 0.5B agent often divides before converting (3/250 bags), but not always, so its groups
of attempts carry the contrast practice learns from, and one sentence of advice (convert, then divide) lifts its
score several times over (on MixedUnits' benchmark, its 40 held-out flour and juice questions went from 0.125 to
0.74 with a hand-written rule; Portions is MixedUnits without the ropes, whose metres the 0.5B already
converts). Each run starts its experiments
over (`--fresh`), so a demo left from an older version or another model never blocks it; the scripts
themselves resume when run without --fresh. Point it at a real API with .env (.env.example).
"""

import asyncio
import os
import shlex
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
console = Console()

EVAL = ["--config_name", "local/portions"]  # held-out questions 200-211, K=2
# The learner: the 0.5B wrote only question-specific sentences ("When Mary already put in 2 cups, ..."), all
# refused by the screening, so a demo with it learned nothing and failed (2026-11-24: 17 of 17 refused). The
# 1.5B writes general ones often enough; the agent stays the 0.5B.
DEMO_LEARNER = "qwen2.5-coder-1.5b"
PRACTICE = "local_portions"  # configs/practice/: one step of 8 questions, gated on 8 others
NOTHING_KEPT = (
    "Every proposal was refused, by the screening (junk: ...) or because it did not raise the agent's score on the "
    "validation questions enough, also when the learner looked again: the enhanced agent would be the baseline agent "
    "itself, so nothing was measured. The small "
    "learner often ends so (docs/results.md); a capable learner is one .env away (README, Using a real API)."
)
HONEST_NOTE = """**What to expect from small models.** The task is sized for the embedded Qwen2.5-Coder-0.5B agent: the
division is easy, so what decides the reward is a habit, converting the amount into the portion's unit before
dividing, which the agent follows only some of the time and which one sentence of advice much improves; the learner is
Qwen2.5-Coder-1.5B, and the update is kept only if Mean@2 on 8 validation questions rises by more than 0.15 (or the
rules it adds that do so alone; when every proposal is refused, the learner looks at the same attempts once more;
when the agent's attempts differ on fewer than 3 questions, it practises on 8 more). 12 held-out
questions at K=2 show only a large effect: read the paired difference with its confidence interval
(`benchmarks/learning/learning_gain.py --task portions`, three steps: +0.667 on 60; docs/results.md). On GSM8K
no library helps this agent (its errors are reasoning slips; docs/results.md). Point the same commands at a
capable API model by setting `UTU_LLM_BASE_URL`, `UTU_LLM_MODEL` and `UTU_LLM_API_KEY` in `.env`: the paper
reports +2.7 to +5.4 points on AIME with DeepSeek-V3.1."""


def run(title: str, *args: str, learned_nothing_ok: bool = False) -> bool:
    """Run one command as a user would; False if it was a practice that ran every step and kept nothing."""
    command = [sys.executable, *args]
    console.rule(f"[bold]{title}")
    console.print("$ " + shlex.join(["python", *args]), style="cyan")
    result = subprocess.run(command, cwd=ROOT)
    if result.returncode == 2 and learned_nothing_ok and asyncio.run(kept_nothing("demo_practice")):
        return False
    if result.returncode != 0:
        console.print(f"[red]step failed (exit {result.returncode}); fix the error above and run `make demo` again")
        sys.exit(result.returncode)
    return True


async def kept_nothing(exp_id: str) -> bool:
    """Whether practice ran all its steps and every proposal was refused (by the screening or the gate)."""
    from utu.db import Database
    from utu.practice.plan import planned_steps
    from utu.practice.store import PracticeStore
    from utu.practice.training_free_grpo import load_practice_config

    config = load_practice_config(PRACTICE)
    planned = planned_steps(config, config.data.rollout_data_truncate)
    async with Database() as db:
        steps = await PracticeStore(db, exp_id).steps()
        return len(steps) == planned and steps[-1].library_size == 0


async def refusals(exp_id: str) -> list[tuple[int, str, str]]:
    from utu.db import Database
    from utu.practice.history import operation_log

    async with Database() as db:
        rows = await operation_log(db, exp_id)
        return [(r.step, r.new_text or "", r.reason or "") for r in rows]


def print_refusals(rows: list[tuple[int, str, str]]) -> None:
    """Each refused proposal and why, as written: a learner's "[/INST]" is no markup (rich would raise on it), an
    escape sequence is shown, not obeyed."""
    from rich.text import Text

    from utu import cli

    for step, text, reason in rows:
        console.print(
            Text.assemble(f"step {step}: ", (cli.printable(text), "dim"), f"\n  refused: {cli.printable(reason)}")
        )


async def unchanged_comparison(baseline: str) -> str:
    """What stands for the comparison when practice kept nothing: the baseline's score, and a difference that is
    zero by definition (the enhanced agent would be the baseline agent), with no interval: it was not measured."""
    from utu.db import Database
    from utu.eval.metrics import compute_metrics
    from utu.practice.report import attempts

    async with Database() as db:
        rows = await attempts(db, baseline)
    k = max(Counter(r.question for r in rows).values(), default=1)  # attempts per question
    m = compute_metrics(rows, k)
    low, high = m.mean_at_k_ci95
    return (
        f"baseline Mean@{k} {m.mean_at_k:.3f} (95% CI {low:.3f}-{high:.3f}) on {m.questions_scored} questions; "
        "no enhanced agent: the paired difference is 0 by definition, not measured (nothing was kept)."
    )


def read_env_as_the_commands_do() -> None:
    """Work from the checkout, where the commands below run, and read its .env as they do (the shell's variables
    win): so this script and they agree on the model, and on the database (./utu.db) it reads the refusals from."""
    from utu.cli import escape_what_the_terminal_cannot_show, read_env

    os.chdir(ROOT)
    read_env()
    escape_what_the_terminal_cannot_show()


def main() -> None:
    start = time.perf_counter()
    read_env_as_the_commands_do()
    if not os.environ.get("UTU_LLM_BASE_URL"):
        model = os.environ.get("UTU_LOCAL_MODEL") or "qwen2.5-coder-0.5b"
        learner = os.environ.setdefault("UTU_LEARNER_LOCAL_MODEL", DEMO_LEARNER)  # the commands below inherit it
        console.print(
            f"No UTU_LLM_BASE_URL: the embedded {model} model is the agent and {learner} the learner "
            "(llama.cpp's llama-server, CPU)."
        )
    run("1/5 baseline evaluation", "scripts/run_eval.py", *EVAL, "--exp_id", "demo_baseline", "--fresh")
    learned = run(
        "2/5 practice (Training-Free GRPO)",
        "scripts/run_training_free_GRPO.py",
        "--config_name",
        PRACTICE,
        "--exp_id",
        "demo_practice",
        "--fresh",
        learned_nothing_ok=True,
    )
    if learned:
        run(
            "3/5 enhanced agent evaluation",
            "scripts/run_eval.py",
            *EVAL,
            "--exp_id",
            "demo_enhanced",
            "--fresh",
            "--agent_config",
            "runs/demo_practice/enhanced_agent.yaml",
        )
        run("4/5 comparison", "scripts/run_eval.py", "--compare", "demo_baseline", "demo_enhanced")
        run("5/5 the learned library", "-m", "utu.commands.library", "show", "--exp_id", "demo_practice")
    else:
        console.rule("[bold]3/5 practice kept no experience")
        print_refusals(asyncio.run(refusals("demo_practice")))
        console.print(NOTHING_KEPT)
    from utu.db import Database
    from utu.practice.report import write_report

    async def report() -> Path:
        async with Database() as db:
            enhanced = "demo_enhanced" if learned else None
            return await write_report(
                db, "demo_practice", ROOT / "runs/demo_practice", "demo_baseline", enhanced, HONEST_NOTE
            )

    path = asyncio.run(report())
    console.print(f"report: {path} (with PNG plots beside it)", markup=False)
    if not learned:
        console.print(asyncio.run(unchanged_comparison("demo_baseline")))
    console.print(" ".join(HONEST_NOTE.replace("**", "").split()))  # one paragraph, wrapped to the terminal
    console.print(f"demo finished in {time.perf_counter() - start:.0f}s.")
    console.print("The embedded model keeps running; stop it with `.venv/bin/python -m utu.llm.local stop --all`.")


if __name__ == "__main__":
    main()
