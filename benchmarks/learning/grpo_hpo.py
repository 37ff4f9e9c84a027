"""Does evolution help? A population of 4 GRPO agents whose learning rate mutates (tournament selection, AgileRL's
API: utu.rl.agilerl) against one agent at the default learning rate and against 4 agents at fixed learning
rates, with the same number of updates, on the toy task (utu/rl/toy.py: a tiny Llama learns to answer "a").

    python benchmarks/learning/grpo_hpo.py [--seeds 5] [--iterations 16]      # resumable: finished runs are kept

Arms, each seeded 0..seeds-1 (the model's initialisation, the sampling and the mutations):
  default    one agent at utu.rl.agilerl.GRPO's default lr (1e-4: ours; AgileRL 2.58's is 5e-7), 4 x iterations updates;
  sweep      4 agents at lr 1e-4, 1e-3, 1e-2, 1e-1, iterations updates each; the one with the best validation
             fitness is reported (the same selection information evolution has);
  evolution  GRPO.population(4) starting at the sweep's 4 learning rates (population-based training: the same
             starting points as the sweep), lr in [1e-5, 0.3] grown x2 or shrunk x0.5 per mutation, fitness on
             the validation prompts every `evo_every` iterations, then TournamentSelection(2, elitism) and
             Mutations(rl_hp=0.8, no_mutation=0.2); the elite at the end is reported.
Reported: the mean reward on held-out prompts (none trained or selected on), 8 samples each, per arm over seeds
with a bootstrap 95% CI, paired differences (evolution - default, evolution - sweep) with theirs, and
evolution's learning rates per generation. Runs are saved to benchmarks/results/grpo_hpo/<arm>_s<seed>.json as
they finish; the summary goes to benchmarks/results/grpo_hpo.json.
"""

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import RESULTS, at_least, provenance, write_result  # noqa: E402

RUNS = RESULTS / "grpo_hpo"
LETTERS = "abcdefgh"
PROMPTS = ["".join(p) for n in (1, 2) for p in itertools.product(LETTERS, repeat=n)]  # 72
TRAIN, VALIDATION, HELDOUT = PROMPTS[8:56], PROMPTS[:8], PROMPTS[56:]  # 48 / 8 / 16, disjoint
SWEEP = (1e-4, 1e-3, 1e-2, 1e-1)
DEFAULT_LR = 1e-4
KNOBS = {"batch_size": 16, "group_size": 8, "update_epochs": 1, "max_output_tokens": 8, "beta": 0.0}


def rows(prompts: list[str]) -> list[dict[str, str]]:
    return [{"question": p, "answer": "a"} for p in prompts]


def env(test_prompts: list[str], seed: int):
    from utu.rl.agilerl import HuggingFaceGym
    from utu.rl.toy import char_tokenizer, reward

    return HuggingFaceGym(
        rows(TRAIN),
        rows(test_prompts),
        char_tokenizer(),
        reward_fn=lambda completion, solution, prompt: reward(completion, solution),
        conversation_template=[{"role": "system", "content": "say"}, {"role": "user", "content": "{question}"}],
        data_batch_size_per_gpu=2,
        seed=seed,
    )


