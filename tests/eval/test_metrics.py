"""Metrics against hand-computed values."""

import pytest

from utu.eval.metrics import ScoredAttempt, bootstrap_ci, compare, compute_metrics, k_values, pass_at_k


def attempts(rewards_by_question: dict[int, list[float | None]], level=None) -> list[ScoredAttempt]:
    out = []
    for q, rewards in rewards_by_question.items():
        for r in rewards:
            stage = "failed" if r is None else "judged"
            out.append(
                ScoredAttempt(
                    ("d", q), stage, r, None if r is None else r == 1.0, level, tokens=10, cost=0.001, tool_calls=1
                )
            )
    return out


def test_pass_at_k_estimator():
    assert pass_at_k(4, 2, 1) == pytest.approx(0.5)
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert pass_at_k(4, 0, 3) == 0.0
    assert pass_at_k(4, 4, 1) == 1.0
    assert k_values(32) == [1, 2, 4, 8, 16, 32] and k_values(5) == [1, 2, 4, 5]


def test_mean_and_pass_at_k_hand_computed():
    # q0: 3/4 correct, q1: 0/4, q2: 4/4, q3: 1/4
    m = compute_metrics(attempts({0: [1, 1, 1, 0], 1: [0, 0, 0, 0], 2: [1, 1, 1, 1], 3: [0, 0, 1, 0]}), pass_k=4)
    assert m.k == 4
    assert m.mean_at_k == pytest.approx((0.75 + 0 + 1 + 0.25) / 4)
    assert m.pass_at_k == pytest.approx(3 / 4)
    assert m.unbiased_pass_at[1] == pytest.approx(m.mean_at_k)
    assert m.unbiased_pass_at[2] == pytest.approx((1 + 0 + 1 + 0.5) / 4)  # q0: 1 - C(1,2)/C(4,2) = 1; q3: .5
    assert m.unbiased_pass_at[4] == pytest.approx(0.75)
    assert m.avg_tool_calls == 1 and m.total_tokens == 160 and m.total_cost == pytest.approx(0.016)
    low, high = m.mean_at_k_ci95
    assert 0 <= low < m.mean_at_k < high <= 1
    assert m.questions_with_contrast == 2  # q0 and q3: the groups practice at G=4 would learn from


def test_questions_with_contrast_count_differing_judged_rewards_and_are_none_with_one_attempt():
    m = compute_metrics(attempts({0: [0.5, 0.5], 1: [0.5, 0.25], 2: [1, None], 3: [None, None]}), pass_k=2)
    assert m.questions_with_contrast == 1  # q2's one judged attempt is no contrast, q3 is not scored
    assert compute_metrics(attempts({0: [1], 1: [0]}), pass_k=1).questions_with_contrast is None


def test_failed_attempts_are_counted_not_scored():
    m = compute_metrics(attempts({0: [1, None], 1: [0, 0]}), pass_k=2)
    assert (m.attempts, m.attempts_judged, m.attempts_failed) == (4, 3, 1)
    assert m.mean_at_k == pytest.approx((1 + 0) / 2)


def test_attempts_cut_by_the_token_limit_are_counted():
    rows = attempts({0: [1, 0], 1: [0, None]})
    rows[1].cut = rows[3].cut = True  # a judged attempt and a failed one
    assert compute_metrics(rows, pass_k=2).attempts_cut == 1


def test_fractional_rewards_and_levels():
    items = attempts({0: [0.5, 1.0]}, level="1") + attempts({1: [0.0, 0.25]}, level="2")
    m = compute_metrics(items, pass_k=2)
    assert m.mean_at_k == pytest.approx((0.75 + 0.125) / 2)
    assert m.model_dump()["by_level"] == {
        "1": {"questions": 1, "mean_at_k": 0.75},
        "2": {"questions": 1, "mean_at_k": 0.125},
    }


def test_bootstrap_ci_is_deterministic_and_brackets_the_mean():
    values = [0.0, 1.0] * 50
    assert bootstrap_ci(values, seed=1) == bootstrap_ci(values, seed=1)
    low, high = bootstrap_ci(values, seed=1)
    assert 0.35 < low < 0.5 < high < 0.65
    assert bootstrap_ci([0.3]) == (0.3, 0.3)


def test_paired_comparison():
    a = attempts({0: [0, 0], 1: [1, 0], 2: [1, 1], 5: [1, 1]})
    b = attempts({0: [1, 1], 1: [1, 1], 2: [1, 1], 7: [0, 0]})
    result = compare(a, b)
    assert [q for q, _, _ in result.rows] == [("d", 0), ("d", 1), ("d", 2)]
    assert result.mean_diff == pytest.approx((1 + 0.5 + 0) / 3)
    assert (result.only_a, result.only_b) == (1, 1)
    assert result.ci95[0] <= result.mean_diff <= result.ci95[1]


def test_tool_stats_per_tool_with_rewards_with_and_without_it():
    from utu.eval.metrics import tool_stats

    def call(tool, seconds, error=None):
        return {"tool": tool, "arguments_chars": 10, "seconds": seconds, "error": error}

    attempts = [
        ScoredAttempt(("d", 0), "judged", reward=1.0, tools=[call("convert", 0.1), call("convert", 0.3)]),
        ScoredAttempt(("d", 1), "judged", reward=0.0, tools=[call("search", 2.0, "timed out after 2s")]),
        ScoredAttempt(("d", 2), "judged", reward=0.5, tools=[]),
        ScoredAttempt(("d", 3), "failed", tools=[call("convert", 0.2, "boom")]),  # counted as calls, not as a reward
    ]
    stats = tool_stats(attempts)
    assert list(stats) == ["convert", "search"]
    c, s = stats["convert"], stats["search"]
    assert (c.calls, c.errors, c.attempts_using) == (3, 1, 1)
    assert c.mean_seconds == pytest.approx(0.2) and c.max_seconds == 0.3
    assert c.reward_using == 1.0 and c.reward_not_using == pytest.approx(0.25)
    assert (s.calls, s.errors, s.reward_using, s.reward_not_using) == (1, 1, 0.0, 0.75)
    assert compute_metrics(attempts, 1).tools == stats
