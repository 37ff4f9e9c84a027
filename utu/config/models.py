"""Pydantic models of every config. Unknown keys are errors, so a typo never goes unnoticed."""

import functools
import logging
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import JsonDict

from utu.config import youtu
from utu.names import NAME_RULE, is_plain_name


def _plain_name(value: str) -> str:
    if not is_plain_name(value):
        raise ValueError(f"not a plain name ({NAME_RULE})")
    return value


# A name that becomes a folder or a database key (utu/names.py): an experiment id (runs/<exp_id>/), and a data set
# name, as upload_dataset.py accepts it (one that could never be uploaded is refused at load, not after a message
# that tells the user to upload it).
PlainName = Annotated[str, AfterValidator(_plain_name)]
ExpId = PlainName
DatasetName = PlainName


def _some_text(value: str) -> str:
    if not value.strip():
        raise ValueError("an experience with no text; remove it or write it")
    return value


ExperienceText = Annotated[str, AfterValidator(_some_text)]  # as practice.init_library reads one


# Every attempt of a run is a row held in memory until it is judged (about 1 KB with its task): more than this is a
# typo's (K=100000 on 20 questions grew by 75 MiB a second), not a run; a larger evaluation runs in parts.
MAX_ATTEMPTS = 1_000_000


def check_run_size(
    questions: int, k: int, what: str = "", remedy: str = "lower K, or evaluate in parts (--offset, --limit)"
) -> None:
    """A run (`what`) of `questions` × `k` attempts, or a ValueError that says how many and what to do."""
    if questions * k > MAX_ATTEMPTS:
        raise ValueError(
            f"{what}{questions} questions × K={k} = {questions * k:,} attempts, more than a run takes "
            f"({MAX_ATTEMPTS:,}): {remedy}"
        )


class StrictModel(BaseModel):
    # (a setting of inf or nan is no setting: an infinite learning rate wrote NaN weights into a checkpoint)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


def knob(default: Any = ..., description: str = "", *, shapes: bool = True, source: str | None = None, **bounds: Any):
    """A config field with the facts every derived view needs: its description (`--help`, the knob
    tables), whether it changes what a run computes (`shapes`: experiment fingerprints; a resumed run may
    change the others) and, for knobs from a paper or a peer, where it comes from."""
    extra: JsonDict = {"shapes_results": shapes} | ({"source": source} if source else {})
    if callable(default):  # a class or factory: each config gets its own default value
        return Field(default_factory=default, description=description, json_schema_extra=extra, **bounds)
    return Field(default, description=description, json_schema_extra=extra, **bounds)


def shapes_results(model: type[BaseModel], name: str) -> bool:
    extra = model.model_fields[name].json_schema_extra
    return not isinstance(extra, dict) or bool(extra.get("shapes_results", True))


def shaping_dump(value: Any) -> Any:
    """The part of a config that changes what a run computes, for experiment fingerprints: every field
    whose `knob` says `shapes`, recursively."""
    if isinstance(value, BaseModel):
        cls = type(value)
        return {name: shaping_dump(getattr(value, name)) for name in cls.model_fields if shapes_results(cls, name)}
    if isinstance(value, list):
        return [shaping_dump(v) for v in value]
    if isinstance(value, dict):
        return {k: shaping_dump(v) for k, v in value.items()}
    return value


