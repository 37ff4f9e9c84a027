"""Does parameter-updating GRPO with tools teach tool use? The bundled unit-conversion task, before and after.

    python benchmarks/learning/grpo_tools.py [--config_name qwen05b_unit_tools] [--steps N] [--k 2] [--summary_only]

The embedded Qwen2.5-Coder-0.5B, as the agent of configs/agents/practice/unit_tools_agent.yaml, is trained by
`scripts/run_grpo.py --config_name qwen05b_unit_tools` on UnitConversion 0-59 (LoRA, G=4, each completion up to
4 turns with its tools) and tested before and after on the held-out questions 60-119, the ones
benchmarks/learning/tool_selection.py evaluates practice on. Reported, with paired bootstrap 95% CIs over questions:
Mean@K, the right-tool rate (a completion called convert_units and never the trap quick_convert), the trap rate
and the no-tool rate; beside them, what practice achieved on the same questions
(benchmarks/results/tool_selection_ts_qwen25_coder_05b.json). By hand only: hours on 2 cores.
`--config_name qwen15b_unit_tools` trains the 1.5B instead (tested on 90-119), the steps of its config unless
`--steps` is given; results go to benchmarks/results/grpo_tools_<model>.json (qwen05b, qwen15b).
"""

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import RESULTS, run_command, write_result  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RIGHT, TRAP = "convert_units", "quick_convert"


def names(config_name: str) -> tuple[str, str]:
    """The run's exp_id and the model tag of its result files (qwen05b_unit_tools -> qwen05b)."""
    tag = config_name.removesuffix("_unit_tools")
    return ("bench_grpo_tools" if config_name == "qwen05b_unit_tools" else f"bench_grpo_tools_{tag}"), tag


def described(config_name: str) -> dict[str, str]:
    """The model and the training questions of a tools config, as the trainer loads it."""
    from utu.config import load_config
    from utu.config.rl import RLConfig

    config = load_config("rl", config_name, RLConfig)
    lora = config.trainer.lora
    model = config.model.path + (f" (LoRA r={lora.r})" if lora else " (full)")
    return {"model": model, "train": f"UnitConversion[0:{config.data.train_limit}]"}


def span(test: dict) -> str:
    indexes = [p["index"] for p in test["before"]["per_prompt"]]
    return f"UnitConversion[{min(indexes)}:{max(indexes) + 1}]"


def rates(per_prompt: list[dict]) -> dict[str, dict[int, float]]:
    """Per question: mean reward, and the shares of completions that called the right tool, the trap, none."""
    out: dict[str, dict[int, float]] = {"reward": {}, "right_tool": {}, "trap": {}, "no_tool": {}}
    for p in per_prompt:
        calls = [set(called) for called in p["tools"]]
        out["reward"][p["index"]] = statistics.fmean(p["rewards"])
        out["right_tool"][p["index"]] = statistics.fmean(RIGHT in c and TRAP not in c for c in calls)
        out["trap"][p["index"]] = statistics.fmean(TRAP in c for c in calls)
        out["no_tool"][p["index"]] = statistics.fmean(not c for c in calls)
    return out


def summarise(test: dict, k: int) -> dict:
    from utu.eval.metrics import bootstrap_ci

    before, after = rates(test["before"]["per_prompt"]), rates(test["after"]["per_prompt"])
    out: dict = {"questions": len(before["reward"]), "k": k}
    for metric in before:
        common = sorted(set(before[metric]) & set(after[metric]))
        differences = [after[metric][q] - before[metric][q] for q in common]
        low, high = bootstrap_ci(differences)
        out[metric] = {
            "before": statistics.fmean(before[metric].values()),
            "after": statistics.fmean(after[metric].values()),
            "paired_difference": statistics.fmean(differences),
            "ci95": [low, high],
            "excludes_zero": low > 0 or high < 0,
        }
    return out


# What practice achieved with the same model as its agent (learning/tool_selection.py), on the same questions.
PRACTICE_RESULTS = {
    "qwen05b": "tool_selection_ts_qwen25_coder_05b.json",  # agent and learner 0.5B, questions 60-119
    "qwen15b": "tool_selection_ts_qwen25_coder_15b_agent_qwen25_coder_15b.json",  # 1.5B, questions 90-119
}


def practice_on_the_same_task(tag: str) -> dict | None:
    path = RESULTS / PRACTICE_RESULTS[tag] if tag in PRACTICE_RESULTS else None
    if path is None or not path.is_file():
        return None
    data = json.loads(path.read_text())
    enhanced = data.get("enhanced")  # None: practice kept nothing, so there is no enhanced agent
    return {
        "source": str(path.relative_to(ROOT)),
        "learner": data.get("learner"),
        "heldout": data.get("heldout", "UnitConversion[60:120]"),
        "baseline_mean_at_k": data["baseline"]["mean_at_k"],
        "enhanced_mean_at_k": enhanced and enhanced["mean_at_k"],
        "reward_paired_difference": data.get("reward_paired_difference"),
        "reward_paired_ci95": data.get("reward_paired_ci95"),
        "right_tool_before": data["baseline"]["right_tool_rate"],
        "right_tool_after": enhanced and enhanced["right_tool_rate"],
        "validation": [step.get("validation") for step in data.get("steps", [])],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config_name", default="qwen05b_unit_tools", help="a tools config under configs/rl/")
    parser.add_argument("--steps", type=int, help="training steps (default: the config's)")
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--summary_only", action="store_true", help="write the JSON from the run already made")
    parser.add_argument("--note", help="with --summary_only: what happened to the run (why it stopped, a resume)")
    args = parser.parse_args()
    exp_id, tag = names(args.config_name)
    out = ROOT / "runs" / exp_id / "grpo"
    seconds = None
    if not args.summary_only:
        steps = ["--steps", str(args.steps)] if args.steps is not None else []
        command = ["--config_name", args.config_name, "--exp_id", exp_id, *steps, "--fresh", f"test_k={args.k}"]
        seconds = run_command("scripts/run_grpo.py", *command, env=dict(os.environ))
    if not (out / "test.json").is_file():
        raise SystemExit(f"{out / 'test.json'}: no run of {args.config_name} to summarise; run without --summary_only")
    test = json.loads((out / "test.json").read_text())
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    curve = [
        {key: m.get(key) for key in ("step", "reward", "turns/mean", "completions/clipped_ratio", "gen_time")}
        | {"convert_units_calls": m.get(f"tools/{RIGHT}/calls")}
        for m in metrics
    ]
    if "after" not in test:  # stopped before the end: what the starting model and the first steps showed
        before = rates(test["before"]["per_prompt"])
        pilot = {
            "note": args.note,
            "config": f"configs/rl/{args.config_name}.yaml",
            "heldout": span(test),
            "k": args.k,
            "before": {metric: statistics.fmean(values.values()) for metric, values in before.items()},
            "steps_run": len(metrics),
            "train_curve": curve,
        }
        write_result(f"grpo_tools_{tag}_pilot", pilot)
        return 0
    result = {
        "task": "UnitConversion (tool selection)",
        "note": args.note,
        **described(args.config_name),
        "config": f"configs/rl/{args.config_name}.yaml",
        "heldout": span(test),
        "steps": test.get("steps"),
        "wall_time_s": seconds,
        **summarise(test, args.k),
        "practice_on_the_same_questions": practice_on_the_same_task(tag),
        "train_curve": curve,
    }
    print(json.dumps({k: v for k, v in result.items() if k != "train_curve"}, indent=2))
    write_result(f"grpo_tools_{tag}", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
