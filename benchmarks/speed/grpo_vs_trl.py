"""Our GRPO trainer against TRL's GRPOTrainer: same tiny model, data, group size, lengths and step count, on the CPU.

    python benchmarks/speed/grpo_vs_trl.py [--group_size 16 --out grpo_vs_trl_g16] [--steps 12] [--max_new_tokens 32]

Each trainer runs in its own process (so peak RSS is its own), after one warm-up step that is not timed, and
the two alternate `--repeats` times (the median counts). EOS is blocked until max_new_tokens, so both generate
exactly the same number of tokens. Throughput = completions / wall time of the timed steps (generation + reward
+ update).
Goals: ours >= 1.3x TRL's completions/s at G=8, >= 2.5x at G=16 (issue 17), at no more peak memory.
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import result_name, write_result  # noqa: E402

PROMPTS = ["a", "b", "ab", "ba", "aa", "h", "0", "12"]
# A system prompt of realistic length (~30 tokens for a real tokenizer, 120 characters here): prompts are not free.
SYSTEM = "Solve the problem step by step. Think first, check each step, then give only the final answer as one letter."


def knobs(args: argparse.Namespace) -> dict:
    names = ("group_size", "prompts_per_step", "max_new_tokens", "steps", "hidden", "layers")
    return {name: getattr(args, name) for name in names} | {"lr": 1e-3}


def run_ours(k: dict) -> dict:
    import asyncio

    from utu.rl.env import GRPOEnv, PromptTemplate
    from utu.rl.grpo import LocalGRPO
    from utu.rl.toy import char_tokenizer, tiny_llama
    from utu.rl.train import train_step
    from utu.verify import Verifier, load_verifier

    tokenizer = char_tokenizer()
    model = tiny_llama(len(tokenizer), hidden=k["hidden"], layers=k["layers"])
    verifier = Verifier(load_verifier("utu.rl.toy:verify_func"), timeout=5)
    questions = [(i, q, "a") for i, q in enumerate(PROMPTS)]
    env = GRPOEnv(questions, PromptTemplate(system=SYSTEM, user="{question}"), verifier, k["prompts_per_step"])
    batch = k["group_size"] * k["prompts_per_step"]
    agent = LocalGRPO(
        model,
        tokenizer,
        group_size=k["group_size"],
        batch_size=batch,
        lr=k["lr"],
        max_new_tokens=k["max_new_tokens"],
        min_output_tokens=k["max_new_tokens"],
    )

    async def steps() -> float:
        await train_step(agent, env)  # warm-up
        start = time.perf_counter()
        for _ in range(k["steps"]):
            await train_step(agent, env)
        return time.perf_counter() - start

    return {"seconds": asyncio.run(steps()), "completions": k["steps"] * batch}


def run_trl(k: dict) -> dict:
    import tempfile

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from utu.rl.toy import char_tokenizer, tiny_llama

    tokenizer = char_tokenizer()
    model = tiny_llama(len(tokenizer), hidden=k["hidden"], layers=k["layers"])
    batch = k["group_size"] * k["prompts_per_step"]
    rows = [{"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}]} for q in PROMPTS]

    def reward(completions, **_):  # the same toy reward, on the completion text
        from utu.rl.toy import reward as toy_reward

        texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
        return [toy_reward(t, "a") for t in texts]

    marks: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, *_, **__):
            marks.append(time.perf_counter())

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        per_device_train_batch_size=batch,
        num_generations=k["group_size"],
        max_completion_length=k["max_new_tokens"],
        learning_rate=k["lr"],
        max_steps=k["steps"] + 1,
        use_cpu=True,
        bf16=False,
        report_to=[],
        logging_steps=10**6,
        save_strategy="no",
        disable_tqdm=True,
        generation_kwargs={"min_new_tokens": k["max_new_tokens"]},
        gradient_checkpointing=False,  # what ours does; TRL's default (True) would only make it slower here
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(rows * 64),
        callbacks=[StepClock()],
    )
    trainer.train()
    return {"seconds": marks[-1] - marks[0], "completions": k["steps"] * batch}  # the first step is the warm-up


def child(which: str, k: dict) -> None:
    result = run_ours(k) if which == "ours" else run_trl(k)
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["completions_per_s"] = result["completions"] / result["seconds"]
    print("RESULT " + json.dumps(result))


def measure(which: str, k: dict) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--child", which, "--knobs", json.dumps(k)],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    if line is None:
        raise RuntimeError(f"{which} failed:\n{out.stderr[-3000:]}")
    return json.loads(line.removeprefix("RESULT "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--group_size", type=int, default=8)
    parser.add_argument("--prompts_per_step", type=int, default=2)
    parser.add_argument("--max_new_tokens", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--out", type=result_name, default="grpo_vs_trl", help="result name under benchmarks/results/")
    parser.add_argument("--child", choices=["ours", "trl"])
    parser.add_argument("--knobs")
    args = parser.parse_args()
    if args.child:
        child(args.child, json.loads(args.knobs))
        return
    k = knobs(args)
    runs: dict[str, list[dict]] = {"ours": [], "trl": []}
    for _ in range(args.repeats):
        for which in runs:
            runs[which].append(measure(which, k))
    ours, trl = (sorted(r, key=lambda x: x["completions_per_s"])[len(r) // 2] for r in runs.values())  # medians
    speedup = ours["completions_per_s"] / trl["completions_per_s"]
    memory = ours["peak_rss_mb"] / trl["peak_rss_mb"]
    target = 2.5 if args.group_size >= 16 else 1.3
    write_result(
        args.out,
        {
            "setup": k,
            "repeats": args.repeats,
            "ours": ours,
            "trl": trl,
            "all_completions_per_s": {w: [round(x["completions_per_s"], 1) for x in r] for w, r in runs.items()},
            "throughput_ratio": round(speedup, 3),
            "peak_memory_ratio": round(memory, 3),
            "goal": f"throughput_ratio >= {target} and peak_memory_ratio <= 1.0",
            "goal_met": speedup >= target and memory <= 1.0,
        },
    )


if __name__ == "__main__":
    main()