class ModelProvider(StrictModel):
    """Where the LLM lives. `base_url: null` means the embedded local model."""

    type: Literal["chat.completions", "responses"] = knob(
        "chat.completions", "The API: chat.completions or responses (env UTU_LLM_TYPE)."
    )
    model: str | None = knob(None, "The model name the endpoint knows (env UTU_LLM_MODEL).")
    base_url: str | None = knob(
        None,
        "OpenAI-compatible endpoint, usually ending in /v1; null: the embedded model (env UTU_LLM_BASE_URL).",
        shapes=False,
    )
    api_key: str | None = knob(None, "The key (env UTU_LLM_API_KEY); never stored or logged.", shapes=False)
    api_version: str | None = knob(
        None,
        "Azure OpenAI: the API version, e.g. 2024-10-21; base_url is then the Azure endpoint and model the "
        "deployment (env UTU_LLM_API_VERSION).",
        shapes=False,
    )
    local_model: str | None = knob(
        None,
        "With base_url null: the embedded model to start, e.g. qwen2.5-coder-1.5b (env UTU_LOCAL_MODEL); "
        "null: qwen2.5-coder-0.5b.",
    )

    @field_validator("model", "base_url", "api_key", "api_version", "local_model", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object) -> object:
        # `${oc.env:VAR,null}` gives "" when VAR is set but empty (a common .env line); treat it as unset. A
        # space or newline around a value (pasted into .env) is not part of it.
        return (v.strip() or None) if isinstance(v, str) else v

    @field_validator("type", mode="before")
    @classmethod
    def _known_type_or_the_default(cls, v: object) -> object:
        if isinstance(v, str) and v.strip().lower() == "litellm":  # Youtu-Agent's configs and .env may say so
            raise ValueError("litellm is not built in: run a LiteLLM proxy and use chat.completions with its URL")
        return (v.strip() or "chat.completions") if isinstance(v, str) else v  # Youtu's .env: JUDGE_LLM_TYPE=


class ModelSettings(StrictModel):
    """Sampling settings sent with every request."""

    temperature: float | None = knob(None, "Sampling temperature; null: the endpoint's default.", ge=0, le=2)
    top_p: float | None = knob(None, "Nucleus sampling; null: the endpoint's default.", gt=0, le=1)
    max_tokens: int | None = knob(None, "Cap on the reply's tokens; null: the endpoint's default.", gt=0)
    seed: int | None = knob(None, "Sampling seed, where the endpoint honours one.")
    extra_body: dict[str, Any] = knob(
        dict, "More request fields, sent as they are (top_k, min_p, parallel_tool_calls, ...)."
    )


class Pricing(StrictModel):
    """Price in dollars per million tokens; used for cost accounting only."""

    input_per_million: float = knob(0.0, "Dollars per million prompt tokens (env UTU_LLM_PRICE_INPUT).", ge=0)
    output_per_million: float = knob(0.0, "Dollars per million completion tokens (env UTU_LLM_PRICE_OUTPUT).", ge=0)


class ModelConfig(StrictModel):
    @model_validator(mode="before")
    @classmethod
    def _youtu_format(cls, data: Any) -> Any:
        settings = data.get("model_settings") if isinstance(data, dict) else None
        youtu_keys = ("model_params", "termination_max_tokens")
        youtu_settings = isinstance(settings, dict) and bool(set(settings) & youtu.SETTINGS_KEYS)
        if isinstance(data, dict) and (any(k in data for k in youtu_keys) or youtu_settings):
            return youtu.model_from_youtu(data)
        return data

    model_provider: ModelProvider = knob(ModelProvider, "Endpoint, model and key.")
    model_settings: ModelSettings = knob(ModelSettings, "Sampling settings sent with every request.")
    pricing: Pricing = knob(Pricing, "For cost accounting only.", shapes=False)
    concurrency: int = knob(
        16,
        "Requests in flight at once, per client: the endpoint's bound, shared by every attempt, learner and "
        "judge call on this client. Attempts in flight (an eval's `concurrency`, practice's `rollout_concurrency`) "
        "are a second bound, on questions worked at once: set this one to what the endpoint allows, that one at "
        "or above it.",
        shapes=False,
        gt=0,
    )
    requests_per_minute: int | None = knob(
        None,
        "Requests started per minute, at most (your plan's RPM): the rate is shaped before a 429 can come; "
        "null: no limit.",
        shapes=False,
        gt=0,
    )
    tokens_per_minute: int | None = knob(
        None,
        "Tokens per minute, at most (your plan's TPM), counted before each request as its prompt's characters "
        "/ 4 plus max_tokens; null: no limit.",
        shapes=False,
        gt=0,
    )
    timeout: float = knob(600.0, "Seconds per request.", shapes=False, gt=0)
    max_retries: int = knob(4, "Retries on 429, 5xx, timeouts, lost connections.", shapes=False, ge=0)
    retry_base_delay: float = knob(1.0, "First backoff in seconds; doubles, with jitter.", shapes=False, ge=0)
    retry_max_delay: float = knob(30.0, "Cap on one backoff (Retry-After is honoured).", shapes=False, ge=0)
    structured_output: Literal["auto", "json_schema", "json_object", "text"] = knob(
        "auto",
        "json_schema: OpenAI-style constrained output; json_object: llama.cpp-style (type json_object + schema); "
        "text: extract JSON from prose; auto: probe once, json_schema, else json_object, else text.",
    )

    @model_validator(mode="after")
    def _one_reply_fits_a_minute(self) -> "ModelConfig":
        cap, limit = self.model_settings.max_tokens, self.tokens_per_minute
        if cap and limit and cap >= limit:  # every request would wait minutes for its share, without a word
            raise ValueError(
                f"tokens_per_minute ({limit}) is not above model_settings.max_tokens ({cap}): every request would"
                " wait a minute or more; raise tokens_per_minute to your plan's TPM or lower max_tokens"
            )
        return self


