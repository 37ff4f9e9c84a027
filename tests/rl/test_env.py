"""The RL environment: batches from the SQL store or JSONL, and rewards from the shared verify functions."""

import json

import pytest

from utu.db import EvaluationSample
from utu.db.dataset_io import DatasetLine, store_dataset
from utu.rl.env import GRPOEnv, PromptTemplate
from utu.verify import Verifier, load_verifier

COMPLETIONS = [
    ["The answer is \\boxed{3}.", "It is \\boxed{4}.", "no idea", "\\boxed{3.0}"],
    ["\\boxed{\\frac{1}{2}}", "0.5", "\\boxed{2}", "The result: 1/2"],
]


async def test_rewards_equal_the_evaluation_paths(sqlite_db):
    await store_dataset(
        sqlite_db, "Two", [DatasetLine(question="1+2?", answer="3"), DatasetLine(question="1/2?", answer="0.5")]
    )
    verifier = Verifier(load_verifier("math.py"), timeout=5)
    env = await GRPOEnv.from_db(sqlite_db, "Two", PromptTemplate(), verifier, batch_size=2)
    prompts = sorted(next(env.batches(0)), key=lambda p: p.index)
    rewards = await env.rewards.score(prompts, COMPLETIONS)
    assert rewards.shape == (2, 4)
    # The evaluation path: the same verifier on evaluation_data rows.
    for p, group, row_rewards in zip(prompts, COMPLETIONS, rewards.tolist(), strict=True):
        for completion, reward in zip(group, row_rewards, strict=True):
            sample = EvaluationSample(raw_question=p.question, correct_answer=p.answer, response=completion)
            assert (await verifier(sample)).reward == reward
    assert rewards[0].tolist() == [1.0, 0.0, 0.0, 1.0]


def test_jsonl_source_shuffles_per_epoch_and_builds_chat_prompts(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"question": f"q{i}", "answer": str(i)}) + "\n" for i in range(8)))
    env = GRPOEnv.from_jsonl(
        path, PromptTemplate(system="S", user="Q: {question}"), Verifier(load_verifier("str_match.py")), batch_size=3
    )
    epoch0 = [[p.index for p in b] for b in env.batches(0)]
    assert [len(b) for b in epoch0] == [3, 3, 2] and sorted(sum(epoch0, [])) == list(range(8))
    assert epoch0 != [[p.index for p in b] for b in env.batches(1)]
    assert env.prompts[2].messages == [{"role": "system", "content": "S"}, {"role": "user", "content": "Q: q2"}]
    boxed = PromptTemplate(system="S", user="Put the answer in \\boxed{}. {question}")  # other braces stay
    assert boxed.messages("q2")[1]["content"] == "Put the answer in \\boxed{}. q2"


def test_a_user_template_without_the_question_is_refused():
    from pydantic import ValidationError

    from utu.config.rl import RLDataConfig

    with pytest.raises(ValidationError, match="user\n.*'no placeholder' has no {question}"):
        RLDataConfig(dataset="MAWPS_singleop", user="no placeholder")


def sync_exact(sample, timeout_score=0, **kwargs):
    return {"reward": float(sample.response == f"\\boxed{{{sample.correct_answer}}}")}


@pytest.mark.parametrize("verify", [sync_exact, "str_match.py", "math.py"])
async def test_sync_and_async_verifiers_both_work(verify):
    import inspect

    from utu.rl.env import Prompt, RewardAdapter

    func = verify if callable(verify) else load_verifier(verify)
    assert inspect.iscoroutinefunction(func) == (verify != sync_exact)  # one sync verifier, two async ones
    rewards = await RewardAdapter(Verifier(func, timeout=5)).score(
        [Prompt(0, "q", "7", [])], [["\\boxed{7}", "\\boxed{8}"]]
    )
    assert rewards.tolist() == [[1.0, 0.0]]
