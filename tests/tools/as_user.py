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
            if here not in covered and not os.stat(here).st_mode & 0o001:
                real = Path(tempfile.mkdtemp(prefix="covered-", dir=stage))
                subprocess.run(["mount", "--bind", str(here), str(real)], check=True)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(here)], check=True)
                covered[here] = real
                continue  # the same step again, now under the tmpfs
            step = here / parts[0]
            if here in covered and not os.path.lexists(step):
                real = covered[here] / parts[0]
                step.mkdir() if real.is_dir() else step.touch()
                subprocess.run(["mount", "--bind", str(real), str(step)], check=True)
            here, parts = step, parts[1:]


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