class ToolkitConfig(StrictModel):
    name: Literal["python_executor", "search", "function", "mcp"] = knob(
        description="The toolkit: python_executor, search, function (your own Python, see `function`) or mcp (an "
        "MCP server, see `command`/`url`).",
    )
    function: str | None = knob(
        None,
        "With name function: 'module.path:function' or 'module.path:Class' (its public methods), run in the "
        "agent's process: name only code you trust.",
    )
    command: list[str] | None = knob(
        None,
        "With name mcp: the stdio server to start with the run, e.g. [python, -m, my_server]; it gets PATH, "
        "HOME and the like, plus `env`, never your API keys.",
    )
    url: str | None = knob(None, "With name mcp: a streamable-HTTP server's endpoint, e.g. http://127.0.0.1:8000/mcp.")
    env: dict[str, str] = knob(
        dict,
        "mcp command: extra environment variables for the server (never stored: they may hold keys).",
        shapes=False,
    )
    headers: dict[str, str] = knob(
        dict,
        "mcp url: HTTP headers, e.g. {Authorization: 'Bearer ${oc.env:MCP_TOKEN}'} (the key from your env; never "
        "stored).",
        shapes=False,
    )
    include: list[str] | None = knob(None, "mcp: offer only these of the server's tools (a missing one is an error).")
    exclude: list[str] = knob(list, "mcp: never offer these of the server's tools.")
    timeout: float = knob(30.0, "Seconds per tool call.", gt=0)
    memory_mb: int = knob(1024, "python_executor: address space per process, in MB.", gt=0)
    max_output_chars: int = knob(4000, "Tool output longer than this is cut in the middle.", gt=0)
    sandbox: Literal["bwrap", "none"] = knob(
        "bwrap",
        "python_executor: bwrap (no network, no host files, own PID namespace) or none (UNSAFE: the code runs as "
        "you, with your files and network).",
    )
    max_processes: int = knob(
        64, "python_executor: processes one call may run (held as a whole by a cgroup where one can be made).", gt=0
    )
    disk_mb: int = knob(
        64,
        "python_executor: size of each of its writable folders (its working directory, /tmp, /dev/shm), in MB.",
        gt=0,
    )

    @model_validator(mode="after")
    def _function_named(self) -> "ToolkitConfig":
        if (self.name == "function") != (self.function is not None):
            raise ValueError("a toolkit of name function needs `function: module.path:name`, and only it takes one")
        if self.name == "mcp" and (self.command is None) == (self.url is None):
            raise ValueError("a toolkit of name mcp needs one of `command: [program, args...]` (stdio) or `url:`")
        mcp_only = (self.command, self.url, self.env, self.headers, self.include, self.exclude)
        if self.name != "mcp" and any(mcp_only):
            raise ValueError("command, url, env, headers, include and exclude belong to toolkits of name mcp")
        if self.command is not None and not self.command:
            raise ValueError("mcp `command` is empty: give the program and its arguments, e.g. [python, server.py]")
        return self


