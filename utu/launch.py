"""The command-line programs' entry points: the cycle collector stays off while a command's modules load.

Loading openai, SQLAlchemy, Hydra and the pydantic models makes a few hundred thousand objects that live for
the whole run, and the collector scanned them again and again as they were made: 0.1 s of a 0.75 s start
(benchmarks/speed/practice_e2e.py). `cli.run` freezes what is loaded by then and turns the collector back on.
"""

import gc
import importlib


def launch(module: str) -> None:
    """Import `module` with the collector off and run its `main()`."""
    gc.disable()
    importlib.import_module(module).main()


def utu_eval() -> None:
    launch("utu.commands.eval")


def utu_practice() -> None:
    launch("utu.commands.practice")


def utu_grpo() -> None:
    launch("utu.commands.grpo")


def utu_upload() -> None:
    launch("utu.commands.upload")


def utu_data() -> None:
    launch("utu.commands.process_data")


def utu_library() -> None:
    launch("utu.commands.library")
