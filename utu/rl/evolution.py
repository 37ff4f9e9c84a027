"""Evolutionary hyperparameter optimisation for a population of GRPO agents, with AgileRL's names and arguments
(`agilerl.algorithms.core.registry`, `agilerl.hpo.mutation`, `agilerl.hpo.tournament`):

    hp_config = HyperparameterConfig(lr=RLParameter(min=1e-6, max=1e-3), beta=RLParameter(min=0.0, max=0.01))
    pop = GRPO.population(size=4, hp_config=hp_config, actor_network=model, lora_config=..., ...)
    tournament = TournamentSelection(tournament_size=2, elitism=True, population_size=4)
    mutations = Mutations(no_mutation=0.1, architecture=0, new_layer_prob=0, parameters=0, activation=0,
                          rl_hp=0.6, rand_seed=42)
    elite, pop, _ = tournament.select(pop)   # after each agent's `test` appended to its fitness
    pop = mutations.mutation(pop)

For language models only the learning hyperparameters evolve (AgileRL says the same): an architecture, parameter
or activation mutation is refused when `Mutations` is built. The agents are `utu.rl.agilerl.GRPO`; any object
with what `Member` lists would do.
"""

import math
from collections.abc import ItemsView, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


@dataclass
class RLParameter:
    """A hyperparameter that may evolve within [min, max]; a mutation multiplies it by `grow_factor` or
    `shrink_factor` (even odds) and clips it to the range."""

    min: float
    max: float
    shrink_factor: float = 0.8
    grow_factor: float = 1.2
    dtype: type = float

    def __post_init__(self) -> None:
        for name in ("min", "max", "shrink_factor", "grow_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"RLParameter: {name} must be a finite number, not {value!r}")
        if self.dtype not in (int, float):
            raise ValueError(f"RLParameter: dtype must be int or float, not {self.dtype!r}")
        if self.dtype is int:  # the whole numbers within the range
            self.min, self.max = math.ceil(self.min), math.floor(self.max)
        else:  # plain floats (np.float64 passes as a float): a checkpoint, read as data, holds no NumPy scalar
            self.min, self.max = float(self.min), float(self.max)
        self.shrink_factor, self.grow_factor = float(self.shrink_factor), float(self.grow_factor)
        if self.min > self.max:
            raise ValueError(f"RLParameter: min {self.min} is above max {self.max}")
        if not 0 < self.shrink_factor < 1 or self.grow_factor <= 1:
            raise ValueError(
                f"RLParameter: shrink_factor must be in (0, 1) and grow_factor above 1, not {self.shrink_factor!r} "
                f"and {self.grow_factor!r} (a mutation multiplies by one of them)"
            )

    def mutate(self, value: float, rng: np.random.Generator) -> int | float:
        factor = self.shrink_factor if rng.random() < 0.5 else self.grow_factor
        new = min(max(value * factor, self.min), self.max)
        if self.dtype is int:  # an int that the factor cannot move (1 * 1.2) still moves by one
            new = round(new) if round(new) != value else value + (1 if factor > 1 else -1)
            return int(min(max(new, self.min), self.max))
        return float(new)


class HyperparameterConfig:
    """The hyperparameters that evolve, by the agent's attribute name: `HyperparameterConfig(lr=RLParameter(...))`."""

    def __init__(self, **parameters: RLParameter):
        for name, parameter in parameters.items():
            if not isinstance(parameter, RLParameter):
                raise TypeError(f"HyperparameterConfig: {name} must be an RLParameter, not {type(parameter).__name__}")
        self.config = dict(parameters)

    def __bool__(self) -> bool:
        return bool(self.config)

    def __iter__(self) -> Iterator[str]:
        return iter(self.config)

    def __getitem__(self, name: str) -> RLParameter:
        return self.config[name]

    def __getattr__(self, name: str) -> RLParameter:
        if name != "config" and name in self.__dict__.get("config", {}):
            return self.config[name]
        raise AttributeError(name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HyperparameterConfig) and set(self.config) == set(other.config)

    def __repr__(self) -> str:
        return "HyperparameterConfig(" + ", ".join(f"{k}={v}" for k, v in self.config.items()) + ")"

    def names(self) -> list[str]:
        return list(self.config)

    def items(self) -> ItemsView[str, RLParameter]:
        return self.config.items()

    def sample(self, rng: np.random.Generator) -> tuple[str, RLParameter]:
        name = self.names()[int(rng.integers(len(self.config)))]
        return name, self.config[name]


class Member(Protocol):
    """What evolution needs of an agent."""

    index: int
    fitness: list[float]
    mut: str
    hp_config: HyperparameterConfig | None

    def clone(self, index: int | None = None, wrap: bool = True) -> "Member": ...

    def clean_up(self) -> None: ...

    def set_hyperparameter(self, name: str, value: float) -> None: ...

    def hyperparameter(self, name: str) -> float: ...

    def mutation_hook(self) -> None: ...

    def save_checkpoint(self, path: str | Path) -> None: ...


class Mutations:
    """Mutates a population (agents with `hp_config`, `hyperparameter`, `set_hyperparameter`, `mut`,
    `mutation_hook`): each agent gets no mutation or a learning-hyperparameter mutation, drawn with the
    given relative probabilities. `mutation_sd`, `dormant_threshold` and `activation_selection` are accepted for
    AgileRL's signature and serve only the network mutations refused here; RL hyperparameters move by their
    RLParameter's factors, as in AgileRL. `rand_seed` seeds this object's draws (and, as in AgileRL, the
    global torch / NumPy / Python seeds, which tournament selection draws from)."""

    def __init__(
        self,
        no_mutation: float,
        architecture: float,
        new_layer_prob: float,
        parameters: float,
        activation: float,
        rl_hp: float,
        mutation_sd: float = 0.1,
        dormant_threshold: float = 0.01,
        activation_selection: list[str] | None = None,
        mutate_elite: bool = True,
        rand_seed: int | None = None,
        device: str = "cpu",
        accelerator: Any = None,
    ):
        network = {"architecture": architecture, "parameters": parameters, "activation": activation}
        refused = [name for name, p in network.items() if p]
        if refused:
            raise ValueError(
                f"Mutations: {', '.join(refused)} mutations are not supported for language models (AgileRL refuses "
                "them too); set them to 0 and evolve the learning hyperparameters with rl_hp"
            )
        for name, p in {"no_mutation": no_mutation, "rl_hp": rl_hp, "mutation_sd": mutation_sd}.items():
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p < math.inf:
                raise ValueError(f"Mutations: {name} must be a finite number >= 0, not {p!r}")
        if (
            isinstance(new_layer_prob, bool)
            or not isinstance(new_layer_prob, int | float)
            or not 0 <= new_layer_prob <= 1
        ):
            raise ValueError(f"Mutations: new_layer_prob must be in [0, 1], not {new_layer_prob!r}")
        if no_mutation + rl_hp == 0:
            raise ValueError("Mutations: no_mutation and rl_hp are both 0; give one a weight")
        if rand_seed is not None:
            _seed_everything(rand_seed)
        self.rng = np.random.default_rng(rand_seed)
        self.no_mut, self.rl_hp_mut, self.mutation_sd = no_mutation, rl_hp, mutation_sd
        self.mutate_elite, self.device, self.accelerator = mutate_elite, device, accelerator

    def mutation(
        self, population: list[Member], pre_training_mut: bool = False, indices: list[int] | None = None
    ) -> list[Member]:
        """Each agent (or those whose index is in `indices`) mutated in place, and the population returned, as
        AgileRL does. `pre_training_mut`: never "no mutation", so every agent starts from its own hyperparameters."""
        weights = np.array([0.0 if pre_training_mut else self.no_mut, self.rl_hp_mut])
        if weights.sum() == 0:
            weights = np.array([1.0, 0.0])
        targets = population if indices is None else [a for a in population if a.index in set(indices)]
        choices = self.rng.choice(2, size=len(targets), p=weights / weights.sum())
        if not self.mutate_elite and targets and targets[0] is population[0]:
            choices[0] = 0  # the elite heads the population after tournament selection
        drawn = [self.draw(agent) if choice else None for agent, choice in zip(targets, choices, strict=True)]
        for agent, change in zip(targets, same_on_every_process(drawn, population), strict=True):
            self._apply(agent, change)
            agent.mutation_hook()
        return population

    def draw(self, individual: Member) -> tuple[str, int | float] | None:
        """A learning-hyperparameter mutation for `individual`: (name, new value), or None without `hp_config`."""
        if not individual.hp_config:
            return None
        name, parameter = individual.hp_config.sample(self.rng)
        return name, parameter.mutate(individual.hyperparameter(name), self.rng)

    def no_mutation(self, individual: Member) -> Member:
        individual.mut = "None"
        return individual

    def rl_hyperparam_mutation(self, individual: Member) -> Member:
        """One hyperparameter of the agent's `hp_config`, grown or shrunk within its range."""
        return self._apply(individual, self.draw(individual))

    def _apply(self, individual: Member, change: tuple[str, int | float] | None) -> Member:
        if change is None:
            return self.no_mutation(individual)
        individual.set_hyperparameter(*change)
        individual.mut = change[0]
        return individual


class TournamentSelection:
    """The next generation: the elite (the best last fitness) first, then `population_size - 1` winners of
    tournaments of `tournament_size` agents drawn at random (NumPy's global generator, as AgileRL), ranked by
    fitness; every winner but the elite takes a new index (above the highest), and a winner placed more than once
    is cloned for its later places. `eval_loop` (AgileRL before 2.4):
    rank by the mean of the last `eval_loop` fitness values. Elitism is required for language models."""

    def __init__(self, tournament_size: int, elitism: bool, population_size: int, eval_loop: int = 1):
        sizes = {"tournament_size": tournament_size, "population_size": population_size, "eval_loop": eval_loop}
        for name, size in sizes.items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ValueError(f"TournamentSelection: {name} must be a whole number >= 1, not {size!r}")
        if elitism is not True:
            raise ValueError(
                "TournamentSelection(elitism=False) is not supported for language model populations (nor in "
                "AgileRL); construct it with elitism=True"
            )
        self.tournament_size, self.elitism = tournament_size, elitism
        self.population_size, self.eval_loop = population_size, eval_loop

    def fitness_of(self, agent: Member) -> float:
        if not agent.fitness:
            raise ValueError(f"TournamentSelection: agent {agent.index} has no fitness yet; call agent.test(env) first")
        fitness = float(np.mean(agent.fitness[-self.eval_loop :]))
        if math.isnan(fitness):
            raise ValueError(f"TournamentSelection: agent {agent.index}'s fitness is NaN; check its reward function")
        return fitness

    def select(self, population: list[Member]) -> tuple[Member, list[Member], None]:
        """(elite, new population, None); agents not chosen are cleaned up (their adapters freed)."""
        if len(population) != self.population_size:
            raise ValueError(
                f"TournamentSelection: population_size={self.population_size} but the population has "
                f"{len(population)} agents"
            )
        fitness = [self.fitness_of(agent) for agent in population]
        rank = np.argsort(np.argsort(fitness))  # ties: the earlier agent ranks lower, as in AgileRL
        best = int(np.argmax(rank))
        next_index = max(agent.index for agent in population)
        picks: list[tuple[int, int]] = [(best, population[best].index)]  # (parent, index of the new member)
        for _ in range(self.population_size - 1):
            contenders = np.random.randint(0, len(population), size=self.tournament_size)
            next_index += 1
            picks.append((int(contenders[np.argmax(rank[contenders])]), next_index))
        picks = same_on_every_process(picks, population)
        chosen = {parent for parent, _ in picks}
        for i, agent in enumerate(population):
            if i not in chosen:
                agent.clean_up()
        new_population, placed = [], set()
        for parent, index in picks:  # a parent's first place is the agent itself, renumbered; later ones clones
            if parent in placed:
                member = population[parent].clone(index=index)
            else:
                member = population[parent]
                member.index = index
                placed.add(parent)
            new_population.append(member)
        return new_population[0], new_population, None


def same_on_every_process(drawn: Any, population: list[Any]) -> Any:
    """What the main process drew, on every process of a multi-process run (as AgileRL broadcasts its selection),
    so the processes keep one population; `drawn` itself in one process."""
    accelerator = getattr(population[0], "accelerator", None) if population else None
    if accelerator is None or accelerator.num_processes == 1:
        return drawn
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([drawn], from_process=0)[0]


def _seed_everything(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


__all__ = ["HyperparameterConfig", "Mutations", "RLParameter", "TournamentSelection"]
