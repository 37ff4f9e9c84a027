"""The composition root: everything a run needs, built from its config in one place.

Commands, benchmarks and Python users call these instead of wiring clients, verifier, agent and store by
hand. Every client is checked with a preflight call before any work and closed with the `AsyncExitStack`
it is entered into.
"""

from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from utu.agents import Agent
from utu.config.models import AgentConfig, EvalConfig, ModelConfig
from utu.db.engine import Database
from utu.db.experiments import (
    check_kind,
    check_resumable,
    check_row_owner,
    delete_rows,
    forget_experiment,
    register_experiment,
)
from utu.db.leases import check_free, experiment_lease
from utu.errors import ConfigError
from utu.eval.runner import EvalRunner
from utu.llm.client import LLMClient
from utu.llm.factory import make_client
from utu.llm.usage import UsageTracker
from utu.tools import open_toolkits
from utu.verify import Verifier, load_verifier, warm_up


@dataclass(frozen=True)
class Claim:
    """What a run claims of the database: its experiment (of `kind`), the fingerprint of the knobs that shape its
    results, the attempt rows it writes (`row_ids`, and any experiment id starting with one of `row_prefixes`), and
    whether it forgets what the experiment stored (`fresh`)."""

    exp_id: str
    kind: str
    shaping: dict
    row_ids: list[str] = field(default_factory=list)
    fresh: bool = False
    row_prefixes: tuple[str, ...] = ()


async def claim_experiment(stack: AsyncExitStack, db: Database, claim: Claim) -> None:
    """Make `claim.exp_id` this run's: take its lease (held until `stack` closes), refuse an experiment of another
    kind and attempt rows that another experiment owns, forget everything when fresh, and record or check the
    fingerprint of the knobs that shape its results."""
    await stack.enter_async_context(experiment_lease(db, claim.exp_id))
    await check_kind(db, claim.exp_id, claim.kind)
    await check_row_owner(db, claim.row_ids, claim.exp_id, claim.row_prefixes)
    if claim.fresh:
        await forget_experiment(db, claim.exp_id)
        await delete_rows(db, claim.exp_id)
    await register_experiment(db, claim.exp_id, claim.kind, claim.shaping)


async def check_claim(db: Database, claim: Claim) -> None:
    """What `claim_experiment` would refuse, refused, with nothing taken or written (practice's `--plan`)."""
    await check_free(db, claim.exp_id)
    await check_kind(db, claim.exp_id, claim.kind)
    await check_row_owner(db, claim.row_ids, claim.exp_id, claim.row_prefixes)
    if not claim.fresh:
        await check_resumable(db, claim.exp_id, claim.kind, claim.shaping)


def budget(max_cost: float | None, *models: ModelConfig | None) -> UsageTracker:
    """The run's usage tracker, stopping at `max_cost`; a budget no model has a price for is refused."""
    priced = [m for m in models if m is not None and (m.pricing.input_per_million or m.pricing.output_per_million)]
    if max_cost is not None and not priced:
        raise ConfigError(
            "max_cost: no model of this run has a price, so nothing would be counted against it: set pricing"
            " (UTU_LLM_PRICE_INPUT / UTU_LLM_PRICE_OUTPUT, or the model's pricing in its config)"
        )
    return UsageTracker(max_cost=max_cost)


async def open_client(
    stack: AsyncExitStack, config: ModelConfig, usage: UsageTracker | None = None, env_prefix: str = "UTU_LLM"
) -> LLMClient:
    """A client for `config`, closed with `stack`, whose endpoint answered a preflight call."""
    client = await stack.enter_async_context(make_client(config, usage, env_prefix=env_prefix))
    await client.preflight()
    return client


async def open_judge(stack: AsyncExitStack, config: EvalConfig, usage: UsageTracker | None = None) -> LLMClient | None:
    if config.judge_model is None:
        return None
    judge = config.judge_model
    if config.judge_concurrency:
        judge = judge.model_copy(update={"concurrency": config.judge_concurrency})
    return await open_client(stack, judge, usage, env_prefix="JUDGE_LLM")


async def build_eval(stack: AsyncExitStack, config: EvalConfig, db: Database) -> EvalRunner:
    """An evaluation runner: the agent with its tools, the verifier with its judge."""
    verify = load_verifier(config.verify_filename, config.verify_func_name)  # before any client starts
    warm_up(verify)  # while the clients connect and the first rollouts run
    usage = budget(config.max_cost, config.agent.model, config.judge_model)
    client = await open_client(stack, config.agent.model, usage)
    judge = await open_judge(stack, config, usage)
    verifier = Verifier(verify, config.verify_timeout, config.timeout_score, llm=judge)
    agent = await open_agent(stack, config.agent, client)
    return EvalRunner(config, db, agent, verifier)


async def open_agent(
    stack: AsyncExitStack,
    config: AgentConfig,
    client: LLMClient,
    *,
    run_dir: Path | None = None,
    restart_step: int | None = None,
) -> Agent:
    """The agent with its toolkits (servers closed with `stack`) and its router, if the config names one
    (`run_dir`: practice's folder, where the router resumes, from before `restart_step` if given, and saves;
    without it the router is frozen)."""
    toolkits = await open_toolkits(stack, config.toolkits, llm=client)
    if config.tool_router is None:
        return Agent(config, client, toolkits)
    try:
        from utu.router.routing import open_router
    except ImportError as e:
        raise ConfigError(f"tool_router needs torch ({e}): pip install -e '.[rl]'") from None
    tools = [s["function"]["name"] for toolkit in toolkits for s in toolkit.schemas()]
    router = await open_router(config.tool_router, tools, run_dir=run_dir, restart_step=restart_step)
    return Agent(config, client, toolkits, router)
