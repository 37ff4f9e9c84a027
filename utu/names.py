"""Names that become file names, database keys or URLs: experiment ids, export names and data set names.

A name is 1 to 64 characters of letters, digits, `_`, `-` and `.`, starting with a letter or a digit.
So it can never be empty, absolute, contain a path separator or `..`, or be too long for a file name once
utu adds its own suffixes (`_epoch_0`, `_eval_step12`, `.yaml`). Checked before any work is done.
"""

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from utu.errors import ConfigError

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
NAME_RULE = "1-64 letters, digits, '_', '-' or '.', starting with a letter or digit"


def is_plain_name(value: object) -> bool:
    return isinstance(value, str) and bool(NAME_PATTERN.fullmatch(value)) and ".." not in value


def check_name(value: str, what: str) -> str:
    """`value` if it is a plain name, else a `ConfigError` saying what `what` must look like."""
    if not is_plain_name(value):
        raise ConfigError(f"{what}: {value!r} is not a plain name ({NAME_RULE})")
    return value


def writable_folder(folder: Path, remedy: str = "choose another --output_dir") -> None:
    """Check now, before any work, that the run's output folder can be made and written: `ConfigError` if not,
    that ends with `remedy`. Nothing is left behind (a run that fails later leaves no empty folder): the
    folder is made when its first file is written."""
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder}: is a file, not a folder; move it or {remedy}")
    made: list[Path] = []
    try:
        for path in [*reversed(folder.parents), folder]:
            if not path.exists():
                path.mkdir()
                made.append(path)
        writable = os.access(folder, os.W_OK | os.X_OK)
    except OSError as e:
        raise ConfigError(f"{folder}: cannot create it ({e.strerror}); {remedy}") from None
    finally:
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir()
    if not writable:
        raise ConfigError(f"{folder}: not writable; {remedy}")


def inside(base: Path, *parts: str) -> Path:
    """`base/parts...`, refusing any result that resolves outside `base` (a symlink, a `..`)."""
    root = base.resolve()
    path = root.joinpath(*parts).resolve()
    if path != root and root not in path.parents:
        raise ConfigError(f"{path}: outside {root}; refusing to write there")
    return path


def replace_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all: a kill mid-write leaves the file as it was."""
    with replacing(path) as f:
        f.write(text)


@contextlib.contextmanager
def replacing(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """A file that becomes `path` when the block ends, or is removed if it fails: a new file of a fresh name beside
    it, created exclusively (a symlink planted at a name we would reuse is never followed), synced, then renamed."""
    start = os.fsdecode(os.fsencode(path.name)[:200])  # a name holds 255 bytes: room for the suffix
    partial = path.with_name(f"{start}.{secrets.token_hex(6)}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with contextlib.suppress(FileNotFoundError):  # a file replaced keeps its mode (one made private stays so)
            os.fchmod(fd, stat.S_IMODE(os.stat(path).st_mode))
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)  # (a disk too full for the file: nothing of it left behind)
        raise
