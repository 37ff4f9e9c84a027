"""The agent's side of the router: what the LLM is offered, the decision on the result, the config's checks."""

import json

import openai
import pytest
import torch

from tests.conftest import client_for
from utu.agents import Agent
from utu.config import AgentConfig, ToolkitConfig
from utu.config.models import ToolRouterConfig
from utu.errors import ConfigError, LLMError
from utu.llm.stub import StubScript
from utu.router.embeddings import MAX_BYTES, Embedder
from utu.router.router import Router, RouterError
from utu.router.routing import AgentRouter, route_choices
from utu.tools import build_toolkits

UNIT_TOOLS = ToolkitConfig(name="function", function="utu.tools.unit_tools:UnitTools")
CALL = {"id": "c", "type": "function", "function": {"name": "convert_units", "arguments": json.dumps({"value": 1})}}


def routed_agent(server, choices: dict[str, list[str]]) -> Agent:
    config = AgentConfig(name="a", toolkits=[UNIT_TOOLS])
    client = client_for(server)
    embedder = Embedder(openai.AsyncOpenAI(base_url=server.base_url, api_key="k"), "stub")
    router = AgentRouter(Router(list(choices), 64), embedder, choices)
    return Agent(config, client, build_toolkits(config.toolkits), router)


def offered(request: dict) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


async def test_the_llm_is_offered_only_the_chosen_tools_and_a_call_to_another_is_unknown(stub):
    server = stub(StubScript(replies=[{"tool_calls": [CALL]}, "\\boxed{1}"]))
    agent = routed_agent(server, {"rough": ["quick_convert"], "exact": ["convert_units"]})
    result = await agent.run("Convert 1 mile to km.")
    assert result.route.choice == "rough"  # untrained: the first choice
    assert offered(server.requests[0]) == ["quick_convert"]
    assert "unknown tool 'convert_units'" in result.trajectory[3]["content"]  # it was not offered
    assert server.embedding_requests == 1


async def test_an_empty_choice_sends_no_tools_and_explicit_tools_bypass_the_router(stub):
    server = stub(StubScript(replies=["\\boxed{1}"]))
    agent = routed_agent(server, {"alone": [], "exact": ["convert_units"]})
    result = await agent.run("Convert 1 mile to km.")
    assert result.route.choice == "alone" and "tools" not in server.requests[0]
    messages = [{"role": "user", "content": "Convert 1 mile to km."}]
    direct = await agent.run_messages(messages, tools=agent.tools.only(["calculator"]))
    assert direct.route is None and offered(server.requests[1]) == ["calculator"]


async def test_exploring_attempts_at_one_question_take_distinct_choices(stub):
    server = stub(StubScript(replies=["\\boxed{1}"]))
    agent = routed_agent(server, {"a": [], "b": ["convert_units"], "c": ["calculator"]})
    results = [await agent.run("Convert 2 feet to m.", explore=True) for _ in range(3)]
    assert sorted(r.route.choice for r in results) == ["a", "b", "c"]
    agent.router.observe(results[0].route, 1.0)
    assert [o.reward for o in agent.router.router.buffer] == [1.0]


def test_the_config_s_choices_are_checked_against_the_agent_s_tools():
    tools = ["convert_units", "quick_convert"]
    assert route_choices(ToolRouterConfig(), tools) == {t: [t] for t in tools}
    with pytest.raises(ConfigError, match="names teleport, which the agent's toolkits do not offer"):
        route_choices(ToolRouterConfig(choices={"a": ["teleport"], "b": []}), tools)
    with pytest.raises(ConfigError, match="needs two choices or more"):
        route_choices(ToolRouterConfig(choices={"a": ["convert_units"]}), tools)
    with pytest.raises(ConfigError, match="the agent has 1 tool"):
        route_choices(ToolRouterConfig(), ["convert_units"])
    with pytest.raises(ConfigError, match="only and also offer the same tools"):
        route_choices(ToolRouterConfig(choices={"only": ["a", "b"], "also": ["b", "a"], "none": []}), ["a", "b"])


async def test_an_attempt_judged_before_a_stop_still_teaches_the_router(stub):
    server = stub(StubScript(replies=["\\boxed{1}"]))
    agent = routed_agent(server, {"a": [], "b": ["convert_units"]})
    decision = (await agent.run("Convert 2 feet to m.", explore=True)).route
    agent.router.router.buffer.clear()  # as after a stop: only the attempt's record is left
    await agent.router.observe_recorded("Convert 2 feet to m.", json.loads(json.dumps(decision.summary())), 1.0)
    (observation,) = agent.router.router.buffer
    assert (observation.index, observation.member, observation.reward) == (decision.index, decision.member, 1.0)
    assert observation.log_prob == decision.log_prob  # exact, through the record's JSON
    agent.router.router.buffer.clear()
    older = {k: v for k, v in json.loads(json.dumps(decision.summary())).items() if k != "log_prob"}
    await agent.router.observe_recorded("Convert 2 feet to m.", older, 1.0)  # a record from before log_prob
    assert agent.router.router.buffer[0].log_prob == pytest.approx(decision.log_prob, abs=1e-3)
    agent.router.router.buffer.clear()
    frozen = (await agent.run("Convert 3 feet to m.")).route
    await agent.router.observe_recorded("Convert 3 feet to m.", frozen.summary(), 1.0)
    assert not agent.router.router.buffer  # a frozen decision teaches nothing


