"""Names that become file names, database keys or URLs: experiment ids, export names and data set names.

A name is 1 to 64 characters of letters, digits, `_`, `-` and `.`, starting with a letter or a digit.
So it can never be empty, absolute, contain a path separator or `..`, or be too long for a file name once
utu adds its own suffixes (`_epoch_0`, `_eval_step12`, `.yaml`). Checked before any work is done.
"""

import contextlib
import errno
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


class NotWritten(OSError):
    """`replace_texts` could not write `path`: nothing was written, or only `written` (a rename that failed)."""

    def __init__(self, path: Path, cause: OSError, written: list[Path]):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.path, self.written = path, written


def replace_texts(texts: dict[Path, str]) -> None:
    """Write several files, each whole, all or none: every text goes to a partial file beside its path (a folder
    made if missing; a folder at the path itself refused) before any is renamed into place, so a full disk or a
    name that cannot be written leaves every path as it was. `NotWritten` names the path that failed, and the
    paths written before it if a rename failed (a rename beside its file: not seen to fail but by a race)."""
    partials: dict[Path, Path] = {}
    try:
        for path, text in texts.items():
            if path.is_dir() and not path.is_symlink():
                raise NotWritten(path, IsADirectoryError(errno.EISDIR, "a folder is at its name"), [])
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                partials[path] = _partial_of(path, text)
            except OSError as e:
                raise NotWritten(path, e, []) from e
        for done, (path, partial) in enumerate(partials.items()):
            try:
                os.replace(partial, path)
            except OSError as e:
                raise NotWritten(path, e, list(partials)[:done]) from e
    finally:
        for partial in partials.values():
            partial.unlink(missing_ok=True)


@contextlib.contextmanager
def replacing(path: Path, binary: bool = False) -> Iterator[IO[Any]]:
    """A file that becomes `path` when the block ends, or is removed if it fails: a new file of a fresh name beside
    it, created exclusively (a symlink planted at a name we would reuse is never followed), synced, then renamed."""
    fd, partial = _new_partial(path)
    try:
        with os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)  # (a disk too full for the file: nothing of it left behind)
        raise


def _partial_of(path: Path, text: str) -> Path:
    """`text` in a new partial file beside `path`, synced, not yet renamed (removed if it cannot be written)."""
    fd, partial = _new_partial(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return partial


def _new_partial(path: Path) -> tuple[int, Path]:
    """A new file of a fresh name beside `path`, created exclusively, with `path`'s mode if a file is there (one
    made private stays so): its descriptor, open for writing, and its name."""
    start = os.fsdecode(os.fsencode(path.name)[:200])  # a name holds 255 bytes: room for the suffix
    partial = path.with_name(f"{start}.{secrets.token_hex(6)}.partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        found = os.lstat(path)  # (a link at the name is replaced, not its target: the target's mode is not ours)
    except OSError:
        return fd, partial  # nothing there, or nothing that can be read
    try:
        if stat.S_ISREG(found.st_mode):
            os.fchmod(fd, stat.S_IMODE(found.st_mode))
    except BaseException:
        os.close(fd)
        partial.unlink(missing_ok=True)
        raise
    return fd, partial
