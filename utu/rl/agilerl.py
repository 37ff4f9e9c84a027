"""AgileRL's GRPO API over our trainer, for people who know it (AgileRL's `agilerl.algorithms.GRPO`, its tutorials).

    from utu.rl.agilerl import GRPO, HuggingFaceGym      # instead of agilerl.algorithms / agilerl.utils.llm_utils

    env = HuggingFaceGym(train_dataset, test_dataset, tokenizer, reward_fn, conversation_template,
                         data_batch_size_per_gpu=8)
    agent = GRPO(env.observation_space, env.action_space, actor_network=model,
                 pad_token_id=tokenizer.eos_token_id, batch_size=8, group_size=8)
    prompts = env.reset(reset_dataloaders=True)
    for _ in range(steps):
        completion_ids, action_masks = agent.get_action(prompts)
        next_prompts, rewards = env.step(completion_ids)
        loss, kl = agent.learn((completion_ids, action_masks, rewards))
        prompts = next_prompts
    fitness = agent.test(env)

Everything runs on `utu.rl.grpo.LocalGRPO` (its losses, prefix sharing, multi-process update and checkpoints), so
the arithmetic is the one tested against TRL. The agent's arguments that AgileRL has and we do not honour raise
an error that names them; a few loop arguments with no meaning here are accepted and unused (`init_hp` of
`finetune_llm`; `env_name`, `algo`, `accelerator`, `language_model` of `run_selection_and_mutation`).
Rewards: AgileRL's `reward_fn(completion, solution, prompt) -> float`, or any of our verify functions
(`HuggingFaceGym.from_dataset`). Evolutionary HPO (`GRPO.population`, `Mutations`, `TournamentSelection`,
`finetune_llm`): utu/rl/evolution.py and utu/rl/finetune.py, re-exported here.
"""

import contextlib
import copy
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import ValidationError
from torch import Tensor

from utu.rl.evolution import HyperparameterConfig, Mutations, RLParameter, TournamentSelection
from utu.rl.finetune import finetune_llm, finetune_llm_reasoning, run_selection_and_mutation
from utu.rl.grpo import LearningRateFactor, Rollout, is_peft, load_data, random_state, restore_random_state
from utu.rl.grpo import LocalGRPO as Trainer
from utu.rl.hf_gym import HuggingFaceGym, Prompt, TokenSpace, run_sync
from utu.rl.losses import completion_mask


@dataclass(frozen=True)
class CosineLRScheduleConfig:
    """AgileRL's schedule: warm up for `warmup_proportion` of `num_epochs` optimizer steps, then cosine to 0."""

    num_epochs: int
    warmup_proportion: float = 0.05


# AgileRL arguments with a fixed meaning here: passing another value is refused, naming the argument.
FIXED = {"calc_position_embeddings": True, "use_vllm": False, "vllm_config": None}
# What evolution may change mid-run (`hp_config`): GRPOSettings fields a running trainer reads at each step.
EVOLVABLE = ("lr", "beta", "group_size", "batch_size", "clip_coef", "max_grad_norm", "update_epochs", "temperature")


def load_record(path: str | Path) -> dict[str, Any]:
    """A checkpoint's agilerl.pt (its constructor's arguments and evolution record), read as data: its own
    classes are the only objects it may hold (`load_data`), and int and float as an RLParameter's dtype."""
    return load_data(Path(path) / "agilerl.pt", allowed=(HyperparameterConfig, RLParameter, TokenSpace, int, float))


