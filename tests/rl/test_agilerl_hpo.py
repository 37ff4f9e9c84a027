"""Evolutionary HPO with AgileRL's API (utu.rl.evolution, utu.rl.finetune, GRPO.population). The first test is
AgileRL's tutorial "LLM Fine-Tuning with HPO" (docs/tutorials/llm_finetuning/grpo_hpo.rst, AgileRL 2.58) with its
imports switched to utu.rl.agilerl and, as allowed variations, the toy model and data for Qwen and Countdown, no
vLLM, and sizes a CPU runs in seconds."""

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from peft import LoraConfig

from utu.rl.toy import char_tokenizer, reward, tiny_llama

# was: from agilerl.algorithms import GRPO
#      from agilerl.algorithms.core.registry import HyperparameterConfig, RLParameter
#      from agilerl.hpo.mutation import Mutations
#      from agilerl.hpo.tournament import TournamentSelection
#      from agilerl.training.llm import finetune_llm_reasoning
#      from agilerl.llm_envs import ReasoningGym
from utu.rl.agilerl import (  # isort: skip
    GRPO,
    HyperparameterConfig,
    Mutations,
    ReasoningGym,
    RLParameter,
    TournamentSelection,
    finetune_llm_reasoning,
)

ROOT = Path(__file__).resolve().parents[2]
ROWS = [json.loads(line) for line in (ROOT / "dataset" / "rl_toy.jsonl").read_text().splitlines()]


def combined_rewards(completion, solution, prompt):
    return reward(completion, solution)


def make_env(tokenizer):
    conversation_template = [{"role": "system", "content": "say"}, {"role": "user", "content": "{question}"}]
    return ReasoningGym(
        train_dataset=ROWS[:6],
        test_dataset=ROWS[6:],
        tokenizer=tokenizer,
        reward_fn=combined_rewards,
        conversation_template=conversation_template,
        data_batch_size_per_gpu=2,
    )


def make_population(tokenizer, size=4, hp_config=None, **kw):
    knobs = {"batch_size": 8, "group_size": 8, "lr": 0.03, "update_epochs": 1, "max_output_tokens": 8} | kw
    return GRPO.population(
        size=size,
        hp_config=hp_config,
        actor_network=tiny_llama(len(tokenizer), seed=0),
        lora_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0),
        pad_token_id=tokenizer.pad_token_id,
        pad_token=tokenizer.pad_token,
        **knobs,
    )