class RouterEmbeddingsConfig(StrictModel):
    base_url: str | None = knob(
        None, "An OpenAI-compatible endpoint serving /embeddings; null: the embedded model's embeddings server."
    )
    model: str | None = knob(None, "The embedding model; with no base_url, an embedded model (default smollm2-135m).")
    api_key: str | None = knob(None, "The endpoint's key, e.g. '${oc.env:EMBED_API_KEY}'.", shapes=False)


class ToolRouterConfig(StrictModel):
    """A learned router (utu/router): before the LLM is called, it chooses which tools the LLM is offered."""

    choices: dict[str, list[str]] | None = knob(
        None,
        "What the router chooses between: name -> the tools the LLM is then offered ([]: none, it answers "
        "alone). null: each of the agent's tools on its own.",
    )
    state: str | None = knob(
        None,
        "A saved router (weights, optimisers, observations) to start from. Evaluation uses it frozen; practice "
        "learns on from it and saves to runs/<exp_id>/tool_router.pt, which the enhanced agent names.",
    )
    embeddings: RouterEmbeddingsConfig = knob(RouterEmbeddingsConfig, "Where the query's features come from.")
    hidden: int = knob(64, "Hidden units of each member's policy network.", gt=0)
    lr: float = knob(0.01, "Adam's learning rate for the policies.", gt=0)
    epochs: int = knob(8, "Passes over a practice step's observations per update.", gt=0)
    clip: float = knob(0.2, "PPO's clip range of the probability ratio.", gt=0, lt=1)
    seed: int = knob(0, "Seeds the networks' initial weights and the exploration.")


class AgentConfig(StrictModel):
    @model_validator(mode="before")
    @classmethod
    def _youtu_format(cls, data: Any) -> Any:
        return youtu.agent_from_youtu(data) if youtu.is_youtu_agent(data) else data

    name: str = knob("agent", "A name for the agent, shown in traces.")
    instructions: str = knob("You are a helpful assistant.", "The system prompt (the library goes after it).")
    model: ModelConfig = knob(ModelConfig, "The agent's LLM.")
    toolkits: list[ToolkitConfig] = knob(list, "Tools the agent may call; [] sends no tools at all.")
    max_turns: int = knob(20, "Model turns before a run stops (recorded as stop reason max_turns).", gt=0)
    text_tool_calls: bool = knob(
        True,
        "Read a reply that is only a tool call written as JSON ({name, arguments}, bare, fenced or in "
        "<tool_call> tags) as that call: small local models write them so.",
    )
    experience_placement: Literal["system", "user"] = knob(
        "system", "Where the library goes: after the system prompt, or before the question."
    )
    experiences: dict[str, ExperienceText] = knob(dict, "The library, id -> text, placed by one function.")
    tool_router: ToolRouterConfig | None = knob(
        None, "A learned router that picks the tools the LLM is offered for each question (docs/tools.md)."
    )


class DataConfig(StrictModel):
    dataset: DatasetName = knob(description="A data set in the database (bundled sets load themselves).")
    limit: int | None = knob(None, "Only its first N questions (by index).", gt=0)
    offset: int = knob(0, "Skip its first N questions (by index) before taking `limit`.", ge=0)
    type: Literal["single", "mixed"] = knob(
        "single",
        "Youtu-Agent's data set type; a data set here is one name whatever its sources, so both mean the same.",
        shapes=False,
    )
    question_field: Literal["question"] = knob(
        "question",
        "Youtu-Agent's; questions are always the rows' `question` (rename the field in your JSONL).",
        shapes=False,
    )
    gt_field: Literal["answer"] = knob(
        "answer",
        "Youtu-Agent's; answers are always the rows' `answer` (rename the field in your JSONL).",
        shapes=False,
    )


