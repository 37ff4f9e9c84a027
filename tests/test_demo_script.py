"""scripts/demo.py reads the checkout's .env as the commands it runs do, so it agrees with them on the model and
the database."""

import importlib.util
import os

from tests.conftest import ROOT


def load_demo():
    spec = importlib.util.spec_from_file_location("demo_script", ROOT / "scripts" / "demo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_demo_reads_the_checkouts_env_from_anywhere_and_the_shell_wins(tmp_path, monkeypatch):
    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    checkout.mkdir()
    elsewhere.mkdir()
    (checkout / ".env").write_text("UTU_LLM_BASE_URL=http://127.0.0.1:9/v1\nUTU_LLM_MODEL=from-env-file\n")
    for name in ("UTU_LLM_BASE_URL", "UTU_LLM_MODEL"):
        monkeypatch.setenv(name, "x")  # so that teardown restores what the test started with
    monkeypatch.delenv("UTU_LLM_BASE_URL")
    monkeypatch.setenv("UTU_LLM_MODEL", "from-shell")
    monkeypatch.chdir(elsewhere)
    demo = load_demo()
    monkeypatch.setattr(demo, "ROOT", checkout)
    demo.read_env_as_the_commands_do()
    assert os.environ["UTU_LLM_BASE_URL"] == "http://127.0.0.1:9/v1"  # not the embedded model's banner
    assert os.environ["UTU_LLM_MODEL"] == "from-shell"
    assert os.getcwd() == str(checkout)  # where the commands write ./utu.db, which it reads the refusals from


def test_refused_proposals_are_printed_as_written(monkeypatch):
    """A small learner's text may hold what rich takes for markup ("[/INST]" made it raise) or an escape sequence."""
    import io

    from rich.console import Console

    demo = load_demo()
    out = io.StringIO()
    monkeypatch.setattr(demo, "console", Console(file=out, width=200, color_system=None))
    demo.print_refusals([(0, "Use [a, b] and x[i]; [/INST] ends.\x1b[2J", "junk: [bold]says 'floor' 2 times")])
    shown = out.getvalue()
    assert "step 0: Use [a, b] and x[i]; [/INST] ends.\\x1b[2J" in shown and "\x1b" not in shown
    assert "refused: junk: [bold]says 'floor' 2 times" in shown