def heldout_reward(agent, seed: int, samples: int = 8) -> float:
    """Mean reward of `samples` completions per held-out prompt (each prompt repeated: `test` samples one
    completion per prompt and restores the random state after)."""
    repeated = HELDOUT * samples
    return agent.test(env(repeated, seed), loop=len(repeated) // 2)


def agents(seed: int, lrs: list[float], population: bool = False, hp_config=None):
    """Full fine-tuning in every arm (the tiny model has no use for LoRA); a population's members are copies."""
    import torch

    from utu.rl.agilerl import GRPO
    from utu.rl.toy import char_tokenizer, tiny_llama

    torch.manual_seed(seed)
    tokenizer = char_tokenizer()
    common = {"pad_token_id": tokenizer.eos_token_id, "seed": seed, **KNOBS}
    if population:
        return GRPO.population(
            size=len(lrs), actor_network=tiny_llama(len(tokenizer), seed=seed), lr=lrs[0], hp_config=hp_config, **common
        )
    return [
        GRPO(actor_network=tiny_llama(len(tokenizer), seed=seed), lr=lr, index=i, **common) for i, lr in enumerate(lrs)
    ]


def train(agent, training_env, steps: int) -> None:
    prompts = training_env.reset(reset_dataloaders=True)
    for _ in range(steps):
        completion_ids, masks = agent.get_action(prompts)
        prompts, rewards = training_env.step(completion_ids)
        agent.learn((completion_ids, masks, rewards))


def run_default(seed: int, iterations: int, evo_every: int) -> dict:
    (agent,) = agents(seed, [DEFAULT_LR])
    train(agent, env(VALIDATION, seed), 4 * iterations)
    return {"lr": DEFAULT_LR, "heldout": heldout_reward(agent, seed)}


def run_sweep(seed: int, iterations: int, evo_every: int) -> dict:
    fitness, held = {}, {}
    for agent, lr in zip(agents(seed, list(SWEEP)), SWEEP, strict=True):
        validation = env(VALIDATION, seed)
        train(agent, validation, iterations)
        fitness[lr] = agent.test(validation, loop=len(VALIDATION) // 2)
        held[lr] = heldout_reward(agent, seed)
    best = max(SWEEP, key=lambda lr: fitness[lr])
    return {"lr": best, "heldout": held[best], "validation": fitness, "heldout_by_lr": held}


def run_evolution(seed: int, iterations: int, evo_every: int) -> dict:
    from utu.rl.agilerl import HyperparameterConfig, Mutations, RLParameter, TournamentSelection

    hp_config = HyperparameterConfig(lr=RLParameter(min=1e-5, max=0.3, grow_factor=2.0, shrink_factor=0.5))
    pop = agents(seed, [DEFAULT_LR] * 4, population=True, hp_config=hp_config)
    for agent, lr in zip(pop, SWEEP, strict=True):
        agent.set_hyperparameter("lr", lr)
    tournament = TournamentSelection(tournament_size=2, elitism=True, population_size=4)
    mutations = Mutations(
        no_mutation=0.2, architecture=0, new_layer_prob=0, parameters=0, activation=0, rl_hp=0.8, rand_seed=seed
    )
    validation = env(VALIDATION, seed)
    prompts = validation.reset(reset_dataloaders=True)
    generations = []
    for i in range(iterations):
        for agent in pop:
            completion_ids, masks = agent.get_action(prompts)
            prompts, rewards = validation.step(completion_ids)
            agent.learn((completion_ids, masks, rewards))
        if (i + 1) % evo_every == 0 or i + 1 == iterations:
            for agent in pop:
                agent.test(validation, loop=len(VALIDATION) // 2)
            generations.append([{"index": a.index, "lr": a.lr, "fitness": a.fitness[-1]} for a in pop])
            elite, pop, _ = tournament.select(pop)
            if i + 1 < iterations:
                pop = mutations.mutation(pop)
    return {"lr": elite.lr, "heldout": heldout_reward(elite, seed), "generations": generations}


ARMS = {"default": run_default, "sweep": run_sweep, "evolution": run_evolution}


def summarise(seeds: int) -> dict:
    from utu.eval.metrics import bootstrap_ci

    done = {arm: [json.loads((RUNS / f"{arm}_s{s}.json").read_text()) for s in range(seeds)] for arm in ARMS}
    out: dict = {"arms": {}, "paired": {}}
    for arm, runs in done.items():
        values = [r["heldout"] for r in runs]
        out["arms"][arm] = {
            "heldout_mean": statistics.fmean(values),
            "ci95": bootstrap_ci(values),
            "per_seed": values,
            "lr_per_seed": [r["lr"] for r in runs],
        }
    for other in ("default", "sweep"):
        diffs = [e["heldout"] - o["heldout"] for e, o in zip(done["evolution"], done[other], strict=True)]
        low, high = bootstrap_ci(diffs)
        out["paired"][f"evolution_minus_{other}"] = {
            "mean": statistics.fmean(diffs),
            "ci95": [low, high],
            "evolution_better": low > 0,
            "evolution_worse": high < 0,
        }
    out["evolution_lr_per_generation"] = [[g["lr"] for g in gen] for gen in done["evolution"][0]["generations"]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=at_least(1), default=5)
    parser.add_argument("--iterations", type=at_least(1), default=16)
    parser.add_argument("--evo_every", type=at_least(1), default=4)
    args = parser.parse_args()
    RUNS.mkdir(parents=True, exist_ok=True)
    for seed in range(args.seeds):
        for arm, run in ARMS.items():
            path = RUNS / f"{arm}_s{seed}.json"
            if path.exists():
                saved = json.loads(path.read_text())
                if (saved["iterations"], saved["evo_every"]) != (args.iterations, args.evo_every):
                    parser.error(
                        f"{path} was run with --iterations {saved['iterations']} --evo_every {saved['evo_every']}; "
                        "give those to resume, or move results/grpo_hpo/ aside to start over"
                    )
                continue
            result = run(seed, args.iterations, args.evo_every)
            record = {"arm": arm, "seed": seed, **provenance(), **vars(args), **result}
            path.write_text(json.dumps(record, indent=1))
            print(arm, seed, result["lr"], round(result["heldout"], 3), flush=True)
    summary = summarise(args.seeds)
    write_result("grpo_hpo", {"settings": vars(args) | KNOBS, "task": "toy (utu/rl/toy.py)", **summary})
    print(json.dumps(summary["paired"], indent=1))


if __name__ == "__main__":
    main()