class EvalConfig(StrictModel):
    exp_id: ExpId = knob("default", "The experiment id: attempts, metrics and runs/<exp_id>/.", shapes=False)
    data: DataConfig = knob(description="The questions.")
    agent: AgentConfig = knob(AgentConfig, "The agent under evaluation.")
    verify_filename: str = knob(
        "math.py", "The verify function's file in utu/verify/, a path to your own file, or a dotted module name."
    )
    verify_func_name: str = knob("verify_func", "The function in that file.")
    verify_timeout: float = knob(30.0, "Seconds before a verifier is abandoned.", shapes=False, gt=0)
    timeout_score: float = knob(0.0, "Reward when the verifier fails or times out.", ge=0, le=1)
    judge_model: ModelConfig | None = knob(None, "The judge LLM of LLM-graded verifiers (env JUDGE_LLM_*).")
    judge_concurrency: int | None = knob(
        None,
        "Judge requests in flight at once (Youtu-Agent's key); none: judge_model.concurrency.",
        shapes=False,
        gt=0,
    )
    eval_method: str | None = knob(
        None,
        "Youtu-Agent's; accepted for compatibility: here the verify function decides how answers are judged "
        "(a warning says so when it is set).",
        shapes=False,
    )
    concurrency: int = knob(
        16,
        "Attempts in flight at once (each sends its requests through the model's `concurrency`).",
        shapes=False,
        gt=0,
    )
    max_cost: float | None = knob(
        None,
        "Dollars this command may spend on LLM calls (priced by each model's `pricing`): a call whose worst case "
        "(with max_tokens) could pass it is not sent, and the run stops with exit code 3, its work saved; null: no "
        "limit.",
        shapes=False,
        gt=0,
    )
    pass_k: int = knob(1, "Attempts per question (K).", gt=0)
    task_timeout: float = knob(600.0, "Seconds before an attempt is abandoned (then retried).", shapes=False, gt=0)
    max_attempt_retries: int = knob(
        2, "Retries of a failed attempt before it is recorded as failed.", shapes=False, ge=0
    )
    max_failed_share: float = knob(
        0.0,
        "Share of attempts that may fail (after their retries) before the run counts as failed.",
        shapes=False,
        ge=0,
        le=1,
    )

    @field_validator("eval_method")
    @classmethod
    def _say_eval_method_is_unused(cls, v: str | None) -> str | None:
        if v:
            _say_once(f"eval_method {v!r} is Youtu-Agent's: utu judges answers with verify_filename/verify_func_name")
        return v


@functools.cache
def _say_once(warning: str) -> None:
    """A config is validated more than once (composed, then with the command's flags): one warning each."""
    logging.getLogger(__name__).warning(warning)


PAPER = "Training-Free GRPO (arXiv 2510.08191)"


class ValidationConfig(StrictModel):
    """Validation-gated updates: a step's new library replaces the current one only if, on the same validation
    questions, its Mean@K is not worse than the current library's by more than `max_drop` (paired by question),
    and, if it holds more experiences than the current one, better by more than `min_gain_to_grow`: a sentence
    that does not measurably help only costs prompt tokens and risks what the validation questions did not show."""

    dataset: DatasetName = knob(
        description="The validation questions: another data set, or the practice set with an "
        "offset past the practised questions (a held-out slice)."
    )
    offset: int = knob(0, "Skip its first N questions.", ge=0)
    size: int = knob(20, "Validation questions.", gt=0)
    pass_k: int = knob(2, "Attempts per validation question (K).", gt=0)
    max_drop: float = knob(
        0.0, "Apply an update only if mean(new - current) over the questions is at least -max_drop.", ge=0, le=1
    )
    min_gain_to_grow: float | None = knob(
        0.0,
        "An update that leaves the library with more experiences must also raise mean(new - current) above "
        "this: on a tie the smaller library stays. null: max_drop alone decides.",
        ge=0,
        lt=1,
    )
    one_by_one: int | None = knob(
        None,
        "When the gate refuses an update that changes several experiences, validate up to this many of the "
        "experiences it adds alone (per step, in the order proposed, as many as max_experiences has room for) and "
        "keep those that pass, together if together they pass, else the one that gained most: a good rule is not "
        "lost beside a bad or trivial one. Its UPDATEs and DELETEs stay refused. null: a refused update is refused "
        "whole.",
        ge=1,
    )


