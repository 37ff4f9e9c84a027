"""Configs of the parameter-updating GRPO module (`scripts/run_grpo.py`, `configs/rl/*.yaml`).

Pure pydantic, no torch: every knob of the trainer with its default and the paper or project it comes from.
"""

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from utu.config.models import ExpId, ModelConfig

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]


class LoraSettings(BaseModel):
    """A LoRA adapter (Hu et al., arXiv 2106.09685) through peft; the base model stays frozen."""

    model_config = ConfigDict(extra="forbid")
    r: int = Field(16, ge=1, description="Rank of the update matrices. Default 16.")
    alpha: int = Field(32, ge=1, description="Scaling numerator (alpha / r). Default 32, i.e. 2 * r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Adapter dropout. Default 0: ratios need it off.")
    target_modules: list[str] | str = Field(
        "all-linear", description="Which layers get adapters. Default 'all-linear' (peft), the QLoRA paper's advice."
    )


class GRPOSettings(BaseModel):
    """Every knob of the trainer, with its default and where it comes from."""

    model_config = ConfigDict(extra="forbid")

    group_size: int = Field(8, ge=2, description="G completions per prompt. Default 8 (TRL); GRPO paper: 64.")
    batch_size: int = Field(
        8, ge=1, description="Completions per micro-batch in `learn`, per process (AgileRL's batch_size). Default 8."
    )
    gradient_accumulation_steps: int = Field(
        1, ge=1, description="Micro-batches per optimizer step. Default 1. The dapo/dr_grpo/grpo losses are invariant."
    )
    update_epochs: int = Field(
        1, ge=1, description="Passes over each rollout (GRPO's mu, TRL num_iterations). Default 1: strictly on-policy."
    )
    lr: float = Field(1e-6, gt=0, description="AdamW learning rate. Default 1e-6 (TRL, full fine-tuning); LoRA: 1e-5+.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay. Default 0.")
    warmup_steps: int = Field(0, ge=0, description="Linear LR warm-up, in optimizer steps. Default 0.")
    lr_schedule: Literal["constant", "cosine"] = Field(
        "constant", description="After warm-up: constant, or cosine decay to 0 over schedule_steps. Default constant."
    )
    schedule_steps: int | None = Field(
        None, ge=1, description="Optimizer steps of the cosine schedule, warm-up included (AgileRL num_epochs)."
    )
    clip_coef: float = Field(0.2, gt=0, description="PPO/GRPO clip epsilon. Default 0.2 (PPO, GRPO papers).")
    clip_coef_low: float | None = Field(None, gt=0, description="Lower epsilon; None = clip_coef.")
    clip_coef_high: float | None = Field(
        None, gt=0, description="Upper epsilon; None = clip_coef. DAPO's clip-higher uses 0.28 (arXiv 2503.14476)."
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping by global norm. Default 1.0 (TRL).")
    beta: float = Field(
        0.0, ge=0, description="KL weight (k3 estimator). Default 0 (TRL, DAPO): no reference model. GRPO paper: 0.04."
    )
    kl_bias_correction: bool = Field(
        False,
        description="Weight the KL term by the ratio rho (DeepSeek-V3.2; TRL's default). Default off (GRPO paper).",
    )
    loss_type: LossType = Field("dapo", description="grpo | bnpo | dr_grpo | dapo (see losses.py). Default dapo (TRL).")
    scale_rewards: ScaleRewards = Field(
        "group", description="Advantage std: group (GRPO) | batch | none (Dr. GRPO, arXiv 2503.20783). Default group."
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature; training logits use it too. Default 1.0.")
    top_p: float = Field(
        1.0, gt=0, le=1, description="Nucleus sampling. Default 1.0 (off): ratios use full-vocab log-probs."
    )
    max_new_tokens: int = Field(256, ge=1, description="Completion length cap. Default 256 (TRL <= v1.9).")
    min_output_tokens: int = Field(0, ge=0, description="EOS is blocked before this many tokens. Default 0 (AgileRL).")
    mask_truncated_completions: bool = Field(
        False,
        description="Drop completions cut at max_new_tokens from the loss (DAPO overlong filtering). Default off.",
    )
    filter_zero_std_groups: bool = Field(
        False,
        description="Skip groups with all-equal rewards: no signal (DAPO dynamic sampling). Default off.",
    )
    reduce_memory_peak: bool = Field(
        False, description="Log-probs one sequence at a time instead of a micro-batch at once (AgileRL). Default off."
    )
    lora: LoraSettings | None = Field(None, description="Train a LoRA adapter instead of all weights. Default None.")
    seed: int = Field(0, description="Seeds sampling and the micro-batch shuffle. Default 0.")

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


class RLModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(
        "embedded", description="'embedded' (the bundled SmolLM2-135M GGUF), a local model folder or a hub id."
    )
    gguf_file: str | None = Field(None, description="A GGUF file inside `path`, dequantised by transformers.")
    device: str = Field("cpu", description="cpu or cuda; multi-GPU runs go through `accelerate launch`.")


DEFAULT_SYSTEM_PROMPT = "Solve the problem. Put the final answer in \\boxed{}."


class RLDataConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dataset: str | None = Field(None, description="A data set in the SQL store (bundled sets load automatically).")
    file_path: Path | None = Field(None, description="Or a JSONL file with question/answer lines.")
    test_size: int = Field(16, ge=0, description="Questions held out (the last ones by index) for `test`.")
    train_limit: int | None = Field(None, gt=0, description="Use only the first N training questions.")
    system: str = Field(DEFAULT_SYSTEM_PROMPT, description="The system message of every prompt.")
    user: str = Field("{question}", description="The user message; {question} is replaced by the question.")

    @model_validator(mode="after")
    def _one_source(self) -> "RLDataConfig":
        if (self.dataset is None) == (self.file_path is None):
            raise ValueError("set exactly one of data.dataset and data.file_path")
        return self


class RLConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exp_id: ExpId = Field("grpo", description="The experiment id: results go to runs/<exp_id>/grpo/.")
    model: RLModelConfig = Field(default_factory=RLModelConfig, description="The model to train.")
    data: RLDataConfig = Field(description="The prompts: a data set or a JSONL file, and the prompt template.")
    verify_filename: str = Field("math.py", description="The reward's verify function: as in eval configs.")
    verify_func_name: str = Field("verify_func", description="The function in that file.")
    verify_timeout: float = Field(10.0, gt=0, description="Seconds before a verifier is abandoned (reward 0).")
    judge_model: ModelConfig | None = Field(
        None, description="The judge LLM of LLM-graded verifiers (as in eval configs); none: JUDGE_LLM_* when "
        "JUDGE_LLM_BASE_URL is set, else no judge.",
    )  # fmt: skip
    trainer: GRPOSettings = Field(default_factory=GRPOSettings, description="The GRPO trainer's knobs.")
    prompts_per_step: int = Field(4, ge=1, description="Prompts per step; each gets trainer.group_size completions.")
    steps: int = Field(10, ge=0, description="Training steps (one update each).")
    test_k: int = Field(4, ge=1, description="Completions per held-out question in the before/after test.")
    save_every: int = Field(0, ge=0, description="Checkpoint every N steps (0: only at the end).")
