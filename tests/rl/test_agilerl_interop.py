"""The interop script (scripts/rl/agilerl_interop.py) against utu.rl.agilerl, compared with what the real agilerl
2.58.0 did with the same script (benchmarks/results/agilerl_interop.json, recorded by `make agilerl-interop`)."""

import importlib.util
import json

from tests.conftest import ROOT

RECORD = json.loads((ROOT / "benchmarks" / "results" / "agilerl_interop.json").read_text())


def interop():
    spec = importlib.util.spec_from_file_location("agilerl_interop", ROOT / "scripts" / "rl" / "agilerl_interop.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_record_is_agilerl_s_own_run_of_the_whole_script():
    assert RECORD["impl"] == "agilerl" and RECORD["version"] == "2.58.0" and "script" in RECORD


def test_we_take_every_argument_agilerl_takes_in_the_script_s_calls():
    ours = interop().parameters(interop().load("utu"))
    for call, theirs in RECORD["parameters"].items():
        missing = [name for name in theirs if name not in ours[call]]
        assert not missing, f"{call}: agilerl takes {missing}, we do not"


def test_the_same_user_script_sees_the_same_shapes_and_numbers():
    script = interop()
    seen = script.user_script(script.load("utu"))
    theirs = RECORD["script"]
    for key in ("population", "hyperparameters", "fitness_before_test", "select", "clone"):
        assert seen[key] == theirs[key], key
    # which hyperparameter each mutation drew depends on each library's random draws; the rest does not
    assert {k: v for k, v in seen["mutation"].items() if k != "mut"} == {
        k: v for k, v in theirs["mutation"].items() if k != "mut"
    }
    assert set(seen["mutation"]["mut"]) <= {"lr", "beta", "group_size", "None"}