class TopUpConfig(StrictModel):
    """More questions for a step whose groups show too little contrast (all right or all wrong: nothing to
    compare), like DAPO's dynamic sampling: the extra questions come from the practice set past
    `data.rollout_data_truncate`, a different slice each step, so they are never practised twice."""

    min_groups: int = knob(
        description="Groups with contrast (attempts that differ in reward) a step should have.", gt=0
    )
    questions: int = knob(8, "Reserve questions a step with fewer rolls out, once (G attempts each).", gt=0)


class ScreeningConfig(StrictModel):
    """What the library refuses before validation (utu/practice/screening.py): a proposal's shape, its question's
    particulars, a fact stated instead of what to do, and repeats of the library. Measured on the good and junk
    corpora of tests/practice/corpora (`python -m utu.commands.library screen --file F.jsonl`)."""

    enabled: bool = knob(
        True,
        "false: no screening (only exact duplicates of the library are refused); the "
        "validation gate is then the only filter.",
    )
    min_chars: int = knob(15, "Shortest experience, in characters.", ge=1)
    max_chars: int = knob(500, "Longest experience, in characters (Youtu-Agent's run to about 370).", ge=20, le=10_000)
    max_sentences: int = knob(2, "Most sentences in one experience.", ge=1)
    copy_words: int = knob(
        6, "Words of a question in a row that make a copy (a CJK character counts as half a word).", ge=2
    )
    max_particulars: int = knob(
        1,
        "Most particulars of one question an experience may name: its names and its "
        "numbers (a number of 2+ digits, or each of several small ones).",
        ge=0,
    )
    persons_by_verb_form: bool = knob(
        False,
        "A name followed in its question by any verb-like word ('Ravi fills', 'James decides': "
        "-s or -ed), or in the experience by a listed verb, is a person of its story and counts "
        "twice; off: only before a listed verb in its question (screening_words.yaml "
        "person_verbs).",
    )
    object_repeats: int = knob(
        2,
        "A word said this many times in one part of an experience (its condition or title, "
        "or its strategy) and in its question is the object that question counts, retold "
        "('the number of peaches ... the number of peaches'); 0: off.",
        ge=0,
    )
    require_directive: bool = knob(
        True,
        "Refuse an experience that states a fact instead of saying what to "
        "do, in a language with word lists (utu/practice/screening_words.yaml: en, "
        "zh).",
    )
    near_duplicate: float = knob(
        0.8,
        "Word-sequence similarity to an existing experience that makes a duplicate "
        "(also of two strategies, their frame aside).",
        gt=0,
        le=1,
    )
    same_condition_overlap: float = knob(
        0.4, "Under the same condition, the strategy similarity that makes a reworded duplicate.", gt=0, le=1
    )


