"""docs/guide.md as a newcomer follows it: every bash block of its steps 1-7, run as written on the rehearsal
stub, in a folder holding nothing but links to the checkout's `scripts/` and `.venv/`, ends with a compared
enhanced agent. Only the stub's port is changed, to one that is free."""

import contextlib
import os
import re
import signal
import socket
import subprocess

import yaml

from tests.conftest import ROOT
from utu.llm.rehearsal import CARRY_RULE

GUIDE = ROOT / "docs" / "guide.md"


def guide_script() -> str:
    """The guide's commands up to its step 8 (Phoenix), in order, as one bash script that stops at a failure."""
    text = GUIDE.read_text(encoding="utf-8")
    steps = text[: text.index("## 8.")]
    blocks = re.findall(r"^```bash\n(.*?)^```", steps, re.DOTALL | re.MULTILINE)
    assert len(blocks) >= 7, "the guide's steps lost their commands"
    return "set -e\n" + "\n".join(blocks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_guide_runs_as_written_from_an_empty_folder_to_a_compared_enhanced_agent(tmp_path):
    script = guide_script()
    assert "--port 8765 --rehearse" in script and "127.0.0.1:8765" in script
    (tmp_path / "guide.sh").write_text(script.replace("8765", str(free_port())), encoding="utf-8")
    for name in (".venv", "scripts"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UTU_", "PHOENIX_"))}
    proc = subprocess.Popen(
        ["bash", "guide.sh"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        with contextlib.suppress(ProcessLookupError):  # the stub it started in the background goes with its session
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out[-3000:]
    compare = re.search(r"B - A = \+(\d\.\d+) \(95% CI \+(\d\.\d+) to .*: a real gain", out)
    assert compare, out[-3000:]  # the rehearsal agent carries once the library says so: every question gains
    enhanced = (tmp_path / "runs/my_practice/enhanced_agent.yaml").read_text(encoding="utf-8")
    assert CARRY_RULE in yaml.safe_load(enhanced)["experiences"].values()
    assert (tmp_path / "runs/my_practice/report.md").is_file()