def test_the_hpo_tutorial_runs_with_its_imports_switched(tmp_path):
    mut_p = {"NO_MUT": 0.1, "RL_HP_MUT": 0.6, "MUT_SD": 0.1, "RAND_SEED": 42, "MIN_LR": 1e-3, "MAX_LR": 0.1}
    mut_p |= {"MIN_BETA": 0.0001, "MAX_BETA": 0.01, "MIN_GROUP_SIZE": 4, "MAX_GROUP_SIZE": 12}
    hp_config = HyperparameterConfig(
        beta=RLParameter(min=mut_p["MIN_BETA"], max=mut_p["MAX_BETA"]),
        lr=RLParameter(min=mut_p["MIN_LR"], max=mut_p["MAX_LR"]),
        group_size=RLParameter(min=mut_p["MIN_GROUP_SIZE"], max=mut_p["MAX_GROUP_SIZE"], dtype=int),
    )
    init_hp = {"BATCH_SIZE": 8, "BETA": 0.001, "LR": 0.03, "CLIP_COEF": 0.2, "MAX_GRAD_NORM": 0.1}
    init_hp |= {"UPDATE_EPOCHS": 1, "GROUP_SIZE": 8, "TEMPERATURE": 0.9, "MAX_MODEL_LEN": 64, "POP_SIZE": 4}
    init_hp |= {"TOURN_SIZE": 2, "ELITISM": True}
    tokenizer = char_tokenizer()
    env = make_env(tokenizer)
    pop = GRPO.population(
        size=init_hp["POP_SIZE"],
        hp_config=hp_config,
        actor_network=tiny_llama(len(tokenizer), seed=0),  # the tutorial: model_name=MODEL_PATH
        lora_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0, bias="none"),
        use_vllm=False,
        pad_token_id=tokenizer.pad_token_id,
        pad_token=tokenizer.pad_token,
        batch_size=init_hp["BATCH_SIZE"],
        beta=init_hp["BETA"],
        lr=init_hp["LR"],
        clip_coef=init_hp["CLIP_COEF"],
        max_grad_norm=init_hp["MAX_GRAD_NORM"],
        update_epochs=init_hp["UPDATE_EPOCHS"],
        group_size=init_hp["GROUP_SIZE"],
        temperature=init_hp["TEMPERATURE"],
        max_model_len=init_hp["MAX_MODEL_LEN"],
        max_output_tokens=8,
    )
    tournament = TournamentSelection(init_hp["TOURN_SIZE"], init_hp["ELITISM"], init_hp["POP_SIZE"])
    mutations = Mutations(
        no_mutation=mut_p["NO_MUT"],
        architecture=0,
        new_layer_prob=0,
        parameters=0,
        activation=0,
        rl_hp=mut_p["RL_HP_MUT"],
        mutation_sd=mut_p["MUT_SD"],
        rand_seed=mut_p["RAND_SEED"],
    )
    elite_path = str(tmp_path / "saved_llms")
    pop, fitnesses = finetune_llm_reasoning(
        pop=pop,
        env=env,
        init_hp=init_hp,
        evaluation_interval=1,
        wb=True,
        save_elite=True,
        elite_path=elite_path,
        max_reward=1.0,
        evo_steps=1,
        mutation=mutations,
        selection_strategy=tournament,
        verbose=True,
        num_epochs=2,
    )
    assert len(pop) == 4 and len(fitnesses) == 4
    assert len({id(agent.trainer.model) for agent in pop}) == 1  # one base model, one adapter each
    assert len(pop[0].unwrap_models().peft_config) == 4  # the losers' adapters were freed
    rows = [json.loads(line) for line in Path(f"{elite_path}_metrics.jsonl").read_text().splitlines()]
    generations = [r["generation"] for r in rows if "generation" in r]
    assert len(generations) == 2  # 2 epochs of 6 rows, 2 rows per agent and step, 4 agents: 2 steps, 2 generations
    mutated = {member["mutation"] for generation in generations for member in generation}
    assert mutated - {"None"} <= {"lr", "beta", "group_size"} and mutated - {"None"}
    for member in (m for generation in generations for m in generation):
        assert mut_p["MIN_LR"] <= member["lr"] <= mut_p["MAX_LR"]
        assert mut_p["MIN_GROUP_SIZE"] <= member["group_size"] <= mut_p["MAX_GROUP_SIZE"]
    elite = GRPO.load(elite_path)
    best = max(pop, key=lambda a: a.fitness[-1])
    assert elite.index == best.index and elite.fitness == best.fitness and elite.lr == pytest.approx(best.lr)


def test_an_rl_parameter_stays_in_its_range_and_an_int_one_moves():
    rng = np.random.default_rng(0)
    lr = RLParameter(min=1e-4, max=1e-2)
    value = 1e-3
    for _ in range(100):
        value = lr.mutate(value, rng)
        assert 1e-4 <= value <= 1e-2
    group = RLParameter(min=2, max=12, dtype=int)
    moved = {group.mutate(3, rng) for _ in range(20)}
    assert moved <= {2, 4} and len(moved) == 2  # 3 * 0.8 and 3 * 1.2 both round back to 3: it moves by one
    with pytest.raises(ValueError, match="min"):
        RLParameter(min=2, max=1)
    with pytest.raises(TypeError, match="RLParameter"):
        HyperparameterConfig(lr=0.1)