class GRPO:
    """AgileRL's `GRPO` constructor and methods, over `utu.rl.grpo.LocalGRPO` (`self.trainer`)."""

    def __init__(
        self,
        observation_space: Any = None,
        action_space: Any = None,
        actor_network: Any = None,
        pad_token_id: int | None = None,
        pad_token: str | None = None,
        model_name: str | None = None,
        hp_config: HyperparameterConfig | None = None,
        index: int = 0,
        batch_size: int = 64,
        lr: float = 1e-4,
        clip_coef: float = 0.2,
        max_grad_norm: float = 0.5,
        update_epochs: int = 4,
        group_size: int = 8,
        temperature: float = 0.9,
        calc_position_embeddings: bool = True,
        reduce_memory_peak: bool = False,
        min_output_tokens: int | None = 0,
        max_output_tokens: int = 1024,
        max_model_len: int | None = None,
        beta: float = 0.001,
        lora_config: Any = None,
        cosine_lr_schedule_config: CosineLRScheduleConfig | None = None,
        accelerator: Any = None,
        device: str = "cpu",
        use_vllm: bool = False,
        vllm_config: Any = None,
        seed: int = 0,
        **unsupported: Any,
    ):
        """AgileRL's arguments (before 2.4, with the observation and action spaces; since, without them); the
        model is `actor_network`, or `model_name` (a folder or hub id) loaded with transformers. `pad_token` is
        taken for AgileRL's signature; the id is what counts. `max_model_len` caps prompt plus completion."""
        given = {"calc_position_embeddings": calc_position_embeddings, "use_vllm": use_vllm, "vllm_config": vllm_config}
        refused = sorted(unsupported) + [k for k, v in given.items() if v != FIXED[k]]
        if refused:
            raise ValueError(
                f"utu.rl.agilerl.GRPO does not support {', '.join(refused)} "
                "(sampling is transformers' on this process, no vLLM; positions always follow the attention mask)"
            )
        if (actor_network is None) == (model_name is None):
            raise ValueError("GRPO: give exactly one of actor_network and model_name")
        if actor_network is None:
            from transformers import AutoModelForCausalLM

            actor_network = AutoModelForCausalLM.from_pretrained(str(model_name), dtype=torch.float32)
        if hp_config is not None and not isinstance(hp_config, HyperparameterConfig):
            raise ValueError(f"GRPO: hp_config must be a HyperparameterConfig, not {type(hp_config).__name__}")
        if hp_config and (unknown := [n for n in hp_config if n not in EVOLVABLE]):
            raise ValueError(f"GRPO: hp_config names {', '.join(unknown)}; these can evolve: {', '.join(EVOLVABLE)}")
        self.observation_space, self.action_space, self.index = observation_space, action_space, index
        self.hp_config, self.max_model_len = hp_config, max_model_len
        self.fitness: list[float] = []  # one entry per `test`
        self.scores: list[float] = []  # mean training reward per `learn`
        self.steps: list[int] = [0]
        self.mut = "None"  # the last mutation, as AgileRL names it
        self.shared: SharedBase | None = None  # set when population members share one base model
        self._adapter = ""  # this member's adapter on the shared model
        self.init_hooks: list[Callable[[], None]] = []
        knobs: dict[str, Any] = {  # GRPOSettings' fields
            "batch_size": batch_size,
            "lr": lr,
            "clip_coef": clip_coef,
            "max_grad_norm": max_grad_norm,
            "update_epochs": update_epochs,
            "group_size": group_size,
            "temperature": temperature,
            "reduce_memory_peak": reduce_memory_peak,
            "min_output_tokens": min_output_tokens or 0,
            "max_new_tokens": max_output_tokens,
            "beta": beta,
            "lora": _lora_settings(lora_config),
            # AgileRL's GRPO averages per-sequence token means: our "grpo" loss type
            "loss_type": "grpo",
            "seed": seed,
        }
        if cosine_lr_schedule_config is not None:
            c = cosine_lr_schedule_config
            knobs |= {
                "lr_schedule": "cosine",
                "schedule_steps": c.num_epochs,
                "warmup_steps": round(c.warmup_proportion * c.num_epochs),
            }
        self.init_args = {  # saved with every checkpoint: plain Python numbers, not a tokenizer's NumPy ints
            "observation_space": observation_space,
            "action_space": action_space,
            "pad_token_id": None if pad_token_id is None else int(pad_token_id),
            "device": device,
            "hp_config": hp_config,
            "max_model_len": None if max_model_len is None else int(max_model_len),
        }
        self.trainer = Trainer(
            actor_network, None, accelerator=accelerator, device=device, pad_token_id=pad_token_id, **knobs
        )
        if hp_config:
            self._check_ranges(hp_config)

    def _check_ranges(self, hp_config: HyperparameterConfig) -> None:
        """Each evolving hyperparameter's range holds valid values of its knob, the value it starts at, and can
        move it; refused here rather than at the first mutation."""
        from pydantic import ValidationError

        settings = self.trainer.settings
        for name, parameter in hp_config.items():
            current = getattr(settings, name)
            if isinstance(current, int) and parameter.dtype is not int:
                raise ValueError(f"hp_config: {name} is a whole number; give RLParameter(..., dtype=int)")
            if isinstance(current, float) and parameter.dtype is int:
                raise ValueError(f"hp_config: {name} is a real number; dtype=int would only ever give it whole values")
            for bound in (parameter.min, parameter.max):
                try:
                    type(settings)(**{**settings.model_dump(), name: bound})
                except ValidationError as e:
                    raise ValueError(f"hp_config: {name}={bound} is not a valid {name}: {e.errors()[0]['msg']}") from e
            if not parameter.min <= current <= parameter.max:
                raise ValueError(f"hp_config: {name} starts at {current}, outside [{parameter.min}, {parameter.max}]")
            if current == 0:
                raise ValueError(f"hp_config: {name} starts at 0, which growing or shrinking never moves")
            if name == "beta" and self.trainer.reference is None and not self.is_lora:
                raise ValueError("hp_config: beta can evolve only with a reference model; start with beta > 0 or LoRA")

    # --- acting and learning --------------------------------------------------------------------------

    @property
    def actor(self) -> Any:
        return self.trainer.model

    @property
    def accelerator(self) -> Any:
        return self.trainer.accelerator

    def get_action(self, states: list[Prompt], training: bool = True) -> tuple[list[Tensor], list[Tensor]]:
        """For each prompt, (G, prompt + completion) token ids and the (G, length - 1) action mask that marks
        which next tokens were generated (pads after the EOS are not). `training=False`: one completion each."""
        self._activate()
        group = self.trainer.settings.group_size if training else 1
        prompts = [s["input_ids"][0][s["attention_mask"][0].bool()] for s in states]  # without any padding
        prompt_ids, prompt_mask = _left_pad(prompts, self.trainer.pad_id)
        tools = states[0].get("tools")
        if tools is None:
            rollout = self.trainer.rollout(prompt_ids, prompt_mask, group, self._room(prompt_ids.size(1)))
        else:
            rollout = run_sync(self.trainer.rollout_with_tools(prompt_ids, prompt_mask, tools, group))
            for state, texts in zip(states, rollout.texts, strict=True):
                state["last_turns"] = texts
        completions, masks = [], []
        for i, prompt in enumerate(prompts):
            prompt = prompt.to(rollout.completion_ids.device)
            rows = slice(i * group, (i + 1) * group)
            ids = torch.cat([prompt.expand(group, -1), rollout.completion_ids[rows]], dim=1)
            mask = torch.zeros(group, ids.size(1) - 1, dtype=torch.bool, device=ids.device)
            mask[:, len(prompt) - 1 :] = rollout.loss_mask[rows].bool()  # tool results are not actions
            completions.append(ids)
            masks.append(mask)
        return completions, masks

    def learn(self, experiences: tuple[list[Tensor], list[Tensor], Tensor]) -> tuple[float, float]:
        """One GRPO update from (completion_ids, action_masks, rewards (prompts, G)); returns (loss, kl)."""
        self._activate()
        completion_ids, action_masks, rewards = experiences
        rollout = self._rollout_from(completion_ids, action_masks)
        rewards = torch.as_tensor(rewards, dtype=torch.float32)
        metrics = self.trainer.learn(rollout, rewards)
        self.scores.append(float(rewards.mean()))
        self.steps[-1] += len(completion_ids)
        return metrics.get("loss", 0.0), metrics.get("kl", 0.0)

    def _room(self, prompt_width: int) -> int | None:
        """Completion tokens `max_model_len` leaves after the longest prompt (None: no cap)."""
        if self.max_model_len is None:
            return None
        room = self.max_model_len - prompt_width
        if room < 1:
            raise ValueError(f"get_action: a prompt of {prompt_width} tokens fills max_model_len={self.max_model_len}")
        return min(room, self.trainer.settings.max_new_tokens)

    def _rollout_from(self, completion_ids: list[Tensor], action_masks: list[Tensor]) -> Rollout:
        prompts, completions, masks = [], [], []
        for ids, mask in zip(completion_ids, action_masks, strict=True):
            start = int(mask[0].int().argmax()) + 1  # mask[t] marks token t + 1
            prompts.append(ids[0, :start])
            completions.append(ids[:, start:])
            masks.append(mask[:, start - 1 :])
        group = completion_ids[0].size(0)
        prompt_ids, prompt_mask = _left_pad(prompts, self.trainer.pad_id)
        width = max(c.size(1) for c in completions)
        ids = torch.full((len(completions) * group, width), self.trainer.pad_id, dtype=torch.long)
        generated = torch.zeros(len(completions) * group, width)
        for i, (c, m) in enumerate(zip(completions, masks, strict=True)):
            ids[i * group : (i + 1) * group, : c.size(1)] = c.cpu()
            generated[i * group : (i + 1) * group, : m.size(1)] = m.float().cpu()
        eos, device = self.trainer.eos_id, self.accelerator.device
        prompt_ids, prompt_mask = prompt_ids.repeat_interleave(group, 0), prompt_mask.repeat_interleave(group, 0)
        single = completion_mask(ids, eos) * generated
        if torch.equal(single, generated):  # one turn each: actions up to the first EOS
            mask, model_mask, truncated = single, None, ~(ids == eos).any(dim=1)
        else:  # turns with tool results between them: every token up to the last action is context
            positions = torch.arange(width)
            last = torch.where(generated.any(dim=1), width - 1 - generated.flip(1).argmax(dim=1), -1)
            mask, model_mask = (positions[None] <= last[:, None]).float(), generated
            truncated = ids.gather(1, last.clamp(min=0)[:, None]).squeeze(1) != eos
        return Rollout(
            prompt_ids.to(device),
            prompt_mask.to(device),
            ids.to(device),
            mask.to(device),
            truncated.to(device),
            [[""] * group for _ in completions],
            model_mask=None if model_mask is None else model_mask.to(device),
        )

    def test(self, env: HuggingFaceGym, loop: int = 1) -> float:
        """Mean reward of one completion per prompt over `loop` batches of the env's test set (AgileRL's
        fitness), over every process's prompts, so all processes agree; every random state is restored after."""
        self._activate()
        saved = random_state(self.trainer.shuffle)
        rewards = []
        try:
            with env.eval_mode():
                prompts = env.reset(reset_dataloaders=True)
                for _ in range(loop):
                    completion_ids, _ = self.get_action(prompts, training=False)
                    prompts, scores = env.step(completion_ids)
                    rewards.append(self.accelerator.gather(scores.float().to(self.accelerator.device)).mean())
        finally:
            restore_random_state(saved, self.trainer.shuffle)
        fitness = float(torch.stack(rewards).mean())
        self.fitness.append(fitness)
        return fitness

    def set_training_mode(self, training: bool) -> None:
        self.trainer.model.train(training)

    # --- checkpoints and copies -------------------------------------------------------------------------

    def save_checkpoint(self, path: str | Path) -> None:
        """The agent alone: its weights (under a population, its adapter and the base), optimizer, scheduler,
        step, random state, hyperparameters and evolution record (index, fitness, scores, steps; the last
        mutation is not kept: a loaded agent's `mut` is "None")."""
        self._activate()
        self.trainer.save_checkpoint(path, extra={"agilerl.pt": {**self.init_args, **self._record()}})

    def _record(self) -> dict[str, Any]:
        """The evolution record as plain Python numbers: a user's `fitness.append(np.mean(...))` is a NumPy scalar,
        which a checkpoint, read as data, does not hold."""
        return {
            "index": int(self.index),
            "fitness": [float(f) for f in self.fitness],
            "scores": [float(s) for s in self.scores],
            "steps": [int(s) for s in self.steps],
        }

    def load_checkpoint(self, path: str | Path) -> None:
        """Weights, optimizer, scheduler, step, random state and evolution record from `path` into this agent."""
        loaded = Trainer.load(path, device=self.init_args["device"], accelerator=self.accelerator)
        extra = load_record(path)  # both read before anything is let go
        self.clean_up()  # what this agent held before; it is now the one in `path`, on a model of its own
        self.trainer = loaded
        self._restore(extra)

    def _restore(self, extra: dict[str, Any]) -> None:
        self.index, self.fitness, self.scores = extra["index"], list(extra["fitness"]), list(extra["scores"])
        self.steps, self.mut, self.shared, self.init_hooks = list(extra["steps"]), "None", None, []
        self._adapter = ""
        self.hp_config, self.max_model_len = extra["hp_config"], extra["max_model_len"]

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu", accelerator: Any = None) -> "GRPO":
        extra = load_record(path)
        agent = cls.__new__(cls)
        agent.observation_space, agent.action_space = extra["observation_space"], extra["action_space"]
        agent.init_args = {k: extra[k] for k in ("observation_space", "action_space", "pad_token_id")}
        agent.init_args |= {"device": device, "hp_config": extra["hp_config"], "max_model_len": extra["max_model_len"]}
        agent.trainer = Trainer.load(path, device=device, accelerator=accelerator)
        agent._restore(extra)
        return agent

    def clone(self, index: int | None = None, wrap: bool = True) -> "GRPO":
        """An independent copy: weights, optimizer state, step, random state, hyperparameters and evolution
        record. A population member's copy is a new adapter on the same base model; any other agent's goes
        through a checkpoint."""
        if not wrap:
            raise ValueError("clone: wrap=False is not supported (models are always prepared by Accelerate)")
        self._activate()
        if self.shared is not None:
            twin = self._member(copy_of=self)
        else:
            with self._shared_temporary_folder() as tmp:
                self.save_checkpoint(tmp / "agent")
                twin = GRPO.load(tmp / "agent", device=self.init_args["device"], accelerator=self.accelerator)
        twin.index = self.index if index is None else index
        twin.mut = self.mut
        return twin

    @contextlib.contextmanager
    def _shared_temporary_folder(self) -> Iterator[Path]:
        """A temporary folder the main process makes and every process uses (a checkpoint is written by all)."""
        acc = self.accelerator
        made = [tempfile.mkdtemp(prefix="utu-clone-") if acc.is_main_process else None]
        if acc.num_processes > 1:
            from accelerate.utils import broadcast_object_list

            made = broadcast_object_list(made, from_process=0)
        try:
            yield Path(str(made[0]))
        finally:
            acc.wait_for_everyone()
            if acc.is_main_process:
                shutil.rmtree(str(made[0]), ignore_errors=True)

    # --- populations ------------------------------------------------------------------------------------

    @classmethod
    def population(
        cls,
        size: int,
        observation_space: Any = None,
        action_space: Any = None,
        wrapper_cls: Any = None,
        wrapper_kwargs: dict[str, Any] | None = None,
        device: str = "cpu",
        resume_from_checkpoint: str | None = None,
        **kwargs: Any,
    ) -> list["GRPO"]:
        """`size` agents with the same arguments, indices 0..size-1. With `lora_config` they share one frozen
        base model, each with its own adapter, optimizer and hyperparameters (memory grows by adapters, not
        models); without, each holds a copy of the model."""
        if wrapper_cls is not None or wrapper_kwargs:
            raise ValueError("GRPO.population: wrapper_cls is not supported (AgileRL's LLM agents take none)")
        if resume_from_checkpoint is not None:
            raise ValueError(
                "GRPO.population: resume_from_checkpoint is not supported; load each saved member with GRPO.load"
            )
        kwargs["device"] = device
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"GRPO.population: size must be a whole number >= 1, not {size!r}")
        kwargs.pop("index", None)  # a population's members are numbered 0..size-1, whatever index was passed
        first = cls(observation_space, action_space, index=0, **kwargs)
        if kwargs.get("lora_config") is None:
            network = kwargs.pop("actor_network", None)
            return [first] + [
                cls(observation_space, action_space, actor_network=copy.deepcopy(network), index=i, **kwargs)
                for i in range(1, size)
            ]
        if first.accelerator.num_processes > 1 and size > 1:
            raise ValueError(
                "GRPO.population: members sharing a base model run in one process for now; under several "
                "processes build the agents one by one (GRPO(...)) or run without accelerate launch"
            )
        first._adapter = first.unwrap_models().active_adapter
        first.shared = SharedBase(first.unwrap_models(), {first._adapter})
        members = [first]
        for i in range(1, size):
            member = first._member(copy_of=None)
            member.index = i
            members.append(member)
        return members

    def _activate(self) -> None:
        """Under a shared base, this member's adapter is the one in use (and the only one trainable). Every
        method that uses the model starts here, so a cleaned-up agent says so."""
        self._trainer()
        if self.shared is not None:
            self.shared.model.set_adapter(self._adapter)

    def _member(self, copy_of: "GRPO | None") -> "GRPO":
        """A new member on this agent's base model: a fresh adapter (initialised as LoRA does), or a copy of
        `copy_of`'s adapter with its optimizer, scheduler, step, random state and evolution record."""
        assert self.shared is not None
        source = copy_of or self
        model, name = self.shared.model, self.shared.new_name()
        model.add_adapter(name, model.peft_config[source._adapter])
        if copy_of is not None:
            from peft import get_peft_model_state_dict, set_peft_model_state_dict

            weights = get_peft_model_state_dict(model, adapter_name=copy_of._adapter)
            set_peft_model_state_dict(model, weights, adapter_name=name)
        model.set_adapter(name)
        rng = torch.get_rng_state()  # a trainer seeds torch when built; the run's stream goes on untouched
        trainer = Trainer(
            model,
            None,
            accelerator=self.accelerator,
            device=self.init_args["device"],
            pad_token_id=self.trainer.pad_id,
            eos_token_id=self.trainer.eos_id,
            **source.trainer.settings.model_dump(),
        )
        torch.set_rng_state(rng)
        if copy_of is not None:
            trainer.optimizer.load_state_dict(copy_of.trainer.optimizer.state_dict())
            trainer.scheduler.load_state_dict(copy_of.trainer.scheduler.state_dict())
            trainer.step = copy_of.trainer.step
            trainer.shuffle.set_state(copy_of.trainer.shuffle.get_state())
        member = GRPO.__new__(GRPO)
        member.__dict__ |= {k: v for k, v in self.__dict__.items() if k not in ("trainer", "_adapter")}
        member.trainer, member._adapter, member.shared = trainer, name, self.shared
        member.init_args = dict(source.init_args)
        member.hp_config = copy.deepcopy(source.hp_config)
        record = copy.deepcopy(source._record()) if copy_of is not None else {"fitness": [], "scores": [], "steps": [0]}
        member.fitness, member.scores, member.steps = record["fitness"], record["scores"], record["steps"]
        member.mut, member.init_hooks = "None", list(source.init_hooks)
        self.shared.adapters.add(name)
        self._activate()
        return member

    def clean_up(self) -> None:
        """Free what only this agent holds (its trainer, optimizer and scheduler; under a shared base its adapter,
        the others keep theirs). The agent cannot be used after it."""
        trainer = self.__dict__.get("trainer")
        if trainer is None:
            return
        acc = trainer.accelerator
        for prepared, mine in ((acc._optimizers, trainer.optimizer), (acc._schedulers, trainer.scheduler)):
            prepared[:] = [x for x in prepared if x is not mine]  # Accelerate keeps what it prepared otherwise
        if self.shared is None:
            acc._models[:] = [m for m in acc._models if m is not trainer.model]
        elif self._adapter in self.shared.adapters:
            self.shared.adapters.discard(self._adapter)
            if self.shared.adapters:  # the last member keeps its adapter: peft needs one
                self.shared.model.set_adapter(next(iter(self.shared.adapters)))
                self.shared.model.delete_adapter(self._adapter)
        del self.trainer

    # --- hyperparameters --------------------------------------------------------------------------------

    def hyperparameter(self, name: str) -> float:
        return getattr(self._trainer().settings, name)

    def set_hyperparameter(self, name: str, value: float) -> None:
        """Set an evolvable hyperparameter (EVOLVABLE), checked as the knob is; a new learning rate takes effect
        at once, keeping the optimizer's moments (AgileRL rebuilds the optimizer instead)."""
        if name not in EVOLVABLE:
            raise ValueError(f"set_hyperparameter: {name} cannot change mid-run; these can: {', '.join(EVOLVABLE)}")
        trainer = self._trainer()
        try:  # checked as the knob is, before any change
            settings = type(trainer.settings)(**{**trainer.settings.model_dump(), name: value})
        except ValidationError as e:
            reason = e.errors()[0]["msg"]
            raise ValueError(f"set_hyperparameter: {name}={value!r}: {reason}") from None
        if name == "beta" and settings.beta > 0 and trainer.reference is None and not self.is_lora:
            raise ValueError("set_hyperparameter: beta > 0 needs a reference model; start with beta > 0 or LoRA")
        trainer.settings = settings
        if name == "lr":
            scheduler = getattr(trainer.scheduler, "scheduler", trainer.scheduler)  # inside Accelerate's wrapper
            factor = LearningRateFactor(settings)(scheduler.last_epoch)
            scheduler.base_lrs = [settings.lr for _ in scheduler.base_lrs]
            for group in trainer.optimizer.param_groups:
                group["initial_lr"], group["lr"] = settings.lr, settings.lr * factor

    def _trainer(self) -> Trainer:
        trainer = self.__dict__.get("trainer")
        if trainer is None:
            raise RuntimeError(
                f"agent {self.index} was cleaned up (it lost a tournament, or clean_up was called); "
                "use the population TournamentSelection.select returned"
            )
        return trainer

    def __getattr__(self, name: str) -> Any:
        """AgileRL's agents expose their hyperparameters as attributes (`agent.lr`); after clean_up, reading one
        (or the trainer) says so."""
        if name == "trainer":  # only missing after clean_up
            self._trainer()
        if name in EVOLVABLE:
            return self.hyperparameter(name)
        raise AttributeError(name)

    def __setattr__(self, name: str, value: Any) -> None:
        """`agent.lr = x` (as AgileRL's mutations write it) sets the hyperparameter the trainer uses."""
        if name in EVOLVABLE:
            self.set_hyperparameter(name, value)
        else:
            super().__setattr__(name, value)

    def register_init_hook(self, hook: Callable[[], None]) -> None:
        """`hook` runs after each mutation of this agent (AgileRL's hook, e.g. to resync a copy elsewhere)."""
        self.init_hooks.append(hook)

    def mutation_hook(self) -> None:
        for hook in self.init_hooks:
            hook()

    def get_policy(self) -> Any:
        return self.trainer.model

    def evolvable_attributes(self, networks_only: bool = False) -> dict[str, Any]:
        return {"actor": self.trainer.model} | ({} if networks_only else {"optimizer": self.trainer.optimizer})

    def to_device(self, *experiences: Any) -> tuple[Any, ...]:
        device = self.accelerator.device
        return tuple(e.to(device) if isinstance(e, Tensor) else [t.to(device) for t in e] for e in experiences)

    def preprocess_observation(self, observation: Any) -> Any:
        """Prompts come tokenized from the env: nothing to do (as in AgileRL's GRPO)."""
        return observation

    @staticmethod
    def copy_attributes(agent: "GRPO", clone: "GRPO") -> "GRPO":
        """The evolution record and hyperparameters of `agent` onto `clone` (the weights are `clone`'s)."""
        for name in ("index", "mut", "max_model_len"):
            setattr(clone, name, getattr(agent, name))
        clone.fitness, clone.scores, clone.steps = list(agent.fitness), list(agent.scores), list(agent.steps)
        clone.hp_config = copy.deepcopy(agent.hp_config)
        for name in EVOLVABLE:
            clone.set_hyperparameter(name, agent.hyperparameter(name))
        return clone

    def unwrap_models(self) -> Any:
        """The plain model (no DDP / DeepSpeed wrapper), e.g. to save it with `save_pretrained`."""
        return self.accelerator.unwrap_model(self.trainer.model)

    def wrap_models(self) -> None:
        """Models are wrapped by Accelerate when the agent is built; nothing is left to wrap."""

    @property
    def is_lora(self) -> bool:
        return is_peft(self.unwrap_models())


