"""The router's policy update against a hand-computed example, its learning on a bandit, its state and its locks."""

import math
import threading
from pathlib import Path

import pytest
import torch

from utu.router.policy import FeatureNorm, group_advantages, grpo_loss
from utu.router.router import Member, Router, RouterError

DIM = 32


def test_the_clipped_surrogate_and_entropy_match_a_hand_computed_example():
    # Two choices, a uniform policy (logits 0): each probability 0.5, entropy ln 2 per sample.
    logits = torch.zeros(3, 2, requires_grad=True)
    actions = torch.tensor([0, 1, 1])
    old = torch.log(torch.tensor([0.5, 0.25, 0.25]))  # ratios 1, 2, 2
    advantages = torch.tensor([1.0, 1.0, -1.0])
    terms = grpo_loss(logits, actions, old, advantages, clip=0.2, entropy_coef=0.01)
    # min(r A, clip(r) A): 1 * 1 = 1; min(2, 1.2) = 1.2 (clipped); min(-2, -1.2) = -2 (not clipped).
    assert terms.surrogate == pytest.approx((1 + 1.2 - 2) / 3)
    assert terms.entropy == pytest.approx(math.log(2))
    assert terms.loss.item() == pytest.approx(-(1 + 1.2 - 2) / 3 - 0.01 * math.log(2))
    assert terms.clipped == pytest.approx(1 / 3)
    terms.loss.backward()
    # d(-r A / 3)/dz = -(r A / 3) (onehot(a) - p); the entropy's gradient is 0 at the uniform policy.
    expected = torch.tensor([[-1 / 6, 1 / 6], [0.0, 0.0], [-1 / 3, 1 / 3]])
    assert torch.allclose(logits.grad, expected, atol=1e-6)


def test_advantages_are_relative_to_the_group_and_zero_without_contrast():
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 1.0, 0.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2, 2])
    got = group_advantages(rewards, groups)
    third = torch.tensor([1.0, 0.0, 0.0])
    expected_third = (third - third.mean()) / third.std(unbiased=False)
    assert torch.allclose(got[:4], torch.tensor([1.0, -1.0, 0.0, 0.0]), atol=1e-3)
    assert torch.allclose(got[4:], expected_third, atol=1e-3)


class Bandit:
    """Three kinds of query (noisy directions in feature space); the right choice of four depends on the kind."""

    best = (0, 2, 3)

    def __init__(self, seed: int = 1):
        self.rng = torch.Generator().manual_seed(seed)
        self.centres = torch.randn(3, DIM, generator=self.rng)

    def query(self, i: int) -> tuple[str, torch.Tensor, int]:
        kind = i % 3
        features = self.centres[kind] + 0.5 * torch.randn(DIM, generator=self.rng)
        return f"q{i}", features / features.norm(), kind

    def right_rate(self, router: Router, start: int = 100_000, n: int = 150) -> float:
        right = 0
        for i in range(start, start + n):
            query, features, kind = self.query(i)
            right += router.decide(query, features, explore=False).index == self.best[kind]
        return right / n


def test_the_router_finds_the_best_choice_per_kind_of_query_within_a_budget():
    bandit, router = Bandit(), Router(["a", "b", "c", "d"], DIM, seed=0)
    assert bandit.right_rate(router) == pytest.approx(1 / 3)  # untrained: "a" everywhere, right for one kind
    for step in range(12):  # 96 queries, 2 tries each: 192 rewards
        for i in range(step * 8, step * 8 + 8):
            query, features, kind = bandit.query(i)
            for _ in range(2):
                decision = router.decide(query, features, explore=True)
                router.observe(decision, 1.0 if decision.index == bandit.best[kind] else 0.0)
        router.update()
    assert bandit.right_rate(router) >= 0.95


def test_attempts_at_one_query_try_distinct_choices_while_exploring():
    router = Router(["a", "b", "c"], DIM)
    features = torch.randn(DIM)
    tried = [router.decide("q", features, explore=True) for _ in range(3)]
    assert sorted(d.index for d in tried) == [0, 1, 2]
    assert len({d.member for d in tried}) == 1  # one member's sample without replacement
    frozen = router.decide("q", features, explore=False)
    assert not frozen.explored and frozen.member == -1


def trained_router() -> Router:
    bandit, router = Bandit(), Router(["a", "b", "c", "d"], DIM, seed=3)
    for i in range(24):
        query, features, kind = bandit.query(i)
        for _ in range(2):  # a group of two: advantages that are not all 0
            decision = router.decide(query, features, explore=True)
            router.observe(decision, float(decision.index == bandit.best[kind]))
    router.update()
    for i in range(24, 30):  # observed, not learned from yet: the buffer is part of the state
        query, features, kind = bandit.query(i)
        router.observe(router.decide(query, features, explore=True), 1.0)
    return router