def test_mutations_refuse_network_mutations_for_language_models():
    for name in ("architecture", "parameters", "activation"):
        args = {"no_mutation": 0.1, "architecture": 0, "new_layer_prob": 0, "parameters": 0, "activation": 0}
        with pytest.raises(ValueError, match=f"{name} mutations are not supported"):
            Mutations(**(args | {name: 0.2}), rl_hp=0.5)


def fake(index, fitness):
    agent = SimpleNamespace(index=index, fitness=[fitness], cleaned=False, clones=[])

    def clone(index=None, wrap=True):
        twin = fake(agent.index if index is None else index, agent.fitness[-1])
        agent.clones.append(twin)
        return twin

    agent.clone = clone
    agent.clean_up = lambda: setattr(agent, "cleaned", True)
    return agent


def test_tournament_selection_keeps_the_elite_first_and_frees_the_losers():
    np.random.seed(0)
    population = [fake(0, 0.1), fake(1, 0.9), fake(2, 0.5), fake(3, 0.0)]
    elite, new, indices = TournamentSelection(2, True, 4).select(population)
    assert elite is population[1] and new[0] is elite and elite.index == 1 and indices is None
    assert [a.index for a in new[1:]] == [4, 5, 6]  # new members numbered after the highest index
    chosen = {id(a) for a in new} | {id(c) for a in population for c in a.clones}
    for agent in population:
        assert agent.cleaned == (id(agent) not in chosen)
    assert any(agent.cleaned for agent in population)  # with seed 0 one agent is never drawn
    with pytest.raises(ValueError, match="elitism=True"):
        TournamentSelection(2, False, 4)
    with pytest.raises(ValueError, match="no fitness"):
        TournamentSelection(2, True, 2).select([fake(0, 0.0), SimpleNamespace(index=1, fitness=[])])


def logits(agent, ids):
    agent._activate()
    with torch.no_grad():
        return agent.unwrap_models()(ids).logits


def test_a_member_s_clone_is_a_new_adapter_with_its_weights_optimizer_and_hyperparameters():
    tokenizer = char_tokenizer()
    env = make_env(tokenizer)
    hp = HyperparameterConfig(lr=RLParameter(min=1e-3, max=0.1))
    pop = make_population(tokenizer, size=2, hp_config=hp)
    parent = pop[0]
    prompts = env.reset()
    completion_ids, masks = parent.get_action(prompts)
    _, rewards = env.step(completion_ids)
    parent.learn((completion_ids, masks, rewards))
    parent.set_hyperparameter("lr", 0.05)
    parent.fitness.append(0.5)
    twin = parent.clone(index=7)
    ids = torch.tensor([[3, 4, 5, 6]])
    assert torch.equal(logits(parent, ids), logits(twin, ids))
    assert twin.index == 7 and twin.fitness == [0.5] and twin.lr == 0.05 and twin.trainer.step == parent.trainer.step
    assert twin.trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    moments = [s["exp_avg"] for s in parent.trainer.optimizer.state.values()]
    assert all(
        torch.equal(a, s["exp_avg"]) for a, s in zip(moments, twin.trainer.optimizer.state.values(), strict=True)
    )
    assert twin.trainer.model is parent.trainer.model and twin._adapter != parent._adapter
    completion_ids, masks = twin.get_action(prompts)
    twin.learn((completion_ids, masks, torch.rand(len(prompts), 8)))
    assert not torch.equal(logits(parent, ids), logits(twin, ids))  # twin trained alone
    assert torch.equal(logits(parent, ids), logits(pop[0], ids))
    twin.clean_up()
    assert twin._adapter not in parent.unwrap_models().peft_config


def test_hyperparameters_outside_what_can_evolve_are_refused():
    tokenizer = char_tokenizer()
    with pytest.raises(ValueError, match="hp_config names weight_decay"):
        make_population(tokenizer, size=1, hp_config=HyperparameterConfig(weight_decay=RLParameter(min=0, max=1)))
    agent = make_population(tokenizer, size=1)[0]
    with pytest.raises(ValueError, match="cannot change mid-run"):
        agent.set_hyperparameter("seed", 3)


