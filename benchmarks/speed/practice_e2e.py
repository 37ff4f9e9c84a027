"""The real practice command against the stub, end to end: where a step's time goes besides the LLM.

    python benchmarks/speed/practice_e2e.py [--questions 64] [--group 5] [--latency 0.05] [--runs 3]

`scripts/run_training_free_GRPO.py` runs one step on `--questions` arithmetic questions x G with the math
verifier, rollout concurrency 64, against a stub (its own process) that answers after `--latency` seconds,
every other attempt of a question right (so every group carries contrast) and the learner with valid JSON.
Reported, median of `--runs`: the command's wall time, the step's wall time, the LLM's own time (the time
during which the stub was serving at least one request, from its request log), the command's CPU time, and
calls and tokens by stage, with learner tokens per used group. Goals (issue 14): step <= 1.3 x LLM time;
command <= step + 0.8 s. Beside them, the *import floor*: a process that only imports the packages the command
is built on (openai, SQLAlchemy, Hydra, pydantic, aiosqlite, rich, dotenv) and exits, timed in the same run,
so command - step can be read against what no code of ours can save.
"""

import argparse
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import stub_process, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REPLIES = Path(__file__).resolve().parent / "practice_replies.py"
CONFIG = """# @package _global_
defaults:
  - /eval/local@evaluation: mawps
  - _self_
exp_id: e2e
evaluation:
  data: {{dataset: E2E}}
  verify_filename: math.py
  agent:
    model:
      model_provider: {{base_url: "{url}", model: stub, api_key: k}}
      concurrency: 64
practice:
  epochs: 1
  batch_size: {questions}
  grpo_n: {group}
  rollout_concurrency: 64
data:
  practice_dataset_name: E2E
"""


def busy_time(log: Path) -> float:
    """Seconds during which at least one request was being served (the union of their intervals)."""
    spans = sorted((r["start"], r["end"]) for r in map(json.loads, log.read_text().splitlines()))
    total, current_start, current_end = 0.0, *spans[0]
    for start, end in spans[1:]:
        if start > current_end:
            total += current_end - current_start
            current_start = start
        current_end = max(current_end, end)
    return total + current_end - current_start


# What the command cannot start without: the packages it is built on, as `python -c` imports them.
IMPORT_FLOOR = (
    "import gc; gc.disable(); import openai, sqlalchemy.orm, sqlalchemy.ext.asyncio, aiosqlite, hydra, pydantic,"
    " rich.console, rich.logging, dotenv, yaml"
)


def import_floor() -> float:
    """Wall seconds of a Python process that imports the command's third-party packages and exits."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", IMPORT_FLOOR], check=True)
    return time.perf_counter() - start


def one_run(args, workdir: Path) -> dict:
    log = workdir / "requests.jsonl"
    log.unlink(missing_ok=True)
    stub = ["--reply-fn", f"{REPLIES}:reply", "--latency", str(args.latency), "--timing-log", str(log)]
    with stub_process(*stub) as url:
        configs = workdir / "configs"
        (configs / "practice").mkdir(parents=True, exist_ok=True)
        (configs / "practice" / "e2e.yaml").write_text(
            CONFIG.format(url=url, questions=args.questions, group=args.group)
        )
        db = workdir / f"e2e-{time.monotonic_ns()}.db"
        data = workdir / "e2e.jsonl"
        data.write_text(
            "".join(
                json.dumps({"question": f"What is {i} plus {i + 1}?", "answer": str(2 * i + 1)}) + "\n"
                for i in range(args.questions)
            )
        )
        env = {**os.environ, "UTU_CONFIG_DIR": str(configs)}
        if args.code:  # another checkout's utu (and scripts) for the command: before/after comparisons
            env["PYTHONPATH"] = str(args.code)
        code = Path(args.code or ROOT)
        upload = [
            sys.executable,
            str(code / "scripts/data/upload_dataset.py"),
            "--file_path",
            str(data),
            "--dataset_name",
            "E2E",
            "--db_url",
            f"sqlite:///{db}",
        ]
        subprocess.run(upload, check=True, env=env, capture_output=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        practice = [
            sys.executable,
            str(code / "scripts/run_training_free_GRPO.py"),
            "--config_name",
            "e2e",
            "--db_url",
            f"sqlite:///{db}",
        ]
        result = subprocess.run(practice, env=env, cwd=workdir, capture_output=True, text=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if result.returncode != 0:
            raise SystemExit(f"practice failed: {result.stderr[-2000:]}")
    with sqlite3.connect(db) as conn:
        stats = json.loads(conn.execute("SELECT stats FROM practice_steps").fetchone()[0])
    usage = stats["usage"]
    learner = {k: v for k, v in usage.items() if k.startswith("learner")}
    learner_tokens = sum(v["prompt_tokens"] + v["completion_tokens"] for v in learner.values())
    return {
        "command_s": wall,
        "step_s": stats["wall_time"],
        "llm_busy_s": busy_time(log),
        "cpu_s": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "calls": {k: v["calls"] for k, v in usage.items()},
        "tokens": {k: v["prompt_tokens"] + v["completion_tokens"] for k, v in usage.items()},
        "groups_used": stats["groups_used"],
        "import_floor_s": import_floor(),
        "learner_tokens_per_used_group": learner_tokens / max(1, stats["groups_used"]),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--questions", type=int, default=64)
    parser.add_argument("--group", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tag", default="", help="suffix of the result file (e.g. a before/after label)")
    parser.add_argument("--code", type=Path, help="run the command of this checkout (e.g. a git worktree)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [one_run(args, Path(tmp)) for _ in range(args.runs)]

    def median(key: str) -> float:
        return round(statistics.median(r[key] for r in runs), 3)

    step, llm, command, floor = median("step_s"), median("llm_busy_s"), median("command_s"), median("import_floor_s")
    write_result(
        f"practice_e2e{args.tag}",
        {
            "questions": args.questions,
            "group": args.group,
            "latency_s": args.latency,
            "runs": args.runs,
            "command_s": command,
            "step_s": step,
            "llm_busy_s": llm,
            "cpu_s": median("cpu_s"),
            "step_over_llm": round(step / llm, 3),
            "command_minus_step_s": round(command - step, 3),
            "import_floor_s": floor,
            "command_minus_step_minus_floor_s": round(command - step - floor, 3),
            "learner_tokens_per_used_group": median("learner_tokens_per_used_group"),
            "calls": runs[0]["calls"],
            "tokens": runs[0]["tokens"],
            "all_runs": runs,
            "goals": {"step_over_llm <= 1.3": step / llm <= 1.3, "command - step <= 0.8 s": command - step <= 0.8},
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