def test_a_saved_router_loads_to_the_same_decisions_buffer_and_next_update(tmp_path):
    router = trained_router()
    router.save(tmp_path / "r.pt")
    loaded = Router.load(tmp_path / "r.pt", choices=["a", "b", "c", "d"], features=DIM)
    features = Bandit().query(7)[1]
    assert loaded.decide("x", features, explore=False).probabilities == pytest.approx(
        router.decide("x", features, explore=False).probabilities
    )
    assert len(loaded.buffer) == len(router.buffer) == 6 and loaded.observed == router.observed == 54
    router.update(), loaded.update()  # the same optimiser state and observations: the same weights after
    for a, b in zip(router.nets, loaded.nets, strict=True):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(pa, pb)
    explored = [r.decide(f"q{i}", features, explore=True).choice for r in (router, loaded) for i in range(20)]
    assert explored[:20] == explored[20:]  # exploration's random state is saved too
    assert not list(tmp_path.glob("*.partial"))


def test_a_bad_or_mismatched_state_file_is_one_clear_error(tmp_path):
    trained_router().save(tmp_path / "good.pt")
    (tmp_path / "garbage.pt").write_bytes(b"\x00not a router")
    torch.save({"format": "something else"}, tmp_path / "other.pt")
    with pytest.raises(RouterError, match=r"garbage.pt: not a usable router state \(unreadable: not a file a router"):
        Router.load(tmp_path / "garbage.pt")
    with pytest.raises(RouterError, match="other.pt: not a usable router state"):
        Router.load(tmp_path / "other.pt")
    with pytest.raises(RouterError, match="no router state there"):
        Router.load(tmp_path / "missing.pt")
    with pytest.raises(RouterError, match=r"saved for choices \['a', 'b', 'c', 'd'\], but the config names"):
        Router.load(tmp_path / "good.pt", choices=["a", "b"])
    reordered = Router.load(tmp_path / "good.pt", choices=["d", "c", "b", "a"])  # a choice is known by its name
    assert reordered.choices == ["a", "b", "c", "d"]
    with pytest.raises(RouterError, match="saved for features of size 32, but the embedding gives 64"):
        Router.load(tmp_path / "good.pt", features=64)
    cut = (tmp_path / "good.pt").read_bytes()[:200]
    (tmp_path / "cut.pt").write_bytes(cut)
    with pytest.raises(RouterError, match="cut.pt: not a usable router state"):
        Router.load(tmp_path / "cut.pt")


def test_bad_inputs_are_refused():
    with pytest.raises(RouterError, match="two distinct choices"):
        Router(["a", "a"], DIM)
    router = Router(["a", "b"], DIM)
    with pytest.raises(RouterError, match="features of size 5, but this router reads 32"):
        router.decide("q", torch.zeros(5), explore=True)
    decision = router.decide("q", torch.zeros(DIM), explore=True)
    with pytest.raises(RouterError, match="a reward is a number within"):
        router.observe(decision, float("nan"))
    router.observe(router.decide("q", torch.zeros(DIM), explore=False), 1.0)  # frozen: teaches nothing
    assert router.buffer == []


