"""The box that model-written code runs in: bubblewrap namespaces plus cgroup limits.

With `sandbox: bwrap` (the default) the code runs under `bwrap` (Debian package `bubblewrap`):
- no network at all (its own network namespace, not even loopback);
- its own PID namespace, so it sees and can signal only its own processes, and when its main process
  ends every process it started is killed (the namespace's init exits);
- a read-only view of only the Python it runs on (the interpreter's prefix, the venv's packages and
  /usr); no checkout, `.env`, database, HOME or /tmp of the host;
- an empty environment but PATH/HOME/LANG, uid and gid 65534 (nobody) inside;
- a private writable directory (/sandbox, also HOME) and /tmp, both size-capped tmpfs (`disk_mb`), gone after the call.
Where this process may create cgroups (root on a cgroup v1 or v2 host, as here), each call also gets a
cgroup capping its processes (`max_processes`) and its memory, killed as a whole after the call.
Per-process limits (address space, CPU time, file size) are set inside by the bootstrap.

`sandbox: none` runs the code as a plain child process (CPU/memory/file-size limits, empty environment,
temporary directory, still in its own cgroup where possible). It can read and write whatever the user
can and reach the network: only for code you trust.
"""

import contextlib
import functools
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

from utu.errors import ConfigError

INSTALL_HINT = (
    "install bubblewrap (`apt-get install bubblewrap`, or `make install`, which does it as root), or set"
    " `sandbox: none` on the python_executor toolkit (unsafe: the code then runs as you, with your files and"
    " network)"
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
BOX_DIR = "/sandbox"  # the code's working directory and HOME; not a prefix of any folder bound into the box


@functools.cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run here (None if it can). Probed once per process with a real sandbox."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    probe = subprocess.run([*bwrap_prefix(1), "--", sys.executable, "-I", "-c", "pass"], capture_output=True)
    if probe.returncode != 0:
        return f"bwrap cannot create a sandbox here: {probe.stderr.decode(errors='replace').strip()[:200]}"
    return None


def require_bwrap() -> None:
    problem = bwrap_problem()
    if problem:
        raise ConfigError(f"python_executor: {problem}: {INSTALL_HINT}")


def _python_roots() -> list[str]:
    """The folders the interpreter needs: its own prefix and the venv's (read-only)."""
    roots = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)}
    return sorted(r for r in roots if not r.startswith("/usr/"))


def bwrap_prefix(disk_mb: int) -> list[str]:
    """The bwrap command up to `--`: namespaces, read-only Python, size-capped private BOX_DIR and /tmp."""
    size = str(disk_mb * 1024 * 1024)
    argv = [
        "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
        "--uid", "65534", "--gid", "65534", "--hostname", "sandbox",
        "--proc", "/proc", "--dev", "/dev",
        "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin", "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", BOX_DIR, "--chdir", BOX_DIR,
        "--setenv", "HOME", BOX_DIR, "--setenv", "TMPDIR", "/tmp", "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--setenv", "MPLBACKEND", "Agg",
    ]  # fmt: skip
    for root in _python_roots():
        argv += ["--ro-bind", root, root]
    return argv


@contextlib.contextmanager
def call_cgroup(max_processes: int, memory_bytes: int) -> Iterator[list[Path]]:
    """Fresh pids and memory cgroups for one call, when this process may create them: yields the
    `cgroup.procs` files to join (empty if none could be made); on exit kills what is left and removes them."""
    made: list[Path] = []
    name = f"utu-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    for controller, limits in (
        ("pids", {"pids.max": max_processes}),
        ("memory", {"memory.limit_in_bytes": memory_bytes, "memory.max": memory_bytes}),
    ):
        folder = _controller_dir(controller)
        if folder is None:
            continue
        group = folder / name
        try:
            group.mkdir()
        except OSError:
            continue
        made.append(group)
        for key, value in limits.items():
            with contextlib.suppress(OSError):
                (group / key).write_text(str(value))
    try:
        yield [g / "cgroup.procs" for g in made]
    finally:
        for group in made:
            kill_cgroup(group)


def kill_cgroup(group: Path) -> None:
    """SIGKILL every process still in `group`, then remove it (bounded wait)."""
    for _ in range(200):
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            return
        if not pids:
            with contextlib.suppress(OSError):
                group.rmdir()
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)
        os.sched_yield()
        with contextlib.suppress(OSError):
            group.rmdir()
            return
    # Still busy (a process in uninterruptible sleep): leave the empty-ish group; it holds no resources.


@functools.cache
def _controller_dir(controller: str) -> Path | None:
    """Where to make a cgroup for `controller`: cgroup v1's own hierarchy, else a writable v2 one."""
    v1 = CGROUP_ROOT / controller
    if (v1 / "cgroup.procs").exists() and os.access(v1, os.W_OK):
        return v1
    for v2 in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        try:
            enabled = (v2 / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if controller in enabled and os.access(v2, os.W_OK):
            return v2
    return None


def join_and_exec(procs_files: list[Path], argv: list[str]) -> list[str]:
    """`argv` run by a shell that first moves itself into the call's cgroups, so that nothing the code
    starts can be forked before the limits apply."""
    if not procs_files:
        return argv
    joins = "".join(f'echo $$ > "{p}" && ' for p in procs_files)
    return ["/bin/sh", "-c", joins + 'exec "$@"', "sh", *argv]