def test_a_member_s_checkpoint_loads_alone(tmp_path):
    tokenizer = char_tokenizer()
    pop = make_population(tokenizer, size=3)
    member, env = pop[2], make_env(tokenizer)
    prompts = env.reset()
    completion_ids, masks = member.get_action(prompts)
    member.learn((completion_ids, masks, torch.rand(len(prompts), 8)))  # an adapter of its own, not LoRA's zeros
    assert not torch.equal(logits(member, torch.tensor([[3, 4, 5, 6]])), logits(pop[0], torch.tensor([[3, 4, 5, 6]])))
    member.fitness.append(0.25)
    member.save_checkpoint(tmp_path / "member")
    loaded = GRPO.load(tmp_path / "member")
    ids = torch.tensor([[3, 4, 5, 6]])
    assert torch.equal(logits(member, ids), loaded.unwrap_models()(ids).logits.detach())
    assert loaded.index == 2 and loaded.fitness == [0.25]
    record = tmp_path / "member" / "agilerl.pt"  # its hp_config's classes load; any other object is refused
    torch.save({**torch.load(record, weights_only=False), "x": SimpleNamespace()}, record)
    with pytest.raises(ValueError, match=r"agilerl.pt: not loaded: it names types.SimpleNamespace"):
        GRPO.load(tmp_path / "member")


def test_numpy_numbers_in_the_hyperparameters_and_fitness_are_saved_as_plain_ones_and_load():
    """A checkpoint is read as data (no NumPy scalar): bounds given as np.float64 and a fitness appended as one are
    kept as Python floats, so a clone through a checkpoint (a full fine-tune's tournament) loads."""
    tokenizer = char_tokenizer()
    hp = HyperparameterConfig(lr=RLParameter(min=np.float64(1e-3), max=np.float64(1e-1)))
    agent = GRPO(
        actor_network=tiny_llama(len(tokenizer), seed=0),
        hp_config=hp,
        pad_token_id=np.int64(tokenizer.pad_token_id),
        lr=0.03,
        batch_size=8,
        group_size=8,
    )
    agent.fitness.append(np.mean([0.25, 0.75]))
    twin = agent.clone(index=1)
    assert twin.fitness == [0.5] and type(twin.fitness[0]) is float
    assert type(twin.hp_config["lr"].max) is float and twin.hp_config["lr"].max == 0.1


def test_a_lost_agent_says_so_and_frees_its_optimizer(tmp_path):
    tokenizer = char_tokenizer()
    pop = make_population(tokenizer, size=3)
    accelerator = pop[0].accelerator
    prepared, losers = len(accelerator._optimizers), []
    np.random.seed(0)
    for generation in range(3):
        for agent, fitness in zip(pop, (0.1, 0.9, 0.5), strict=True):
            agent.fitness.append(fitness + generation)
        before = list(pop)
        _, pop, _ = TournamentSelection(2, True, 3).select(pop)
        losers += [a for a in before if all(a is not b for b in pop)]
    assert losers and len(accelerator._optimizers) == prepared  # clones take the losers' places, not more
    assert len(pop[0].unwrap_models().peft_config) == 3
    with pytest.raises(RuntimeError, match="was cleaned up"):
        losers[0].get_action(make_env(tokenizer).reset())


