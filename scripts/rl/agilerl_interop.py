"""The same short user script of AgileRL's evolutionary API, run against the real `agilerl` package or against
`utu.rl.agilerl`, recording what each accepted and returned (names, arguments, return shapes) as JSON.

    .venv-agilerl/bin/python scripts/rl/agilerl_interop.py --impl agilerl --record   (make agilerl-interop)
    python scripts/rl/agilerl_interop.py --impl utu --out utu.json

`--record` writes benchmarks/results/agilerl_interop.json (with the commit and command); agilerl 2.58.0 needs a
3.6 GB environment of its own, so it is recorded by hand. `tests/rl/test_agilerl_interop.py` runs the script
against utu.rl.agilerl in every `make test` and compares what it saw with that record.
"""

import argparse
import importlib
import inspect
import json
import sys
import traceback
from pathlib import Path
from typing import Any

# Where each name lives in AgileRL (2.58: the evolutionary API has kept these paths since 2.x).
AGILERL = {
    "GRPO": "agilerl.algorithms",
    "HyperparameterConfig": "agilerl.algorithms.core.registry",
    "RLParameter": "agilerl.algorithms.core.registry",
    "Mutations": "agilerl.hpo.mutation",
    "TournamentSelection": "agilerl.hpo.tournament",
}
CALLS = {  # the callables whose parameters the script relies on
    "RLParameter": "RLParameter",
    "Mutations": "Mutations.__init__",
    "Mutations.mutation": "Mutations.mutation",
    "TournamentSelection": "TournamentSelection.__init__",
    "TournamentSelection.select": "TournamentSelection.select",
    "GRPO.population": "GRPO.population",
    "GRPO.clone": "GRPO.clone",
}


def load(impl: str) -> dict[str, Any]:
    if impl == "utu":
        module = importlib.import_module("utu.rl.agilerl")
        return {name: getattr(module, name) for name in AGILERL}
    return {name: getattr(importlib.import_module(path), name) for name, path in AGILERL.items()}


def parameters(api: dict[str, Any]) -> dict[str, list[str]]:
    out = {}
    for key, path in CALLS.items():
        owner, _, attr = path.partition(".")
        target = getattr(api[owner], attr) if attr else api[owner]
        out[key] = [p for p in inspect.signature(target).parameters if p not in ("self", "args", "kwargs")]
    return out


def user_script(api: dict[str, Any]) -> dict[str, Any]:
    """What a user of AgileRL's HPO writes around a population of GRPO agents."""
    from peft import LoraConfig

    from utu.rl.toy import tiny_llama

    seen: dict[str, Any] = {}
    hp_config = api["HyperparameterConfig"](
        lr=api["RLParameter"](min=1e-5, max=1e-2),
        beta=api["RLParameter"](min=1e-4, max=1e-2),
        group_size=api["RLParameter"](min=2, max=8, dtype=int),
    )
    pop = api["GRPO"].population(
        size=3,
        actor_network=tiny_llama(32),  # utu/rl/toy.py: torch and transformers only, so agilerl's venv runs it
        hp_config=hp_config,
        pad_token_id=0,
        pad_token="<pad>",
        lora_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
        batch_size=4,
        group_size=4,
        lr=1e-3,
        beta=1e-3,
    )
    for agent in pop:
        agent.wrap_models()  # AgileRL 2.58 builds each optimizer here (its training loop calls it); ours: no-op
    seen["population"] = {"type": type(pop).__name__, "size": len(pop), "indices": [a.index for a in pop]}
    seen["hyperparameters"] = [{"lr": a.lr, "beta": a.beta, "group_size": a.group_size} for a in pop]
    seen["fitness_before_test"] = [list(a.fitness) for a in pop]
    for agent, fitness in zip(pop, [0.1, 0.9, 0.5], strict=True):
        agent.fitness = [*agent.fitness, fitness]  # AgileRL 2.58's `fitness` is a copy; assigning it works in both
    tournament = api["TournamentSelection"](tournament_size=2, elitism=True, population_size=3)
    result = tournament.select(pop)
    elite, pop = result[0], result[1]
    seen["select"] = {
        "returns": type(result).__name__,
        "length": len(result),
        "third": repr(result[2]) if len(result) > 2 else None,
        "elite_index": elite.index,
        "elite_is_first": elite is pop[0] or elite.index == pop[0].index,
        "indices": [a.index for a in pop],
    }
    mutations = api["Mutations"](
        no_mutation=0.0,
        architecture=0,
        new_layer_prob=0,
        parameters=0,
        activation=0,
        rl_hp=1.0,
        mutation_sd=0.1,
        rand_seed=42,
    )
    pop = mutations.mutation(pop, pre_training_mut=False)
    seen["mutation"] = {
        "returns": type(pop).__name__,
        "size": len(pop),
        "mut": sorted({a.mut for a in pop}),
        "in_range": all(1e-5 <= a.lr <= 1e-2 and 1e-4 <= a.beta <= 1e-2 and 2 <= a.group_size <= 8 for a in pop),
        "group_size_type": sorted({type(a.group_size).__name__ for a in pop}),
    }
    twin = pop[0].clone(index=9)
    seen["clone"] = {"index": twin.index, "same_lr": twin.lr == pop[0].lr, "fitness": list(twin.fitness)}
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--impl", choices=["agilerl", "utu"], required=True)
    parser.add_argument("--out", help="a JSON file to write")
    parser.add_argument("--record", action="store_true", help="write benchmarks/results/agilerl_interop.json")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository, for utu.rl.toy
    api = load(args.impl)
    record: dict[str, Any] = {"impl": args.impl, "parameters": parameters(api)}
    if args.impl == "agilerl":
        record["version"] = importlib.import_module("agilerl").__dict__.get("__version__") or _dist_version()
    try:
        record["script"] = user_script(api)
    except Exception as e:  # recorded: what the real package refused is part of the comparison
        record["script_error"] = f"{type(e).__name__}: {e}"
        traceback.print_exc()
    if args.record:
        from benchmarks._common import write_result

        write_result("agilerl_interop", json.loads(json.dumps(record, default=str)))
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1, default=str))
    return 0 if "script" in record else 1


def _dist_version() -> str:
    from importlib.metadata import version

    return version("agilerl")


if __name__ == "__main__":
    sys.exit(main())
