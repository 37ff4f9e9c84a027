"""Does practice teach tool choice? The bundled unit-conversion task, baseline vs enhanced agent.

    python benchmarks/learning/tool_selection.py [--learner qwen2.5-coder-0.5b|qwen2.5-coder-1.5b] [--k 2]
    python benchmarks/learning/tool_selection.py --agent qwen2.5-coder-1.5b --offset 90 --limit 30  # beside GRPO

The agent (embedded Qwen2.5-Coder-0.5B) answers unit conversions with four tools (utu/tools/unit_tools.py):
`convert_units` (exact: the right tool), `quick_convert` (fast, wrong by 0.5% or more on 92 of the 120
questions: the trap), `unit_factor` (right but slow) and `calculator`. It practises on UnitConversion 0-39
(G=4, updates gated on 40-59: `configs practice/local_unit_tools`), and both agents answer the held-out
questions 60-119 K times. Reported, with paired bootstrap 95% CIs over questions: Mean@K, and the
right-tool rate (an attempt called convert_units and never the trap). By hand only (30-60 min on 2 cores).
`--agent` names another embedded model as the agent (the learner defaults to the agent); `--offset` / `--limit`
choose the held-out questions (benchmarks/learning/grpo_tools.py tests the 1.5B on 90-119).
"""

import argparse
import asyncio
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import exp_rows, practise, run_command, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RIGHT, TRAP = "convert_units", "quick_convert"


def right_tool(tools: list[dict]) -> bool:
    called = {call["tool"] for call in tools}
    return RIGHT in called and TRAP not in called


def per_question(attempts, value) -> dict:
    groups = defaultdict(list)
    for a in attempts:
        if a.stage == "judged":
            groups[a.question].append(value(a))
    return {q: statistics.fmean(v) for q, v in groups.items()}


async def summarise(db_url: str, exp_ids: dict[str, str], practice: str, k: int) -> dict:
    from utu.db import Database
    from utu.db.models import EvaluationSample
    from utu.eval.metrics import ScoredAttempt, bootstrap_ci, compare, compute_metrics
    from utu.practice.store import PracticeStore

    async with Database(db_url) as db:
        rows = {
            name: [ScoredAttempt.from_row(r) for r in await exp_rows(db, EvaluationSample, exp)]
            for name, exp in exp_ids.items()
        }
        store = PracticeStore(db, practice)
        steps = await store.steps()
        library = await store.snapshot(steps[-1].step) if steps else None
    out: dict = {"questions": None}
    for name, attempts in rows.items():
        m = compute_metrics(attempts, k)
        judged = [a for a in attempts if a.stage == "judged"]
        out[name] = {
            "mean_at_k": m.mean_at_k,
            "mean_at_k_ci95": m.mean_at_k_ci95,
            "by_level": {level: v.model_dump() for level, v in m.by_level.items()},
            "right_tool_rate": statistics.fmean(right_tool(a.tools) for a in judged) if judged else 0.0,
            "trap_rate": statistics.fmean(any(c["tool"] == TRAP for c in a.tools) for a in judged) if judged else 0.0,
            "no_tool_rate": statistics.fmean(not a.tools for a in judged) if judged else 0.0,
            "tools": {tool: t.model_dump() for tool, t in m.tools.items()},
        }
    if not rows["baseline"]:
        raise SystemExit(f"no baseline run {exp_ids['baseline']} in {db_url}: run without --summary_only")
    out |= {"library": library.experiences if library else {}, "steps": [s.model_dump(mode="json") for s in steps]}
    if not rows.get("enhanced"):  # practice kept nothing: there is no enhanced agent to compare
        return out | {"enhanced": None, "questions": len({a.question for a in rows["baseline"]})}
    reward = compare(rows["baseline"], rows["enhanced"])
    right = {name: per_question(rows[name], lambda a: float(right_tool(a.tools))) for name in rows}
    shared = sorted(set(right["baseline"]) & set(right["enhanced"]))
    diffs = [right["enhanced"][q] - right["baseline"][q] for q in shared]
    return out | {
        "questions": len(reward.rows),
        "reward_paired_difference": reward.mean_diff,
        "reward_paired_ci95": reward.ci95,
        "right_tool_paired_difference": statistics.fmean(diffs) if diffs else 0.0,
        "right_tool_paired_ci95": bootstrap_ci(diffs),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", default="qwen2.5-coder-0.5b", help="the embedded model that answers")
    parser.add_argument("--learner", help="the embedded model that learns (default: the agent)")
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--offset", type=int, default=60, help="first held-out question")
    parser.add_argument("--limit", type=int, default=60, help="held-out questions")
    parser.add_argument("--tag", default=None)
    parser.add_argument("--summary_only", action="store_true", help="write the JSON from the runs already made")
    args = parser.parse_args()
    args.learner = args.learner or args.agent
    short = {name: name.replace(".", "").replace("-", "_") for name in (args.agent, args.learner)}
    agent_tag = "" if args.agent == "qwen2.5-coder-0.5b" else f"{short[args.agent]}_agent_"
    tag = args.tag or f"ts_{agent_tag}{short[args.learner]}"
    db_path = ROOT / "runs" / "tool_selection.db"
    db_path.parent.mkdir(exist_ok=True)
    db_url = f"sqlite:///{db_path}"
    env = {**os.environ, "UTU_LOCAL_MODEL": args.agent, "UTU_LEARNER_LOCAL_MODEL": args.learner}
    evaluate = [
        "scripts/run_eval.py",
        "--config_name",
        "local/unit_tools",
        "--offset",
        str(args.offset),
        "--limit",
        str(args.limit),
        "--pass_k",
        str(args.k),
        "--concurrency",
        "4",
        "--db_url",
        db_url,
    ]
    heldout = "" if (args.offset, args.limit) == (60, 60) else f"_q{args.offset}_{args.offset + args.limit}"
    exp_ids = {"baseline": f"ts_{agent_tag}baseline_k{args.k}{heldout}", "enhanced": f"{tag}_enhanced{heldout}"}
    practice = f"{tag}_practice"
    times: dict = {}
    if not args.summary_only:
        times["baseline"] = run_command(*evaluate, "--exp_id", exp_ids["baseline"], env=env)
        times["practice"], agent = practise("local_unit_tools", practice, db_url, env, nothing_learned_ok=True)
        if agent is None:  # not an older run's enhanced rows
            del exp_ids["enhanced"]
        else:
            times["enhanced"] = run_command(
                *evaluate, "--exp_id", exp_ids["enhanced"], "--agent_config", str(agent), "--fresh", env=env
            )
    summary = asyncio.run(summarise(db_url, exp_ids, practice, args.k))
    write_result(
        f"tool_selection_{tag}",
        {
            "agent": args.agent,
            "learner": args.learner,
            "k": args.k,
            "heldout": f"UnitConversion[{args.offset}:{args.offset + args.limit}]",
            "seconds": times,
            **summary,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
