"""The design's names (`ToolSelectionGRPO`, `MultiAgentGroupRL`) work as its users call them, on real features:
the embedded model's embeddings server (started by the project's own code)."""

import random

import pytest

from tests.router.test_router import Bandit
from utu.router.compat import MultiAgentGroupRL, ToolSelectionGRPO, embedding_features
from utu.router.router import RouterError

UNITS = ["miles to kilometres", "pounds to kilograms", "gallons to litres", "inches to centimetres", "feet to metres"]


def unit_question(rng: random.Random) -> str:
    return f"Convert {rng.randint(2, 900)}.{rng.randint(0, 9)} {rng.choice(UNITS)}, rounded to 2 decimals."


def sum_question(rng: random.Random) -> str:
    a, b, c = (rng.randint(10, 999) for _ in range(3))
    return f"What is {a} * {b} - {c}? Give the exact integer."


def test_multi_agent_group_rl_selects_observes_updates_and_saves(tmp_path):
    bandit = Bandit()
    features = {}

    def extract(observation: str):
        return features[observation]

    configs = [
        {"agent_id": "a", "action_dim": 4, "relative_advantage_weight": 0.3, "entropy_coef": 0.02},
        {"agent_id": "b", "action_dim": 4, "relative_advantage_weight": 0.7, "entropy_coef": 0.01},
    ]
    group = MultiAgentGroupRL(configs, extract, update_interval=48, save_dir=tmp_path)
    reports = []
    for i in range(240):
        query, vector, kind = bandit.query(i)
        features[query] = vector
        agent = "ab"[i % 2]
        for _ in range(2):
            action, log_prob = group.select_action(agent, query)
            assert 0 <= action < 4 and log_prob <= 0
            report = group.observe(agent, query, action, float(action == bandit.best[kind]), None, True)
            reports += [report] if report else []
    assert len(reports) == 10 and set(reports[-1]) == {"a", "b"}
    right = 0
    for i in range(10_000, 10_060):
        query, vector, kind = bandit.query(i)
        features[query] = vector
        right += group.select_action("a", query, deterministic=True)[0] == bandit.best[kind]
    assert right / 60 >= 0.9
    path = group.save_agents("_v1")
    again = MultiAgentGroupRL(configs, extract, save_dir=tmp_path)
    again.load_agents("_v1")
    query, vector, _ = bandit.query(5)
    assert again.select_action("b", query, deterministic=True) == pytest.approx(
        group.select_action("b", query, deterministic=True)
    )
    assert path.name == "router_v1.pt"
    with pytest.raises(RouterError, match="agent 'z': the agents are"):
        group.select_action("z", query)
    with pytest.raises(RouterError, match="every agent needs the same action_dim"):
        MultiAgentGroupRL([{"action_dim": 2}, {"action_dim": 3}], extract)
    with pytest.raises(RouterError, match="action 1.5: the actions are 0-3"):
        group.observe("a", query, 1.5, 1.0)
    with pytest.raises(RouterError, match="every agent_id must be distinct"):
        MultiAgentGroupRL([{"agent_id": "a", "action_dim": 4}] * 2, extract)
    reordered = MultiAgentGroupRL(configs, extract, save_dir=tmp_path, action_names=["3", "2", "1", "0"])
    with pytest.raises(RouterError, match="saved for actions .* in order"):  # an action is its index
        reordered.load_agents("_v1")
    others = MultiAgentGroupRL([{**c, "agent_id": c["agent_id"] + "2"} for c in configs], extract, save_dir=tmp_path)
    with pytest.raises(RouterError, match=r"saved for agents \['a', 'b'\], but these are \['a2', 'b2'\]"):
        others.load_agents("_v1")


def test_tool_selection_grpo_pairs_each_result_with_its_agent_s_oldest_choice(tmp_path):
    vectors = {"q1": [1.0, 0.0], "q2": [0.0, 1.0]}
    selector = ToolSelectionGRPO(["x", "y"], feature_extractor=vectors.__getitem__, num_agents=1, save_dir=tmp_path)
    first, second = selector.select_tool("q1"), selector.select_tool("q2")
    agent = selector.current_agent_id
    with pytest.raises(ValueError):  # a failed evaluation leaves the choice waiting
        selector.observe_result(agent, "not a number")
    selector.observe_result(agent, 1.0)
    selector.observe_result(agent, 0.0)
    buffer = selector.group.router.buffer
    assert [(o.query, selector.tools[o.index], o.reward) for o in buffer] == [("q1", first, 1.0), ("q2", second, 0.0)]
    with pytest.raises(RouterError, match="has no tool choice waiting"):
        selector.observe_result(agent, 1.0)
    selector.group.update_interval = 1
    selector.select_tool("q1")
    broken = selector.group.router.update
    selector.group.router.update = lambda: (_ for _ in ()).throw(RuntimeError("update failed"))
    with pytest.raises(RuntimeError, match="update failed"):
        selector.observe_result(agent, 1.0)
    selector.group.router.update = broken
    assert len(selector.group.router.buffer) == 3 and not selector._pending[agent]  # kept once, not waiting again
    with pytest.raises(RouterError, match="num_agents 0: a selector needs at least one agent"):
        ToolSelectionGRPO(["x", "y"], feature_extractor=vectors.__getitem__, num_agents=0)


@pytest.mark.integration
def test_tool_selection_grpo_learns_a_query_dependent_choice_from_real_embeddings(tmp_path, monkeypatch):
    monkeypatch.setenv("UTU_STATE_DIR", str(tmp_path / "state"))
    from utu.llm import local

    try:
        selector = ToolSelectionGRPO(
            ["convert_units", "calculator", "answer_directly"],
            update_interval=32,
            save_dir=tmp_path,
            feature_extractor=embedding_features(model="smollm2-135m"),
        )
        rng = random.Random(0)
        right_tool = {"unit": "convert_units", "sum": "calculator"}
        for _ in range(160):
            kind = rng.choice(["unit", "sum"])
            question = unit_question(rng) if kind == "unit" else sum_question(rng)
            for _ in range(2):
                tool = selector.select_tool(question)
                selector.observe_result(selector.current_agent_id, float(tool == right_tool[kind]))
        held_out = random.Random(99)
        right = 0
        for i in range(40):
            kind = "unit" if i % 2 else "sum"
            question = unit_question(held_out) if kind == "unit" else sum_question(held_out)
            router = selector.group.router
            features = selector.group._features(question)[1]
            right += router.decide(question, features, explore=False).choice == right_tool[kind]
        assert right / 40 >= 0.9
        selector.save()
        with pytest.raises(RouterError, match="has no tool choice waiting"):
            selector.observe_result(selector.current_agent_id, 1.0)
    finally:
        local.server("smollm2-135m", embeddings=True).stop()