def test_hyperparameters_are_checked_before_anything_changes():
    tokenizer = char_tokenizer()
    agent = make_population(tokenizer, size=1)[0]
    with pytest.raises(ValueError):
        agent.set_hyperparameter("lr", "fast")
    assert agent.lr == 0.03 and agent.trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.03)
    agent.lr = 0.05  # as AgileRL's mutation writes it
    assert agent.trainer.settings.lr == 0.05 and agent.trainer.optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    refused = {
        "whole number": HyperparameterConfig(group_size=RLParameter(min=4, max=12)),
        "not a valid group_size": HyperparameterConfig(group_size=RLParameter(min=1, max=12, dtype=int)),
        "outside": HyperparameterConfig(lr=RLParameter(min=1e-7, max=1e-5)),
    }
    for message, hp_config in refused.items():
        with pytest.raises(ValueError, match=message):
            make_population(tokenizer, size=1, hp_config=hp_config)
    with pytest.raises(ValueError, match="starts at 0"):
        make_population(tokenizer, size=1, hp_config=HyperparameterConfig(beta=RLParameter(0, 0.1)), beta=0.0)
    with pytest.raises(ValueError, match="finite number"):
        RLParameter(min="1e-6", max="1e-3")
    assert (RLParameter(min=4.5, max=7.5, dtype=int).min, RLParameter(min=4.5, max=7.5, dtype=int).max) == (5, 7)


def test_finetune_refuses_what_would_waste_or_lose_a_run(tmp_path):
    tokenizer = char_tokenizer()
    env = make_env(tokenizer)
    pop = make_population(tokenizer, size=2)
    evolving = {"mutation": Mutations(0.5, 0, 0, 0, 0, 0.5), "tournament": TournamentSelection(2, True, 2)}
    for kwargs, message in [
        ({"evo_steps": 3, "evaluation_interval": 2, **evolving}, "not a multiple"),
        ({"num_epochs": 0}, "num_epochs must be"),
        ({"max_steps": -5}, "max_steps must be"),
        ({"evo_steps": 2, "mutation": evolving["mutation"], "tournament": TournamentSelection(2, True, 3)}, "has 2"),
        ({"evo_steps": 2, "tournament": evolving["tournament"]}, "needs both"),  # (it trained unevolved)
    ]:
        with pytest.raises(ValueError, match=message):
            finetune_llm_reasoning(pop=pop, env=env, **kwargs)
    with pytest.raises(ValueError, match="pop is empty"):
        finetune_llm_reasoning(pop=[], env=env)
    with pytest.raises(ValueError, match="population has 2"):
        TournamentSelection(2, True, 8).select(pop)
    kept = tmp_path / "results"
    kept.mkdir()
    (kept / "thesis.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a checkpoint"):
        pop[0].save_checkpoint(kept)
    assert (kept / "thesis.txt").read_text() == "mine"
    with pytest.raises(ValueError, match=r"make 1 iteration\(s\).*fewer than evaluation_interval=10"):
        finetune_llm_reasoning(pop=pop, env=env, max_steps=4)  # AgileRL would return NaN fitness
    with pytest.raises(ValueError, match="results exists and is not a checkpoint"):  # before any training
        finetune_llm_reasoning(
            pop=pop, env=env, max_steps=4, evaluation_interval=1, elite_path=str(kept), save_elite=True, wb=True
        )
    assert not (tmp_path / "results_metrics.jsonl").exists()
    finetune_llm_reasoning(
        pop=pop, env=env, wb=True, elite_path=f"{tmp_path}/elite/", max_steps=4, evaluation_interval=1, verbose=False
    )
    assert (tmp_path / "elite_metrics.jsonl").read_text().count("\n") == 2  # one row per agent and step


