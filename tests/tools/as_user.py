"""Run a Python snippet as a host user that is not root, with this checkout's venv (tests of the code box).

Run by root under `unshare --mount --propagation private`: every folder on the way to the paths named is made
traversable in this mount namespace only (a folder others may not enter, such as /root, is covered by a tmpfs
holding just the way through), then root is dropped for good and the snippet runs.

    unshare --mount --propagation private -- python as_user.py UID STAGE SNIPPET PATH...

STAGE is a folder of the caller's (a test's tmp_path) where the covered folders stay reachable for root.
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path


def make_reachable(paths: list[str], stage: str) -> None:
    covered: dict[Path, Path] = {}  # a folder covered by a tmpfs -> where its real content is still seen
    for path in sorted(paths):
        parts, here = Path(path).parts[1:], Path("/")
        while parts:
            if here not in covered and not _open_to_others(here):
                covered[here] = _cover(here, stage)
            step = here / parts[0]
            if here in covered and not os.path.lexists(step):
                _bind(covered[here] / parts[0], step)
            here, parts = step, parts[1:]
        if here.is_dir() and here not in covered and not _open_to_others(here, listable=True):
            # the path itself is closed to others (a checkout cloned into a 0700 mktemp folder): show all of it
            covered[here] = _cover(here, stage)
            for real in covered[here].iterdir():
                _bind(real, here / real.name)


def _open_to_others(folder: Path, listable: bool = False) -> bool:
    """Others may pass through `folder` (and, `listable`, also read it: the path itself is imported from)."""
    need = 0o005 if listable else 0o001
    return os.stat(folder).st_mode & need == need


def _cover(folder: Path, stage: str) -> Path:
    """Cover `folder` with an empty tmpfs others may enter; return where its real content is still seen."""
    real = Path(tempfile.mkdtemp(prefix="covered-", dir=stage))
    subprocess.run(["mount", "--bind", str(folder), str(real)], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(folder)], check=True)
    return real


def _bind(real: Path, at: Path) -> None:
    if real.is_symlink():  # a link is made again (a dangling one cannot be bound)
        at.symlink_to(os.readlink(real))
        return
    at.mkdir() if real.is_dir() else at.touch()
    subprocess.run(["mount", "--bind", str(real), str(at)], check=True)


def main() -> None:
    uid, stage, snippet, *paths = sys.argv[1:]
    make_reachable(paths, stage)
    os.setgroups([])
    os.setresgid(int(uid), int(uid), int(uid))
    os.setresuid(int(uid), int(uid), int(uid))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"}
    os.execve(sys.executable, [sys.executable, "-c", snippet], env)


if __name__ == "__main__":
    main()