@dataclass
class SharedBase:
    """The one peft model a population's members share, and the adapters in use on it."""

    model: Any
    adapters: set[str]
    made: int = 0

    def new_name(self) -> str:
        self.made += 1
        return f"member{self.made}"


def _left_pad(sequences: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros(len(sequences), width, dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, width - len(s) :] = s.cpu()
        mask[i, width - len(s) :] = 1
    return ids, mask


def _lora_settings(config: Any) -> dict | None:
    """A peft `LoraConfig` as our LoRA settings; fields we would not honour are refused by name."""
    if config is None:
        return None
    from peft import LoraConfig

    modules = config.target_modules
    targets = sorted(modules) if isinstance(modules, set | list | tuple) else (modules or "all-linear")
    ours = {"r": config.r, "alpha": config.lora_alpha, "dropout": config.lora_dropout, "target_modules": targets}
    plain = LoraConfig(
        r=config.r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=modules,
        task_type=config.task_type,
    ).to_dict()
    differs = sorted(k for k, v in config.to_dict().items() if plain.get(k) != v)
    if differs:
        raise ValueError(
            f"lora_config: {', '.join(differs)} not supported (only r, lora_alpha, lora_dropout, target_modules)"
        )
    return ours


ReasoningGym = HuggingFaceGym  # AgileRL 2.4+'s name (agilerl.llm_envs), with the same arguments used here

__all__ = [
    "GRPO",
    "ReasoningGym",
    "finetune_llm",
    "finetune_llm_reasoning",
    "run_selection_and_mutation",
    "CosineLRScheduleConfig",
    "HuggingFaceGym",
    "HyperparameterConfig",
    "Mutations",
    "RLParameter",
    "TokenSpace",
    "TournamentSelection",
]
