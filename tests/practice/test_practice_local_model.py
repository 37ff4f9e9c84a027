"""A tiny practice run on the real embedded model (SmolLM2-135M): every stage runs on it, the step is saved, and
what the library got is either screened advice (then an enhanced agent is written) or nothing, said so."""

import os

import pytest
import yaml

from tests.conftest import ROOT, run_script
from tests.practice.helpers import query

pytestmark = pytest.mark.integration


def test_tiny_practice_on_the_embedded_model(local_model, tmp_path):
    db_url = f"sqlite:///{tmp_path / 'p.db'}"
    env = {"UTU_STATE_DIR": os.environ["UTU_STATE_DIR"], "UTU_LLM_BASE_URL": ""}
    result = run_script(
        str(ROOT / "scripts/run_training_free_GRPO.py"),
        "--config_name",
        "local_mawps",
        "--exp_id",
        "tiny",
        "--rollout_data_truncate",
        "2",
        "--batch_size",
        "2",
        "--grpo_n",
        "2",
        "--given_ground_truth",
        "false",
        "--db_url",
        db_url,
        env=env,
        cwd=tmp_path,
    )
    assert result.returncode in (0, 2), result.stderr
    assert query(db_url, "SELECT count(*) FROM experience_snapshots WHERE exp_id='tiny'") == [(1,)]
    assert query(
        db_url, "SELECT count(*) FROM evaluation_data WHERE exp_id='tiny_epoch_0' AND stage IN ('judged', 'failed')"
    ) == [(4,)]
    # Without ground truth every group is learned from: the learner ran on the real model.
    stats = query(db_url, "SELECT stats FROM practice_steps WHERE exp_id='tiny'")
    assert '"groups_used": 2' in stats[0][0]
    ops = query(db_url, "SELECT status, reason, new_text FROM experience_operations WHERE exp_id='tiny'")
    library = query(db_url, "SELECT experiences FROM experience_snapshots WHERE exp_id='tiny'")[0][0]
    if result.returncode == 2:  # a 135M model's proposals are often junk: refused with a reason, and said so
        assert "practice learned nothing" in result.stderr and library == "{}"
        # Each proposal was refused with a reason; a step may also end with none (the 135M proposed nothing).
        assert all(status == "refused" and reason for status, reason, _ in ops)
        assert not (tmp_path / "runs/tiny/enhanced_agent.yaml").exists()
    else:
        agent = yaml.safe_load((tmp_path / "runs/tiny/enhanced_agent.yaml").read_text())
        assert agent["max_turns"] == 1 and agent["name"] == "local_math_agent" and agent["experiences"]
        # the advantage's constrained form, or a restatement's "<Kind>: <strategy>."
        assert all(text.startswith("When ") or ": " in text for text in agent["experiences"].values())
