"""Pydantic models of every config. Unknown keys are errors, so a typo never goes unnoticed."""

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from utu.config.names import NAME_PATTERN, NAME_RULE


def _plain_name(value: str) -> str:
    if not NAME_PATTERN.fullmatch(value) or ".." in value:
        raise ValueError(f"not a plain name ({NAME_RULE})")
    return value


# An experiment id becomes a folder under runs/ and a database key: see utu/config/names.py.
ExpId = Annotated[str, AfterValidator(_plain_name)]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelProvider(StrictModel):
    """Where the LLM lives. `base_url: null` means the embedded local model."""

    type: Literal["chat.completions"] = "chat.completions"
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None

    @field_validator("model", "base_url", "api_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        # `${oc.env:VAR,null}` gives "" when VAR is set but empty (a common .env line); treat it as unset.
        return None if isinstance(v, str) and not v.strip() else v


class ModelSettings(StrictModel):
    """Sampling settings sent with every request."""

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, gt=0)
    seed: int | None = None


class Pricing(StrictModel):
    """Price in dollars per million tokens; used for cost accounting only."""

    input_per_million: float = Field(default=0.0, ge=0)
    output_per_million: float = Field(default=0.0, ge=0)


class ModelConfig(StrictModel):
    model_provider: ModelProvider = ModelProvider()
    model_settings: ModelSettings = ModelSettings()
    pricing: Pricing = Pricing()
    concurrency: int = Field(default=16, gt=0, description="Requests in flight at once, per client.")
    timeout: float = Field(default=600.0, gt=0, description="Seconds per request.")
    max_retries: int = Field(default=4, ge=0, description="Retries on 429, 5xx, timeouts, lost connections.")
    retry_base_delay: float = Field(default=1.0, ge=0, description="First backoff in seconds; doubles, with jitter.")
    retry_max_delay: float = Field(default=30.0, ge=0, description="Cap on one backoff (Retry-After is honoured).")
    structured_output: Literal["auto", "json_schema", "json_object", "text"] = Field(
        default="auto",
        description=(
            "json_schema: OpenAI-style constrained output; json_object: llama.cpp-style (type json_object + schema); "
            "text: extract JSON from prose; auto: try json_schema, fall back to text if the endpoint rejects it."
        ),
    )

    def shaping_dump(self) -> dict:
        """The fields that change what the model answers (for experiment fingerprints): not the endpoint's
        address or key, not limits, retries or prices."""
        return self.model_dump(
            include={"model_provider": {"type": True, "model": True}, "model_settings": True, "structured_output": True}
        )


class ToolkitConfig(StrictModel):
    name: Literal["python_executor", "search"]
    timeout: float = Field(default=30.0, gt=0)
    memory_mb: int = Field(default=1024, gt=0)
    max_output_chars: int = Field(default=4000, gt=0)
    sandbox: Literal["bwrap", "none"] = Field(
        default="bwrap",
        description="python_executor: bwrap (no network, no host files, own PID namespace) or none (UNSAFE: "
        "the code runs as you, with your files and network).",
    )
    max_processes: int = Field(default=64, gt=0, description="python_executor: processes one call may run.")
    disk_mb: int = Field(default=64, gt=0, description="python_executor: size of its private /work and /tmp.")


class AgentConfig(StrictModel):
    name: str = "agent"
    instructions: str = "You are a helpful assistant."
    model: ModelConfig = ModelConfig()
    toolkits: list[ToolkitConfig] = []
    max_turns: int = Field(default=20, gt=0)
    experience_placement: Literal["system", "user"] = "system"
    experiences: dict[str, str] = Field(default_factory=dict, description="id -> text, injected by one function.")

    def shaping_dump(self) -> dict:
        return self.model_dump(exclude={"model"}) | {"model": self.model.shaping_dump()}


class DataConfig(StrictModel):
    dataset: str
    limit: int | None = Field(default=None, gt=0)


class EvalConfig(StrictModel):
    exp_id: ExpId = "default"
    data: DataConfig
    agent: AgentConfig = AgentConfig()
    # The verify function: a file in utu/verify/ + a function name, a path, or a dotted name.
    verify_filename: str = "math.py"
    verify_func_name: str = "verify_func"
    verify_timeout: float = Field(default=30.0, gt=0, description="Seconds before a verifier is abandoned.")
    timeout_score: float = Field(default=0.0, ge=0, le=1, description="Reward when the verifier fails.")
    judge_model: ModelConfig | None = None
    concurrency: int = Field(default=16, gt=0)
    pass_k: int = Field(default=1, gt=0)
    task_timeout: float = Field(default=600.0, gt=0)
    max_attempt_retries: int = Field(default=2, ge=0)
    max_failed_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="Share of attempts that may fail (after their retries) before the run counts as failed.",
    )


class PracticeArguments(StrictModel):
    """Knobs of Training-Free GRPO (names as in Youtu-Agent)."""

    epochs: int = Field(default=1, gt=0)
    batch_size: int = Field(default=8, gt=0)
    grpo_n: int = Field(default=5, gt=0, description="Group size G: attempts per question.")
    rollout_concurrency: int = Field(default=16, gt=0)
    rollout_temperature: float = Field(default=0.7, ge=0, le=2)
    task_timeout: float = Field(default=600.0, gt=0)
    shuffle_data: bool = True
    seed: int = 42
    restart_step: int | None = Field(default=None, ge=0)
    agent_objective: str = "Solve the problem correctly."
    learning_objective: str = "Learn reusable strategies that make the agent answer correctly."
    given_ground_truth: bool = True
    num_experiences_per_query: int = Field(default=2, gt=0)
    max_experiences: int | None = Field(default=None, gt=0)
    learner_model: ModelConfig | None = None
    summary_token_budget: int = Field(default=4000, gt=0)
    do_eval: bool = False
    eval_strategy: Literal["epoch", "steps"] = "epoch"
    eval_steps: int = Field(default=1, gt=0)


class DataArguments(StrictModel):
    practice_dataset_name: str
    rollout_data_truncate: int | None = Field(default=None, gt=0)
    eval_data_truncate: int | None = Field(default=None, gt=0)


class TrainingFreeGRPOConfig(StrictModel):
    exp_id: ExpId = "practice"
    practice: PracticeArguments = PracticeArguments()
    data: DataArguments
    evaluation: EvalConfig
