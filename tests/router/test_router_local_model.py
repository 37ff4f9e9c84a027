"""An agent with a router through run_eval.py on the real embedded servers: the LLM (SmolLM2-135M) and the
router's embeddings server, which the router starts itself (and which is stopped here)."""

import json
import os

import pytest

from tests.conftest import ROOT, run_script

pytestmark = pytest.mark.integration


def test_run_eval_with_a_router_on_the_embedded_models(local_model, tmp_path):
    from utu.llm import local

    env = {"UTU_STATE_DIR": os.environ["UTU_STATE_DIR"], "UTU_LLM_BASE_URL": "", "UTU_EMBED_BASE_URL": ""}
    try:
        result = run_script(
            str(ROOT / "scripts/run_eval.py"),
            *("--config_name", "local/unit_tools_router", "--limit", "2", "--pass_k", "1", "--exp_id", "routed"),
            *("--db_url", f"sqlite:///{tmp_path / 'r.db'}"),
            env=env,
            cwd=tmp_path,
        )
    finally:
        local.server("smollm2-135m", embeddings=True).stop()
    assert result.returncode == 0, result.stderr
    said = " ".join(result.stderr.split())  # rich wraps long log lines
    assert "the embeddings server of smollm2-135m" in said and "tool_router has no state" in said
    metrics = json.loads((tmp_path / "runs/routed/eval_metrics.json").read_text())
    assert metrics["routes"] == {"convert_units": {"attempts": 2, "mean_reward": metrics["mean_at_k"]}}