class PracticeArguments(StrictModel):
    """Knobs of Training-Free GRPO (names as in Youtu-Agent)."""

    epochs: int = knob(
        1,
        "Passes over the practice set; steps = epochs × ⌈questions / batch_size⌉.",
        shapes=False,
        source=PAPER + ": 3",
        gt=0,
    )
    batch_size: int = knob(
        8, "Questions per step; bigger batches learn from more groups per library update.", gt=0, source=PAPER
    )
    grpo_n: int = knob(
        5,
        "Group size G: attempts per question. More show more contrast and cost G× rollouts; 1 learns from single "
        "attempts using the absolute reward (the paper's ablation).",
        gt=0,
        source=PAPER + ": 5",
    )
    rollout_concurrency: int | None = knob(
        None,
        "Attempts in flight at once; none: the evaluation's `concurrency` (see ModelConfig.concurrency for "
        "how the two bounds meet).",
        shapes=False,
        gt=0,
    )
    rollout_temperature: float = knob(
        0.7, "Diversity within a group (evaluation uses the agent's own temperature).", ge=0, le=2, source=PAPER
    )
    task_timeout: float | None = knob(
        None,
        "Seconds before an attempt is abandoned (then retried, then recorded as failed); none: the "
        "evaluation's `task_timeout`.",
        shapes=False,
        gt=0,
    )
    shuffle_data: bool = knob(True, "Shuffle the questions each epoch (batches really differ between epochs).")
    seed: int = knob(42, "Seed of the per-epoch shuffle.")
    restart_step: int | None = knob(
        None, "none: reuse every saved step; N: recompute from step N on; 0: recompute everything.", shapes=False, ge=0
    )
    agent_objective: str = knob("Solve the problem correctly.", "What the agent must do (in every learner prompt).")
    learning_objective: str = knob(
        "Learn reusable strategies that make the agent answer correctly.",
        "What is worth learning (every learner prompt).",
    )
    given_ground_truth: bool = knob(
        True,
        "false: answers and rewards are hidden from the learner (the paper's w/o ground truth ablation).",
        source=PAPER,
    )
    num_experiences_per_query: int = knob(2, "Experiences extracted per group.", gt=0)
    learner_passes: int = knob(
        1,
        "Times the learner compares each group and proposes operations (stages 2-3), as independent samples at its "
        "temperature; every pass's proposals go on to consolidation and the screening, at that many times the "
        "learner's cost per group (with a temperature of 0 the passes are near copies). On the embedded 1.5B, 2 "
        "passes kept more muddled rules and the right one in 2 of 4 replicates against 3 of 4 (docs/results.md).",
        gt=0,
    )
    learner_retries: int = knob(
        0,
        "When the learner proposed changes in a step and every one was refused (by the screening or the validation "
        "gate), it compares the step's groups again (stages 2-5; the summaries are kept), shown each refused text "
        "and why unless `learner_retry_shows_refusals` is false, and the new proposals face the screening and the "
        "gate again, up to this many times (one that repeats, or nearly, a text refused earlier in the step for "
        "what it says is refused before validation). Each retry shows the gate's validation questions one more "
        "update; the held-out evaluation stays the judge.",
        ge=0,
    )
    learner_retry_shows_refusals: bool = knob(
        True,
        "On a second look (`learner_retries`), show the learner each refused text and why, so it looks elsewhere. "
        "false: the second look is a fresh sample of the same comparison (a near copy at temperature 0). The "
        "embedded 1.5B, shown them, copied the first refused text in every group of every second look "
        "(benchmarks/learning/second_look.py); a repeat is refused before validation either way.",
    )
    restate_refused: bool = knob(
        True,
        "A proposal that says what to do and that the screening refuses only for telling its question's story "
        "(its names, numbers or words, the object it counts retold; its answer or the verifier's note in the "
        "condition) "
        "goes back to the learner once, to be restated for any question of its kind; the restatement is "
        "screened again. false: refused as it was.",
    )
    max_experiences: int | None = knob(None, "Cap on the library size; none: no cap.", gt=0)
    learner_model: ModelConfig | None = knob(None, "A separate model for the learner; none: the agent's.")
    max_cost: float | None = knob(
        None,
        "Dollars this command may spend on LLM calls, agent, learner and judge together (priced by each "
        "model's `pricing`): a call whose worst case (with max_tokens) could pass it is not sent, and practice "
        "stops with exit code 3, every finished attempt and step saved (rerun to resume); null: no limit.",
        shapes=False,
        gt=0,
    )
    summary_token_budget: int = knob(4000, "Trajectory tokens shown to the summariser.", gt=0)
    do_eval: bool = knob(False, "Evaluate the current library on the eval set during practice.", shapes=False)
    eval_strategy: Literal["epoch", "steps"] = knob(
        "epoch", "When to evaluate: each epoch or every eval_steps.", shapes=False
    )
    eval_steps: int = knob(1, "With eval_strategy steps: evaluate every N steps.", shapes=False, gt=0)
    validation: ValidationConfig | None = knob(
        None, "Validation-gated updates (see ValidationConfig); none: every step's update is applied."
    )
    screening: ScreeningConfig = knob(
        ScreeningConfig, "What the library refuses before validation (see ScreeningConfig)."
    )
    top_up: TopUpConfig | None = knob(
        None,
        "When fewer of a step's groups have contrast than `min_groups`, roll out `questions` more of the practice "
        "set's reserve in the same step (see TopUpConfig); none: a step learns from what its batch gave.",
    )
    all_lost_groups_per_step: int | None = knob(
        None,
        "Groups whose attempts all lost (the same reward, below 1; none the verifier failed on) that the learner "
        "studies anyway, against the ground truth, per step: the first N in the step's question order, once its "
        "rollouts (and top-up) are done; none: skipped, as in the paper. A small agent that is seldom right gives "
        "few groups with contrast; what all its attempts missed, set against the answer, is what such a group can "
        "teach. Each costs the learner calls of a studied group. Needs given_ground_truth and grpo_n of 2 or more.",
        gt=0,
    )
    init_library: str | None = knob(
        None,
        "Start from a library learned before: EXP_ID@STEP (STEP: a number, best or last) or a YAML/JSON file "
        "(an agent with experiences, or id -> text); none: the agent config's own experiences (empty for a "
        "baseline agent).",
    )