def test_many_attempts_observing_at_once_lose_no_update():
    router = Router(["a", "b", "c"], DIM)
    features = torch.randn(DIM)

    chosen: dict[str, list[int]] = {f"q{i}": [] for i in range(100)}

    def attempts(worker: int) -> None:  # 8 workers, each attempting every query: 3 of them race for each
        for i in range(300):
            query = f"q{(i + worker * 37) % 100}"
            decision = router.decide(query, features, explore=True)
            chosen[query].append(decision.index)
            router.observe(decision, float(decision.index == 0))

    threads = [threading.Thread(target=attempts, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert router.observed == 2400 and len(router.buffer) == 2400
    # Racing attempts at one query still take distinct choices: its 24 decisions are 8 whole samples without
    # replacement, so each choice was taken exactly 8 times (a lost race would break a sample).
    assert all(sorted(c) == [0] * 8 + [1] * 8 + [2] * 8 for c in chosen.values())
    report = router.update()
    assert sum(r["samples"] for r in report.values()) == 2400 and router.buffer == []


def test_a_group_larger_than_the_choices_stays_one_member_s_and_an_update_ends_every_group():
    router = Router(["a", "b", "c"], DIM, seed=1)
    features = torch.randn(DIM)
    four = [router.decide("q", features, explore=True) for _ in range(4)]
    assert sorted(d.index for d in four[:3]) == [0, 1, 2] and len({d.member for d in four}) == 1
    router.observe(four[0], 1.0)
    router.update()
    after = [router.decide("q", features, explore=True) for _ in range(3)]
    assert sorted(d.index for d in after) == [0, 1, 2]  # a new group, from the updated policy
    singles = {router.decide("q", features, explore=True, member=0, group=False).index for _ in range(50)}
    assert len(singles) >= 2  # independent samples (the design's select_action) may repeat


def test_an_update_moves_each_member_toward_the_better_choice_of_its_groups():
    router = Router(["a", "b"], DIM, members=(Member("only", advantage_weight=0.0),), epochs=4)
    features = [torch.randn(DIM) for _ in range(6)]
    before = [router.decide(f"q{i}", f, explore=False).probabilities[1] for i, f in enumerate(features)]
    for i, f in enumerate(features):
        for _ in range(2):
            decision = router.decide(f"q{i}", f, explore=True)
            router.observe(decision, float(decision.choice == "b"))
    report = router.update()
    assert report["only"]["samples"] == 12 and report["only"]["mean_reward"] == 0.5
    after = [router.decide(f"q{i}", f, explore=False).probabilities[1] for i, f in enumerate(features)]
    assert all(a > b for a, b in zip(after, before, strict=True))


def test_broken_features_a_folder_as_state_and_the_caller_s_rng_are_handled():
    router = Router(["a", "b"], DIM)
    with pytest.raises(RouterError, match="NaN, infinite or huge"):
        router.decide("q", torch.full((DIM,), float("nan")), explore=True)
    with pytest.raises(RouterError, match="NaN, infinite or huge"):  # centred and scaled, it would overflow
        router.decide("q", torch.full((DIM,), 3e38), explore=True)
    with pytest.raises(RouterError, match="is a folder"):
        router.save(Path(__file__).parent)
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    Router(["a", "b"], DIM, seed=5)
    assert torch.equal(torch.rand(1), expected)  # building a router leaves the caller's torch RNG alone


def test_an_update_that_fails_undoes_every_member_and_keeps_the_observations(monkeypatch):
    import utu.router.router as module

    router = trained_router()
    weights = [[p.clone() for p in net.parameters()] for net in router.nets]
    pending, calls = len(router.buffer), []

    def failing_on_the_second_member(*args, **kwargs):
        calls.append(1)
        if len(calls) > router.epochs:  # the first member has stepped all its epochs
            raise RuntimeError("out of memory")
        return grpo_loss(*args, **kwargs)

    monkeypatch.setattr(module, "grpo_loss", failing_on_the_second_member)
    with pytest.raises(RuntimeError, match="out of memory"):
        router.update()
    assert len(router.buffer) == pending
    for net, saved in zip(router.nets, weights, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(net.parameters(), saved, strict=True))
    monkeypatch.undo()
    assert router.update() and not router.buffer  # the kept observations are learned from next time


def test_a_save_replaces_only_a_file_and_a_failed_one_leaves_no_partial(tmp_path):
    router = trained_router()
    (tmp_path / "target.pt").write_text("someone else's")
    (tmp_path / "link.pt").symlink_to(tmp_path / "target.pt")
    with pytest.raises(RouterError, match="link.pt is not a regular file"):
        router.save(tmp_path / "link.pt")
    assert (tmp_path / "target.pt").read_text() == "someone else's"
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.raises(RouterError, match="cannot save the router to .*file/r.pt"):
        router.save(blocked / "r.pt")  # its folder is a file
    assert not list(tmp_path.rglob("*.partial"))
    with pytest.raises(RouterError, match="need 1 <= epochs <= 1000"):
        Router(["a", "b"], DIM, epochs=0)


def test_a_state_file_no_router_would_have_saved_is_refused(tmp_path):
    trained_router().save(tmp_path / "good.pt")
    broken = {
        "nan_weights": lambda s: s["nets"][0]["hidden.weight"].fill_(float("nan")),
        "out_of_range": lambda s: s["buffer"][0].update(index=99),
        "member": lambda s: s["members"][0].update(temperature=0.0),
        "epochs": lambda s: s["settings"].update(epochs=0),
        "counts": lambda s: s.update(updates="lots"),
        "norm_count": lambda s: s["norm"].update(count=float("nan")),
        "norm_square": lambda s: s["norm"].update(square=-1.0),
        "index": lambda s: s["buffer"][0].update(index=1.0),
        "member_index": lambda s: s["buffer"][0].update(member=0.5),
        "flat_features": lambda s: s["buffer"][0].update(features=s["buffer"][0]["features"].reshape(2, -1)),
        "reward": lambda s: s["buffer"][0].update(reward=1e39),
        "log_prob": lambda s: s["buffer"][0].update(log_prob=float("-inf")),
        "squares": lambda s: next(iter(s["optimizers"][0]["state"].values()))["exp_avg_sq"].fill_(-1.0),
        "offers": lambda s: s.update(offers={"a": 5}),
        "members": lambda s: s.update(members=s["members"] * 100),
        "many_epochs": lambda s: s["settings"].update(epochs=10**9),
        "moments": lambda s: next(iter(s["optimizers"][0]["state"].values()))["exp_avg"].fill_(float("nan")),
        "size": lambda s: s.update(features=10**9),  # refused before a network of that size is made
    }
    for name, spoil in broken.items():
        state = torch.load(tmp_path / "good.pt", weights_only=True)
        spoil(state)
        torch.save(state, tmp_path / f"{name}.pt")
        with pytest.raises(RouterError, match=f"{name}.pt: not a usable router state"):
            Router.load(tmp_path / f"{name}.pt")
    router = trained_router()
    decision = router.decide("q", Bandit().query(1)[1], explore=True)
    with pytest.raises(RouterError, match="a reward is a number within"):
        router.observe(decision, 1e39)  # finite as a Python float, inf as float32


def test_a_recorded_decision_is_checked_and_its_group_s_next_attempts_take_other_choices():
    router = trained_router()
    features = Bandit().query(3)[1]
    for index, member, log_prob, message in (
        (0, 0, float("nan"), "log-probability nan"),
        (0, 0, 5.0, "log-probability 5.0"),
        (0, 0, -math.inf, "log-probability -inf"),
        (0, True, -1.0, "member True"),
        (0, 7, -1.0, "member 7: this router has members 0-2"),
        (9, 0, -1.0, "choice 9: this router has choices 0-3"),
    ):
        with pytest.raises(RouterError, match=message):
            router.recorded("q", features, index, member, log_prob, group=True)
    for seed in range(20):  # two of a query's four attempts judged before a stop; the resumed router takes the others
        before_the_stop = Router(["a", "b", "c", "d"], DIM, seed=seed)
        decisions = [before_the_stop.decide("q", features, explore=True) for _ in range(2)]
        resumed = Router(["a", "b", "c", "d"], DIM, seed=seed)  # as the snapshot it resumes from
        for d in decisions:
            resumed.recorded("q", features, d.index, d.member, d.log_prob, group=True)
        rest = {resumed.decide("q", features, explore=True).index for _ in range(2)}
        assert {d.index for d in decisions} | rest == {0, 1, 2, 3}


def test_a_trained_router_s_unlikely_decision_is_recorded_and_learned_from():
    """With G at least the number of choices, a group takes even a choice the policy all but rules out: its record
    has a log-probability far below any sampled one, and is still the router's own decision."""
    router = trained_router()
    features = Bandit().query(3)[1]
    router.buffer.clear()
    decision = router.recorded("q", features, 0, 0, -1152.0, group=True)
    router.observe(decision, 1.0)
    router.observe(router.recorded("q", features, 1, 0, -0.01, group=True), 0.0)
    assert router.update() and router._weights_finite()


def test_an_update_that_makes_the_weights_nan_drops_its_observations():
    router = trained_router()
    weights = [[p.clone() for p in net.parameters()] for net in router.nets]
    router.buffer[0].reward = float("inf")  # as no observe() would let in
    with pytest.raises(RouterError, match="NaN or infinite: it was undone and its 6 observations dropped"):
        router.update()
    for net, saved in zip(router.nets, weights, strict=True):
        assert all(torch.equal(p, q) for p, q in zip(net.parameters(), saved, strict=True))
    decision = router.decide("q", Bandit().query(1)[1], explore=True)
    router.observe(decision, 1.0)
    assert router.update()  # learning goes on


def test_the_feature_norm_merges_batches_exactly_and_takes_huge_features():
    rng = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 5, generator=rng) * 3 + 7 for n in (1, 4, 9)]
    norm = FeatureNorm(5)
    for batch in batches:
        norm.learn(batch)
    every = torch.cat(batches).double()
    assert torch.allclose(norm.mean.double(), every.mean(0), atol=1e-5)
    assert norm.square == pytest.approx(float(((every - every.mean(0)) ** 2).sum()), rel=1e-6)
    huge = FeatureNorm(3)
    huge.learn(torch.tensor([[1e20, 0.0, 0.0], [-1e20, 0.0, 0.0]]))  # its float32 square would be inf
    centred = huge(torch.tensor([1e20, 0.0, 0.0]))
    assert math.isfinite(huge.square) and torch.allclose(centred, torch.tensor([1.0, 0.0, 0.0]), atol=1e-4)