def test_a_save_keeps_your_folders_a_failed_load_keeps_the_agent_and_a_lost_one_says_so(tmp_path):
    tokenizer = char_tokenizer()
    pop = make_population(tokenizer, size=2)
    mine = tmp_path / "ckpt.tmp"  # the name a save writes to first
    mine.mkdir()
    (mine / "thesis.txt").write_text("mine")
    with pytest.raises(ValueError, match="ckpt.tmp exists and is not a checkpoint's leftover"):
        pop[0].save_checkpoint(tmp_path / "ckpt")
    assert (mine / "thesis.txt").read_text() == "mine" and not (tmp_path / "ckpt").exists()
    nested = tmp_path / "other.old" / "model"  # a folder of yours that only looks like a checkpoint's
    nested.mkdir(parents=True)
    (nested / "mine.txt").write_text("mine")
    with pytest.raises(ValueError, match="other.old exists and is not a checkpoint's leftover"):
        pop[0].save_checkpoint(tmp_path / "other")
    assert (nested / "mine.txt").read_text() == "mine"
    pop[0].save_checkpoint(tmp_path / "good")
    pop[0].save_checkpoint(tmp_path / "good")  # again: the first is replaced whole, nothing left beside
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.tmp", "good", "other.old"]
    shutil.copytree(tmp_path / "good", tmp_path / "good.old")  # as a save that stopped after setting it aside
    pop[0].save_checkpoint(tmp_path / "sub" / ".." / "good")  # resolved: the same checkpoint, saved whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.tmp", "good", "other.old"]
    assert GRPO.load(tmp_path / "good").index == 0
    broken = tmp_path / "broken"
    pop[1].save_checkpoint(broken)
    (broken / "trainer_state.pt").write_bytes((broken / "trainer_state.pt").read_bytes()[:100])
    with pytest.raises(Exception):  # noqa: B017 - torch's own error for a cut file
        pop[1].load_checkpoint(broken)
    assert pop[1].lr == 0.03 and pop[1].get_action(make_env(tokenizer).reset())  # still the agent it was
    pop[1].clean_up()
    for use in (lambda: pop[1].lr, lambda: setattr(pop[1], "lr", 0.5)):
        with pytest.raises(RuntimeError, match="agent 1 was cleaned up"):
            use()


def test_evolution_s_arguments_are_checked_as_agilerl_s_are():
    tokenizer = char_tokenizer()
    for factors in ({"grow_factor": -1}, {"shrink_factor": 0}, {"grow_factor": 0.9}):
        with pytest.raises(ValueError, match="shrink_factor must be in"):
            RLParameter(min=1e-4, max=1e-2, **factors)
    with pytest.raises(ValueError, match="elitism=True"):
        TournamentSelection(2, "no", 4)
    with pytest.raises(ValueError, match="new_layer_prob must be in"):
        Mutations(0.1, 0, None, 0, 0, 0.5)
    with pytest.raises(ValueError, match="size must be a whole number"):
        make_population(tokenizer, size=2.0)
    with pytest.raises(ValueError, match="beta is a real number"):
        make_population(tokenizer, size=1, hp_config=HyperparameterConfig(beta=RLParameter(0, 1, dtype=int)))
    agent = make_population(tokenizer, size=1)[0]
    with pytest.raises(ValueError, match=r"^set_hyperparameter: lr='fast': [^\n]+$"):
        agent.set_hyperparameter("lr", "fast")


def test_agilerl_s_helper_methods_do_what_its_custom_loops_expect():
    tokenizer = char_tokenizer()
    first, second = make_population(tokenizer, size=2, hp_config=HyperparameterConfig(lr=RLParameter(1e-3, 0.1)))
    calls = []
    first.register_init_hook(lambda: calls.append("resynced"))
    mutations = Mutations(0, 0, 0, 0, 0, 1.0, rand_seed=1)
    mutations.rl_hyperparam_mutation(first)  # one agent, as a custom loop calls it: no hooks
    assert calls == [] and first.mut == "lr" and first.lr != 0.03
    mutations.mutation([first, second])  # the population's mutation runs each agent's hooks after it
    assert calls == ["resynced"]
    assert first.get_policy() is first.trainer.model
    assert set(first.evolvable_attributes()) == {"actor", "optimizer"}
    assert set(first.evolvable_attributes(networks_only=True)) == {"actor"}
    ids, masks = first.to_device(torch.ones(2, 3), [torch.zeros(2)])
    assert ids.device == first.accelerator.device and masks[0].device == first.accelerator.device
    prompts = make_env(tokenizer).reset()
    assert first.preprocess_observation(prompts) is prompts
    first.fitness.append(0.7)
    GRPO.copy_attributes(first, second)
    assert (second.index, second.fitness, second.lr, second.mut) == (first.index, [0.7], first.lr, "lr")
    assert list(first.hp_config.items()) == list(second.hp_config.items())