class DataArguments(StrictModel):
    practice_dataset_name: DatasetName = knob(description="The practice set (bundled sets load themselves).")
    rollout_data_truncate: int | None = knob(None, "Practise on its first N questions only.", gt=0)
    eval_data_truncate: int | None = knob(
        None, "Evaluate during practice on the first N eval questions.", shapes=False, gt=0
    )


class TrainingFreeGRPOConfig(StrictModel):
    @model_validator(mode="before")
    @classmethod
    def _youtu_format(cls, data: Any) -> Any:
        return youtu.practice_from_youtu(data) if isinstance(data, dict) else data

    exp_id: ExpId = knob("practice", "The experiment id: steps, library, runs/<exp_id>/.", shapes=False)
    practice: PracticeArguments = knob(PracticeArguments, "The knobs of Training-Free GRPO.")
    data: DataArguments = knob(description="The practice data.")
    evaluation: EvalConfig = knob(description="The agent, its verifier and the eval set (an eval config).")
    export_agent: ExpId | None = knob(
        None,
        "Also write the enhanced agent as configs/agents/practice/<name>.yaml, the agent an eval config "
        "names (math_reasoning: math_practice_agent); null: <exp_id>_agent, as Youtu-Agent does, where there is a "
        "configs/ folder. A file there "
        "that practice did not write is never replaced.",
        shapes=False,
    )

    @model_validator(mode="after")
    def _knobs_fit_together(self) -> "TrainingFreeGRPOConfig":
        if self.practice.top_up and not self.data.rollout_data_truncate:
            raise ValueError(
                "practice.top_up needs data.rollout_data_truncate: its reserve is the practice set past those questions"
            )
        if self.practice.top_up and self.practice.grpo_n < 2:
            raise ValueError("practice.top_up needs grpo_n of 2 or more: a group of one attempt has no contrast")
        all_lost = "practice.all_lost_groups_per_step"
        if self.practice.all_lost_groups_per_step and not self.practice.given_ground_truth:
            raise ValueError(f"{all_lost} needs given_ground_truth: without it, groups of equal rewards are studied")
        if self.practice.all_lost_groups_per_step and self.practice.grpo_n < 2:
            raise ValueError(f"{all_lost} needs grpo_n of 2 or more: a lone attempt is studied anyway")
        p, top_up = self.practice, self.practice.top_up.questions if self.practice.top_up else 0
        check_run_size(p.batch_size + top_up, p.grpo_n, "a step of ", "lower practice.grpo_n or batch_size")
        if p.validation:
            check_run_size(p.validation.size, p.validation.pass_k, "a validation of ", "lower its pass_k or size")
        return self

    # Practice's rollouts are the evaluation's attempts: unset, their bounds are the evaluation's (read here,
    # not written into `practice`, so a copied or shared PracticeArguments keeps meaning "unset").
    @property
    def rollout_concurrency(self) -> int:
        return self.practice.rollout_concurrency or self.evaluation.concurrency

    @property
    def task_timeout(self) -> float:
        return self.practice.task_timeout or self.evaluation.task_timeout
