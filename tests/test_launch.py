"""The command-line entry points load a command with the cycle collector off and run it with it on."""

import os
import subprocess
import sys

from tests.conftest import ROOT

COMMAND = """
import gc
from utu import cli

LOADED_WITH_COLLECTOR = gc.isenabled()


async def run():
    print(LOADED_WITH_COLLECTOR, gc.isenabled())


def main():
    cli.run(run)
"""


def test_a_command_loads_with_the_collector_off_and_runs_with_it_on(tmp_path):
    (tmp_path / "fake_command.py").write_text(COMMAND)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    launched = subprocess.run(
        [sys.executable, "-c", "from utu.launch import launch; launch('fake_command')"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.split() == ["False", "True"]


def test_every_console_script_names_a_launcher_that_exists():
    import tomllib

    from utu import launch

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        assert module == "utu.launch", name
        assert callable(getattr(launch, function)), name