class BrokenEndpoint:
    """An OpenAI client whose embeddings come back as `vector`."""

    def __init__(self, vector):
        self.base_url, self.inputs = "http://broken", []
        item = type("Item", (), {"index": 0, "embedding": vector})
        reply = type("Reply", (), {"data": [item]})

        async def create(**request):
            self.inputs += request["input"]
            return reply

        self.embeddings = type("Embeddings", (), {"create": staticmethod(create)})


async def test_a_broken_embedding_is_an_error_not_a_feature():
    for vector in ([float("nan"), 1.0], [], [float("inf")]):
        with pytest.raises(LLMError, match="a broken vector"):
            await Embedder(BrokenEndpoint(vector), "m").one("q")
    unnumbered = BrokenEndpoint([1.0, 0.0])
    reply = await unnumbered.embeddings.create(input=[])
    reply.data[0].index = None
    with pytest.raises(LLMError, match=r"asked for 1, the endpoint gave 1 \(indices \[None\]\)"):
        await Embedder(unnumbered, "m").one("q")
    reply.data = [type("Item", (), {"index": 0, "embedding": [1.0]}), type("Item", (), {"index": None})]
    with pytest.raises(LLMError, match=r"gave 2 \(indices \[0, None\]\)"):
        await Embedder(unnumbered, "m").one("q")
    endpoint = BrokenEndpoint([1.0, 0.0])
    embedder = Embedder(endpoint, "m")
    assert len(await embedder.one("x " * 50_000)) == 2
    assert len(endpoint.inputs[0]) == MAX_BYTES  # a long question's start: within the server's context
    await embedder.one("数" * 5_000)
    assert endpoint.inputs[-1] == "数" * (MAX_BYTES // 3)  # whole characters, at most MAX_BYTES of UTF-8
    await embedder.one("x " * 60_000)  # the same start: the cached embedding, not another request
    assert len(endpoint.inputs) == 2 and len(embedder._cache) == 2


def test_resuming_deletes_later_snapshots_only_once_the_earlier_router_loads(tmp_path):
    from utu.router.routing import resume, snapshot

    config = ToolRouterConfig(choices={"a": [], "b": []})
    for step in range(4):
        Router(["a", "b"], 8).save(snapshot(tmp_path, step))
    Router(["a", "b"], 8).save(tmp_path / "tool_router.pt")
    with pytest.raises(RouterError, match="saved for choices"):  # the config added a choice
        resume(tmp_path, 2, lambda: Router(["a", "b", "c"], 8), {"a": [], "b": [], "c": []}, 8, config)
    assert all(snapshot(tmp_path, step).exists() for step in range(4))
    resume(tmp_path, 2, lambda: Router(["a", "b"], 8), {"a": [], "b": []}, 8, config)
    assert [snapshot(tmp_path, step).exists() for step in range(4)] == [True, True, False, False]


def test_fresh_keeps_the_run_s_own_state_when_the_config_starts_from_it(tmp_path):
    from utu.router.routing import load, resume

    own = tmp_path / "tool_router.pt"
    Router(["a", "b"], 8, seed=3).save(own)
    config = ToolRouterConfig(choices={"a": [], "b": []}, state=str(own))
    choices = {"a": [], "b": []}
    router = resume(tmp_path, 0, lambda: load(own, choices, 8, config), choices, 8, config)
    assert router.seed == 3 and own.exists()


async def test_a_stop_between_the_snapshot_and_the_state_file_learns_the_step_once(tmp_path, stub):
    from utu.router.routing import resume, snapshot

    config = ToolRouterConfig(choices={"a": [], "b": []})
    stale, learned = Router(["a", "b"], 8), Router(["a", "b"], 8)
    learned.updates = 1
    stale.save(tmp_path / "tool_router.pt")
    learned.save(snapshot(tmp_path, 0))  # the stop came before the state file was written again
    router = resume(tmp_path, None, lambda: Router(["a", "b"], 8), {"a": [], "b": []}, 8, config)
    assert router.updates == 1
    server = stub(StubScript())
    embedder = Embedder(openai.AsyncOpenAI(base_url=server.base_url, api_key="k"), "stub")
    again = AgentRouter(router, embedder, {"a": [], "b": []}, tmp_path)
    assert again.update(0) == {} and Router.load(tmp_path / "tool_router.pt").updates == 1


async def test_a_router_loaded_under_reordered_choices_offers_labels_and_learns_by_name(tmp_path, stub):
    from utu.router.routing import load

    config = ToolRouterConfig(choices={"a": [], "b": ["convert_units"]})
    saved = Router(["a", "b"], 64)
    for net in saved.nets:  # it prefers b, the second of its choices
        torch.nn.init.zeros_(net.out.weight)
        net.out.bias.data = torch.tensor([-3.0, 3.0])
    saved.offers = {"a": [], "b": ["convert_units"]}
    saved.save(tmp_path / "r.pt")
    server = stub(StubScript(replies=["\\boxed{1}"]))
    reordered = {"b": ["convert_units"], "a": []}  # the config lists b first
    router = load(tmp_path / "r.pt", reordered, 64, config)
    agent = Agent(AgentConfig(name="a", toolkits=[UNIT_TOOLS]), client_for(server), build_toolkits([UNIT_TOOLS]))
    embedder = Embedder(openai.AsyncOpenAI(base_url=server.base_url, api_key="k"), "stub")
    agent.router = AgentRouter(router, embedder, reordered)
    frozen = await agent.run("Convert 1 mile to km.")
    assert frozen.route.choice == "b" and offered(server.requests[0]) == ["convert_units"]
    record = json.loads(json.dumps(frozen.route.summary()))
    assert record["probabilities"]["b"] > 0.9 and record["probabilities"]["a"] < 0.1  # labelled by name
    explored = await agent.run("Convert 2 miles to km.", explore=True)
    await agent.router.observe_recorded("Convert 2 miles to km.", json.loads(json.dumps(explored.route.summary())), 1.0)
    assert router.choices[router.buffer[-1].index] == explored.route.choice
    with pytest.raises(RouterError, match="choice b offered \\['convert_units'\\] when it was trained"):
        load(tmp_path / "r.pt", {"a": [], "b": ["calculator"]}, 64, config)  # b's tools changed under its name
    router.save(tmp_path / "r2.pt")  # a loaded router keeps each choice's tools in what it saves
    with pytest.raises(RouterError, match="choice b offered"):
        load(tmp_path / "r2.pt", {"a": [], "b": ["calculator"]}, 64, config)


async def test_a_record_that_is_not_a_decision_is_skipped_with_a_warning(stub, caplog):
    server = stub(StubScript(replies=["\\boxed{1}"]))
    agent = routed_agent(server, {"a": [], "b": ["convert_units"]})
    good = json.loads(json.dumps((await agent.run("Convert 2 feet to m.", explore=True)).route.summary()))
    agent.router.router.buffer.clear()
    for spoiled in (
        good | {"log_prob": float("nan")},
        good | {"log_prob": 5.0},
        good | {"log_prob": "x"},
        good | {"member": "1"},
        {k: v for k, v in good.items() if k != "member"},
        {k: v for k, v in good.items() if k != "log_prob"} | {"probabilities": [0.5]},
        {k: v for k, v in good.items() if k != "log_prob"} | {"probabilities": {"a": -0.5, "b": 1.5}},
    ):
        await agent.router.observe_recorded("Convert 2 feet to m.", spoiled, 1.0)
    for not_a_decision in ([good], good | {"choice": ["a"]}, good | {"choice": "z"}, good | {"explored": False}):
        await agent.router.observe_recorded("Convert 2 feet to m.", not_a_decision, 1.0)
    assert not agent.router.router.buffer
    assert caplog.text.count("is not a decision this router made") == 10  # a frozen decision is skipped silently


async def test_on_resume_only_attempts_judged_without_error_teach_the_router(stub):
    from utu.db.models import EvaluationSample
    from utu.practice.rollouts import teach_recorded

    server = stub(StubScript(replies=["\\boxed{1}"]))
    agent = routed_agent(server, {"a": [], "b": ["convert_units"]})
    route = json.loads(json.dumps((await agent.run("Convert 2 feet to m.", explore=True)).route.summary()))
    agent.router.router.buffer.clear()

    def row(**values) -> EvaluationSample:
        fields = {"raw_question": "Convert 2 feet to m.", "stage": "judged", "reward": 1.0, "meta": {"route": route}}
        return EvaluationSample(**(fields | values))

    rows = [row(), row(error="verifier timed out", reward=0.0), row(stage="rollout"), row(meta={}), row(reward=None)]
    await teach_recorded(agent.router, rows)
    assert [o.reward for o in agent.router.router.buffer] == [1.0]
