"""An evolving population on the toy task, run by tests/rl/test_multiprocess.py under 2 processes (gloo) and in
one: each process writes what its population looked like after each generation, to compare. Rank 1 is slowed at
every save, as a loaded machine slows it: a save must wait for every process's random state."""

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GENERATIONS, STEPS = 2, 2


def evolve(accelerator) -> list[list[dict]]:
    from utu.rl.agilerl import GRPO, HuggingFaceGym, HyperparameterConfig, Mutations, RLParameter, TournamentSelection
    from utu.rl.toy import char_tokenizer, reward, tiny_llama

    rows = [json.loads(line) for line in (ROOT / "dataset" / "rl_toy.jsonl").read_text().splitlines()]
    tokenizer = char_tokenizer()
    env = HuggingFaceGym(
        rows[:4] * 2,
        rows[4:8],
        tokenizer,
        reward_fn=lambda completion, solution, prompt: reward(completion, solution),
        conversation_template=[{"role": "system", "content": "say"}, {"role": "user", "content": "{question}"}],
        data_batch_size_per_gpu=4 // accelerator.num_processes,
        accelerator=accelerator,
    )
    pop = GRPO.population(
        size=3,
        actor_network=tiny_llama(len(tokenizer), seed=0),
        hp_config=HyperparameterConfig(lr=RLParameter(min=1e-3, max=0.3, grow_factor=2.0, shrink_factor=0.5)),
        pad_token_id=tokenizer.eos_token_id,
        accelerator=accelerator,
        batch_size=4,
        group_size=4,
        lr=0.03,
        update_epochs=1,
        max_output_tokens=6,
    )
    tournament = TournamentSelection(tournament_size=2, elitism=True, population_size=3)
    mutations = Mutations(no_mutation=0.2, architecture=0, new_layer_prob=0, parameters=0, activation=0, rl_hp=0.8)
    seen = []
    prompts = env.reset(reset_dataloaders=True)
    for _ in range(GENERATIONS):
        for agent in pop:
            for _ in range(STEPS):
                completion_ids, masks = agent.get_action(prompts)
                prompts, rewards = env.step(completion_ids)
                agent.learn((completion_ids, masks, rewards))
            agent.test(env, loop=1)
        elite, pop, _ = tournament.select(pop)
        pop = mutations.mutation(pop)  # no rand_seed: each process draws its own; the main process's are used
        seen.append([{"index": a.index, "lr": a.lr, "fitness": a.fitness[-1], "mut": a.mut} for a in pop])
    return seen


def slow_down_saves() -> None:
    import utu.rl.grpo

    real = utu.rl.grpo.random_state

    def late(shuffle):
        time.sleep(0.5)
        return real(shuffle)

    utu.rl.grpo.random_state = late


def main(out: Path) -> None:
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    if accelerator.process_index == 1:
        slow_down_saves()
    seen = evolve(accelerator)
    (out / f"population_rank{accelerator.process_index}.json").write_text(json.dumps(seen))
    # Leave together, group closed: a gloo group left to the interpreter's exit can abort a process ("terminate called
    # without an active exception"), as it once did here.
    accelerator.wait_for_everyone()
    accelerator.state.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
