"""A stored reply is judged as it was live: however a run is split (rollout, then judge; a resume after a crash),
the verifier sees the reply the model gave. Redaction once rewrote `bearer 1234...abc` in stored replies only,
and a split run scored 0.500 where one run scored 1.000."""

import random
from types import SimpleNamespace

from sqlalchemy import select

from utu.agents.agent import AgentResult
from utu.db import EvaluationSample
from utu.db.attempts import AttemptWriter
from utu.db.engine import storable
from utu.eval.attempt import run_attempt
from utu.tracing.redact import MASK, Redactor
from utu.verify import Verifier

CONFIGURED_KEY = "sk-configured-0123456789abcdef"
FRAGMENTS = [  # what looks like a secret and is not one of ours
    "bearer 12345678901234567890abc",
    "Authorization: Bearer abcdefgh12345678",
    '{"Authorization": "Bearer zz9zz9zz9zz9"}',
    "sk-proj-abc123def456ghi789jkl",
    "ghp_" + "a1" * 18,
    "AKIA0123456789ABCDEF",
    "hf_" + "x9" * 16,
    "xoxb-1234-5678-abcdef",
    "password=hunter2hunter2hunter2",
    "token: 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
]
ALPHABET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 -_.:=/+\"'{}\n\t"


def random_reply(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 6)):
        if rng.random() < 0.5:
            parts.append(rng.choice(FRAGMENTS))
        else:
            parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40))))
    return rng.choice(["", " ", "\n"]).join(parts)


class EchoAgent:
    """Answers every question with the reply it was given."""

    def __init__(self, reply: str):
        self.reply = reply
        self.llm = SimpleNamespace(usage=SimpleNamespace(over_budget=False))

    async def run(self, question, **_):
        return AgentResult(self.reply, [{"role": "user", "content": question}], 1, 0, "final")


def contains_answer(sample, timeout_score=0, **kwargs):
    return {"reward": float(sample.correct_answer in (sample.response or "")), "reasoning": None}


async def judged(db, index: int, reply: str, split: bool) -> tuple[float, str]:
    answer = reply.strip()[:20].replace("\x00", "")  # a data set's answer has no NUL: an upload refuses it
    async with db.transaction() as s:
        row = EvaluationSample(
            exp_id="e", owner="e", dataset="d", dataset_index=index, raw_question="q", correct_answer=answer
        )
        s.add(row)
    common = {"agent": EchoAgent(reply), "verifier": Verifier(contains_answer), "timeout": 10, "retries": 0}
    writer = AttemptWriter(db)
    await run_attempt(row, writer=writer, judge=not split, **common)
    if split:  # judged later, by another process, from what the database holds
        async with db.sessions() as s:
            row = (await s.execute(select(EvaluationSample).where(EvaluationSample.id == row.id))).scalar_one()
        await run_attempt(row, writer=writer, **common)
    async with db.sessions() as s:
        stored = (await s.execute(select(EvaluationSample).where(EvaluationSample.id == row.id))).scalar_one()
    return stored.reward, stored.response


async def test_any_reply_gets_the_same_reward_live_and_from_the_database(any_db, monkeypatch):
    monkeypatch.setenv("UTU_LLM_API_KEY", CONFIGURED_KEY)
    rng = random.Random(50)
    replies = [random_reply(rng) for _ in range(150)]
    replies += [f"{r} {CONFIGURED_KEY}" for r in replies[:10]]  # a reply that quotes our own key
    replies += ["\x00", "The answer\x00 is 4.\x00"]  # a degenerate reply: PostgreSQL's text cannot hold a NUL
    for i, reply in enumerate(replies):
        live, live_stored = await judged(any_db, 2 * i, reply, split=False)
        later, stored = await judged(any_db, 2 * i + 1, reply, split=True)
        assert live == later, reply
        assert stored == live_stored == storable(Redactor().secrets_only(reply)), reply
        if "\x00" in reply:
            assert stored == reply.replace("\x00", "\ufffd")
        else:
            assert stored == reply if CONFIGURED_KEY not in reply else CONFIGURED_KEY not in stored and MASK in stored


def test_well_formed_keys_are_masked_in_other_stored_text_and_prose_is_not():
    redact = Redactor(known=[])
    for fragment in FRAGMENTS[1:8]:
        assert MASK in redact(f"tool said: {fragment}."), fragment
    for prose in (
        "bearer 12345678901234567890abc",  # no header: the echo reply, stored as given
        "A ring bearer delivered 15 rings; the standard-bearer walked ahead.",
        "risk-averse-investors-0123456789 and task-12345678901234567890",
        "sk-learn is a library; ask-me-anything-0123456789",
    ):
        assert redact(prose) == prose
