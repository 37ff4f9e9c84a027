"""Peak memory of a GRPO population sharing one base model (utu.rl.agilerl.GRPO.population with LoRA) against one
agent, and against the same population with a model per member (as AgileRL holds it), on an embedded model.

    python benchmarks/speed/population_memory.py [--model qwen2.5-coder-0.5b] [--size 4]

Each arrangement runs in its own process: build, then one `learn` per member (so each optimizer holds its
moments), then its peak RSS. Goal (issue 53): population <= (one agent + (size - 1) x (adapter + its AdamW
state)) x 1.2.
"""

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import write_result  # noqa: E402

LORA = {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "lora_dropout": 0.0}


def run(arrangement: str, model_name: str, size: int) -> dict:
    import torch
    from peft import LoraConfig

    from utu.rl.agilerl import GRPO
    from utu.rl.grpo import embedded_model_source, load_causal_lm

    model, tokenizer = load_causal_lm(embedded_model_source(model_name))
    knobs = {"batch_size": 4, "group_size": 2, "max_output_tokens": 4, "lr": 1e-4, "update_epochs": 1}
    lora = LoraConfig(**LORA)
    common = {"pad_token_id": tokenizer.eos_token_id, "lora_config": lora, **knobs}
    if arrangement == "one":
        agents = [GRPO(actor_network=model, **common)]
    elif arrangement == "shared":
        agents = GRPO.population(size=size, actor_network=model, **common)
    else:  # a model per member
        agents = [GRPO(actor_network=model, **common)]
        for _ in range(size - 1):
            copy, _ = load_causal_lm(embedded_model_source(model_name))
            agents.append(GRPO(actor_network=copy, **common))
    prompt = tokenizer("Say a.", return_tensors="pt")
    states = [{"input_ids": prompt["input_ids"], "attention_mask": prompt["attention_mask"]}]
    for agent in agents:
        completion_ids, masks = agent.get_action(states)
        agent.learn((completion_ids, masks, torch.tensor([[1.0, 0.0]])))
    adapter = agents[0].trainer.optimizer.param_groups[0]["params"]
    adapter_bytes = sum(p.numel() * p.element_size() for p in adapter)
    return {
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        # after every member's update: the peak is set by loading the GGUF, this shows what the members hold
        "rss_after_updates_mb": current_rss_mb(),
        "adapter_mb": adapter_bytes / 2**20,
        "adapter_and_adam_mb": 3 * adapter_bytes / 2**20,  # weights, exp_avg, exp_avg_sq (fp32)
        "first_model_params_m": sum(p.numel() for p in model.parameters()) / 1e6,  # with every adapter on it
    }


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--child", choices=["one", "shared", "copies"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run(args.child, args.model, args.size)))
        return
    measured = {}
    for arrangement in ("one", "shared", "copies"):
        done = subprocess.run(
            [sys.executable, __file__, "--child", arrangement, "--model", args.model, "--size", str(args.size)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            sys.exit(f"{arrangement}: exit {done.returncode}\n{done.stderr[-3000:]}")
        measured[arrangement] = json.loads(done.stdout.strip().splitlines()[-1])
        print(arrangement, measured[arrangement], flush=True)
    one, shared = measured["one"], measured["shared"]
    bound = one["peak_rss_mb"] + (args.size - 1) * one["adapter_and_adam_mb"]
    result = {
        "model": args.model,
        "size": args.size,
        "lora": LORA,
        "measured": measured,
        "bound_mb": bound,
        "shared_over_bound": shared["peak_rss_mb"] / bound,
        "copies_over_shared": measured["copies"]["peak_rss_mb"] / shared["peak_rss_mb"],
        "shared_minus_one_after_updates_mb": shared["rss_after_updates_mb"] - one["rss_after_updates_mb"],
        "goal": "shared_over_bound <= 1.2",
        "met": shared["peak_rss_mb"] / bound <= 1.2,
    }
    write_result(f"population_memory_{args.model.replace('.', '')}", result)
    print(json.dumps({k: result[k] for k in ("bound_mb", "shared_over_bound", "copies_over_shared", "met")}))


if __name__ == "__main__":
    main()
