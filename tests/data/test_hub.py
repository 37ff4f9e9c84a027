"""The paper's hub sets, loaded offline from local copies in the hub's row format (--hub_dir), and the
message that says how to load one that is missing."""

import json

from tests.conftest import run_script
from tests.data.test_upload import rows

PROCESS = "scripts/data/process_training_free_GRPO_data.py"
PROMPT = "Solve the following math problem step by step.\n\n{}\n\nRemember to put your answer on its own line."


def fixture(hub_dir):
    files = {
        "BytedTsinghua-SIA__DAPO-Math-17k/train.jsonl": [
            {"prompt": [{"role": "user", "content": PROMPT.format(q)}], "reward_model": {"ground_truth": a}}
            for q, a in [("What is 2+3?", "5"), ("What is 7*6?", "42"), ("What is 2+3?", "5")]  # one duplicate
        ],
        "PersonalAILab__AFM-WebAgent-RL-Dataset/train.jsonl": [
            {"extra_info": {"question": "Capital of France?", "answer": ["Paris"]}},
            {"extra_info": {"question": "Ambiguous?", "answer": ["a", "b"]}},  # several answers: left out
        ],
        "callanwu__WebWalkerQA/main.jsonl": [
            {
                "question": f"Q{i}",
                "answer": f"A{i}",
                "root_url": "https://example.org",
                "info": {"difficulty_level": level},
            }
            for i, level in enumerate(["easy", "medium", "hard", "medium"])
        ],
    }
    for name, lines in files.items():
        path = hub_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_hub_sets_from_local_copies(tmp_path):
    fixture(tmp_path / "hub")
    db_url = f"sqlite:///{tmp_path / 'h.db'}"
    result = run_script(
        PROCESS,
        "--datasets",
        "DAPO-Math-17k",
        "AFM_web_RL",
        "WebWalkerQA",
        "--from-hub",
        "--hub_dir",
        str(tmp_path / "hub"),
        "--db_url",
        db_url,
    )
    assert result.returncode == 0, result.stderr
    dapo = rows(db_url, "DAPO-Math-17k")
    assert sorted((r.question, r.answer) for r in dapo) == [("What is 2+3?", "5"), ("What is 7*6?", "42")]
    assert [(r.question, r.answer) for r in rows(db_url, "AFM_web_RL")] == [("Capital of France?", "Paris")]
    web = rows(db_url, "WebWalkerQA")
    assert len(web) == 4 and web[0].level == "easy" and web[0].meta == {"root_url": "https://example.org"}


def test_local_copies_alone_load_the_bundled_and_the_hub_sets(tmp_path):
    fixture(tmp_path / "hub")
    db_url = f"sqlite:///{tmp_path / 'h.db'}"
    result = run_script(PROCESS, "--hub_dir", str(tmp_path / "hub"), "--db_url", db_url)  # no --from-hub
    assert result.returncode == 0, result.stderr
    assert len(rows(db_url, "WebWalkerQA")) == 4 and rows(db_url, "AIME24")
    assert "add --from-hub" not in result.stderr


def test_a_missing_hub_set_says_how_to_load_it(tmp_path):
    db_url = f"sqlite:///{tmp_path / 'h.db'}"
    result = run_script("scripts/run_training_free_GRPO.py", "--config_name", "math_reasoning", "--db_url", db_url)
    assert result.returncode != 0
    assert (
        "load it from the hub: pip install 'utu[hub]', then `python scripts/data/process_training_free_GRPO_data.py"
        " --from-hub --datasets DAPO-Math-17k`"
    ) in result.stderr
    missing = run_script(PROCESS, "--datasets", "WebWalkerQA", "--hub_dir", str(tmp_path), "--db_url", db_url)
    assert missing.returncode != 0 and "callanwu__WebWalkerQA/main.jsonl not found" in missing.stderr


def test_a_hub_row_the_upload_would_refuse_is_named(tmp_path):
    """The hub's text is not ours: a row with a NUL is named by its number, not blamed on the network."""
    path = tmp_path / "hub/callanwu__WebWalkerQA/main.jsonl"
    path.parent.mkdir(parents=True)
    row = {"answer": "A", "root_url": "https://example.org", "info": {"difficulty_level": "easy"}}
    lines = [{"question": q, **row} for q in ("Q1", "Q\u00002")]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    db_url = f"sqlite:///{tmp_path / 'h.db'}"
    args = ("--datasets", "WebWalkerQA", "--from-hub", "--hub_dir", str(tmp_path / "hub"), "--db_url", db_url)
    result = run_script(PROCESS, *args)
    said = " ".join(result.stderr.split())
    assert result.returncode != 0 and "WebWalkerQA: row 2, field 'question': contains a NUL character" in said, said
    assert "network" not in said and rows(db_url, "WebWalkerQA") == []
    path.write_text(json.dumps({"question": "Q1", "answer": "A"}) + "\n")  # not the hub's row: no root_url, no info
    other = " ".join(run_script(PROCESS, *args).stderr.split())
    assert "its rows must have the hub's fields" in other and "network" not in other, other
