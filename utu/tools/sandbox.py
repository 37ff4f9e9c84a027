"""The box that model-written code runs in: bubblewrap namespaces, a seccomp filter and cgroup limits.

With `sandbox: bwrap` (the default) the code runs under `bwrap` (Debian package `bubblewrap`):
- **no privilege on the host.** The box's processes run as a host user that is not root: the caller's own
  user, or, when we run as root, the host user `nobody` (uid 65534). A root caller first binds the Python it
  needs where that user can reach it (in a mount namespace of the call's own), then drops to `nobody` with no
  capabilities and no-new-privileges, and only then starts bwrap. (Run by root directly, bwrap maps the box's
  user to host root: model code could write `/proc/sys/kernel/core_pattern` and run commands as root.)
  Inside, every capability is dropped, `/proc/sys` is not writable and new user namespaces are disabled;
- a seccomp filter refuses what a Python snippet never needs: ptrace, mount, new namespaces, kernel keyrings,
  bpf, perf, module and kexec loading, and the like (`SECCOMP_DENIED`);
- no network at all (its own network namespace, not even loopback);
- its own PID namespace, so it sees and can signal only its own processes, and when its main process
  ends every process it started is killed (the namespace's init exits);
- a read-only view of only what the Python it runs on needs (its binary, pyvenv.cfg, standard library,
  site-packages, libpython, and /usr); no checkout, `.env`, database, HOME or /tmp of the host; `/` and `/dev`
  read-only;
- an empty environment but PATH/HOME/LANG, uid and gid 65534 inside;
- writable only /sandbox (also HOME), /tmp and /dev/shm: tmpfs capped in size (`disk_mb` each) and in files
  (`INODES_PER_MB` per MB), mounted by the launcher, gone after the call.
Where this process may create cgroups (root, or a user in a delegated cgroup), each call also gets a cgroup
capping its processes (`max_processes`) and its memory, killed as a whole after the call. Without one, memory is
bounded per process only, and `memory_bounds` says so at start. Per-process limits (address space, CPU time,
file size, open files) are set inside by the bootstrap.

`sandbox: none` runs the code as a plain child process (CPU/memory/file-size limits, empty environment,
temporary directory, still in its own cgroup where possible). It can read and write whatever the user
can and reach the network: only for code you trust.
"""

import contextlib
import errno
import functools
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from utu.errors import ConfigError

INSTALL_HINT = (
    "install bubblewrap (`apt-get install bubblewrap`, or `make install`, which does it as root), or set"
    " `sandbox: none` on the python_executor toolkit (unsafe: the code then runs as you, with your files and"
    " network)"
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
BOX_DIR = "/sandbox"  # the code's working directory and HOME; not a prefix of any folder bound into the box
CODE_PATH_IN_BOX = "/code/main.py"
BOX_HOST_UID = 65534  # "nobody": the host user a root caller's boxes run as
WRITABLE = {"/tmp": "tmp", BOX_DIR: "home", "/dev/shm": "shm"}  # box path -> its tmpfs in the staging folder
INODES_PER_MB = 256  # files (and folders) per MB of disk_mb on each writable tmpfs: about 1 KB of kernel memory each
LAUNCHER_PROCESSES = 3  # the launcher's `mount`, bwrap and its init: counted in the cgroup, not in max_processes
# Syscalls a Python snippet never needs and a box escape often does; each fails with EPERM.
SECCOMP_DENIED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "syslog",
    "open_by_handle_at",
    "name_to_handle_at",
    "iopl",
    "ioperm",
    "lookup_dcookie",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "sethostname",
    "setdomainname",
    "vhangup",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "memfd_create",  # anonymous files are in no tmpfs and no address space: only a memory cgroup would count them
    "memfd_secret",
    "shmget",  # System V shared memory and message queues: the same, and Python never needs them
    "msgget",
)
AF_VSOCK = 40  # sockets to the hypervisor: not in the box's network namespace, so refused by the filter
# clone() with any of these flags makes a namespace: refused. clone3 hides its flags in memory a filter cannot
# read, so it answers ENOSYS and the C library falls back to clone().
CLONE_NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)


@dataclass
class Box:
    """One call's command prefix (up to and including bwrap's `--`), the descriptors it reads, and its cgroups."""

    argv: list[str]
    pass_fds: tuple[int, ...] = ()
    cgroups: list[Path] = field(default_factory=list)
    bwrap: bool = False  # bwrap reports a child killed by signal N as exit code 128 + N

    def out_of_memory(self) -> bool:
        """Whether the kernel's OOM killer killed a process of this call's memory cgroup."""
        for group in self.cgroups:
            for name in ("memory.events", "memory.oom_control"):  # cgroup v2, v1
                with contextlib.suppress(OSError, ValueError):
                    for line in (group / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and int(value) > 0:
                            return True
        return False


@functools.cache
def bwrap_problem() -> str | None:
    """Why a box cannot run here (None if it can). Probed once per process with a real box."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed"
    if os.geteuid() == 0:
        missing = [tool for tool in ("unshare", "mount", "setpriv") if shutil.which(tool) is None]
        if missing:
            return f"running as root needs util-linux's {', '.join(missing)} to drop root before bwrap"
    try:
        seccomp_program()
    except OSError as e:  # pyseccomp loads libseccomp when imported
        return f"the seccomp filter cannot be built ({e}); install libseccomp2"
    command = [box_python(), "-I", CODE_PATH_IN_BOX]
    with open_box("pass", command, disk_mb=1, max_processes=8, memory_bytes=256 * 1024 * 1024) as box:
        probe = subprocess.run(box.argv, pass_fds=box.pass_fds, cwd="/", capture_output=True)
    if probe.returncode != 0:
        why = probe.stderr.decode(errors="replace").strip()[:200]
        if os.geteuid() == 0:  # the box runs as nobody: the Python it runs must be readable by others
            paths = ", ".join(python_paths())
            why += f" (as root, the box runs as uid {BOX_HOST_UID}: {paths} must be readable by it)"
        return f"bwrap cannot create a sandbox here: {why}"
    return None


def require_bwrap() -> None:
    problem = bwrap_problem()
    if problem:
        raise ConfigError(f"python_executor: {problem}: {INSTALL_HINT}")


@functools.cache
def seccomp_program() -> bytes:
    """The box's seccomp filter as a BPF program (bwrap's --add-seccomp-fd format), built by libseccomp."""
    import pyseccomp as sc  # loads libseccomp.so; only when a box is made

    rules = sc.SyscallFilter(sc.ALLOW)
    for name in SECCOMP_DENIED:
        with contextlib.suppress(ValueError, OSError):  # a syscall this architecture does not have
            rules.add_rule(sc.ERRNO(errno.EPERM), name)
    for flag in CLONE_NAMESPACE_FLAGS:
        rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, AF_VSOCK))
    with tempfile.TemporaryFile() as out:
        rules.export_bpf(out)
        out.seek(0)
        return out.read()


def _memfd(name: str, data: bytes) -> int:
    """An anonymous file holding `data`, read from its start by bwrap (no host path, no size limit of a pipe)."""
    fd = os.memfd_create(name)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def box_python() -> str:
    """The interpreter's path as the box sees it: the venv's own `bin/python` under the venv's real folder (the box
    binds real paths only, so a venv reached through a symlink would not be found), not the base Python it
    links to, which would lose the venv."""
    return os.path.join(os.path.realpath(sys.prefix), os.path.relpath(sys.executable, sys.prefix))


def python_paths() -> list[str]:
    """What the interpreter needs, each bound read-only at its own path: its binary (as the venv names it), the venv's
    pyvenv.cfg, the standard library, site-packages and libpython. Never a whole prefix: a venv made in a project
    folder (`python -m venv .`) would show the project's `.env` and database to the box."""
    wanted = {box_python(), os.path.realpath(getattr(sys, "_base_executable", sys.executable))}
    wanted |= {os.path.realpath(sysconfig.get_path(key)) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    if sys.prefix != sys.base_prefix:
        wanted.add(os.path.join(os.path.realpath(sys.prefix), "pyvenv.cfg"))
    shared = sysconfig.get_config_var("INSTSONAME") if sysconfig.get_config_var("Py_ENABLE_SHARED") else None
    if shared:
        wanted.add(os.path.realpath(os.path.join(sysconfig.get_config_var("LIBDIR"), shared)))
    wanted = {p for p in wanted if os.path.exists(p) and not p.startswith("/usr/")}
    # a path inside another one is bound with it (the base Python's site-packages inside its standard library)
    return sorted(p for p in wanted if not any(p.startswith(other + "/") for other in wanted))


def bwrap_args(code_fd: int, seccomp_fd: int, binds: dict[str, str], stage: str) -> list[str]:
    """bwrap's options: namespaces, `binds` (box path -> host path) read-only, the code, the filter, the writable
    folders (the launcher's size- and inode-capped tmpfs under `stage`), and everything else read-only."""
    # each bwrap option on one line with its values: they are read together
    # fmt: off
    argv = [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--cap-drop", "ALL",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--uid", "65534",
        "--gid", "65534",
        "--hostname", "sandbox",
        "--proc", "/proc",
        "--dev", "/dev",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin",
        "--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
        "--setenv", "HOME", BOX_DIR,
        "--setenv", "TMPDIR", "/tmp",
        "--setenv", "PATH", "/usr/bin:/bin",
        "--setenv", "LANG", "C.UTF-8",
        "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
        "--setenv", "MPLBACKEND", "Agg",
    ]
    # fmt: on
    for box_path, name in WRITABLE.items():
        argv += ["--bind", f"{stage}/{name}", box_path]
    for box_path, host_path in binds.items():
        argv += ["--ro-bind", host_path, box_path]
    argv += ["--chdir", BOX_DIR]
    argv += ["--ro-bind-data", str(code_fd), CODE_PATH_IN_BOX, "--add-seccomp-fd", str(seccomp_fd)]
    return [*argv, "--remount-ro", "/", "--remount-ro", "/dev", "--remount-ro", "/proc"]


@contextlib.contextmanager
def open_box(code: str, command: list[str], *, disk_mb: int, max_processes: int, memory_bytes: int) -> Iterator[Box]:
    """Everything one call's box needs to run `command` (which finds the code at CODE_PATH_IN_BOX), removed again
    on exit: the code, the filter and bwrap's options as anonymous files (so the staging folder does not show in
    the box's /proc/1/cmdline), its cgroups, and the staging folder where the launcher mounts its writable tmpfs
    (and, as root, binds the Python it needs)."""
    _sweep_leftovers()
    fds = [_memfd("main.py", code.encode("utf-8", errors="replace")), _memfd("seccomp", seccomp_program())]
    try:
        with call_cgroup(max_processes, memory_bytes) as groups, _staged(disk_mb) as (stage, binds, mounts):
            prefix = launcher([g / "cgroup.procs" for g in groups], mounts, as_root=os.geteuid() == 0)
            options = bwrap_args(fds[0], fds[1], binds, stage)
            fds.append(_memfd("bwrap-args", b"".join(a.encode() + b"\0" for a in options)))
            yield Box([*prefix, "bwrap", "--args", str(fds[2]), "--", *command], tuple(fds), groups, bwrap=True)
    finally:
        for fd in fds:
            os.close(fd)


@contextlib.contextmanager
def _staged(disk_mb: int) -> Iterator[tuple[str, dict[str, str], list[str]]]:
    """(the staging folder, bwrap's read-only binds, the launcher's mount commands). The launcher mounts a tmpfs
    capped in size and inodes for each writable folder of the box (bwrap caps only the size: empty files then
    grew the kernel's unreclaimable memory by gigabytes). As root, each Python path is also bound onto an entry of
    the staging folder that `nobody` can reach (the path may sit under /root, mode 0700)."""
    stage = tempfile.mkdtemp(prefix=f"utu-box-{os.getpid()}-", dir="/tmp")
    try:
        os.chmod(stage, 0o711)
        owner = f",uid={BOX_HOST_UID},gid={BOX_HOST_UID}" if os.geteuid() == 0 else ""  # else the user's own
        options = f"size={disk_mb * 1024 * 1024},nr_inodes={disk_mb * INODES_PER_MB},mode=0700{owner}"
        mounts = []
        for name in WRITABLE.values():
            os.mkdir(f"{stage}/{name}", 0o755)
            mounts.append(f"mount -t tmpfs -o {options} tmpfs {shlex.quote(f'{stage}/{name}')}")
        paths = python_paths()
        if os.geteuid() != 0:
            yield stage, {path: path for path in paths}, mounts
            return
        binds = {}
        for i, path in enumerate(paths):
            point = f"{stage}/python{i}"
            os.mkdir(point, 0o755) if os.path.isdir(path) else open(point, "x").close()
            mounts.append(f"mount --bind {shlex.quote(path)} {shlex.quote(point)}")
            binds[path] = point
        yield stage, binds, mounts
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # its mounts live only in the call's mount namespace


def reap_orphans(running: set[int]) -> None:
    """As PID 1 (a container without an init) this process inherits each box's inner bwrap, whose parent exits
    first; nobody else would reap it. Reap those zombies, and none of the children (`running`) asyncio waits for."""
    if os.getpid() != 1:
        return
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError, ValueError, ChildProcessError):
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
            pid = int(status.parent.name)
            # the init of a box's PID namespace (two pids: ours and its own 1), never a child we started
            nested_init = fields.get("NSpid", "").split()[1:] == ["1"]
            zombie = fields.get("State", "").startswith("Z") and fields.get("PPid", "").strip() == "1"
            if zombie and nested_init and fields.get("Name", "").strip() == "bwrap" and pid not in running:
                os.waitpid(pid, os.WNOHANG)


@functools.cache
def _sweep_leftovers() -> None:
    """Once per process: remove the cgroups and staging folders of boxes whose process was killed (kill -9
    leaves them), recognised by the dead pid in their names."""
    groups = [g for c in ("pids", "memory") if (d := _controller_dir(c)) for g in d.glob("utu-sandbox-*")]
    for path in [*groups, *Path("/tmp").glob("utu-box-*")]:
        pid = (path.name.split("-") + ["", "", ""])[2]  # utu-sandbox-<pid>-<hex>, utu-box-<pid>-<random>
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        if path.parent == Path("/tmp"):
            shutil.rmtree(path, ignore_errors=True)
        else:
            kill_cgroup(path, wait_seconds=0)


def launcher(procs_files: list[Path], mounts: list[str], as_root: bool = False) -> list[str]:
    """The command that starts bwrap: it joins the call's cgroups (so nothing the code starts escapes the
    limits), then, with `mounts`, runs them in a mount namespace of its own and starts bwrap from there: as root it
    then drops to `nobody`; as a user the namespace is a user namespace of the user's own (mounting needs one), in
    which bwrap nests the box's."""
    command: list[str] = []
    if procs_files:
        lines = [f"echo $$ > {shlex.quote(str(p))}" for p in procs_files]
        command = ["/bin/sh", "-c", "set -e\n" + "\n".join([*lines, 'exec "$@"']), "sh"]
    if not mounts:
        return command
    namespace = ["--mount"] if as_root else ["--user", "--map-root-user", "--mount"]
    last = 'exec "$@"'
    if as_root:
        last = (
            f"exec setpriv --reuid={BOX_HOST_UID} --regid={BOX_HOST_UID} --clear-groups --inh-caps=-all"
            ' --bounding-set=-all --no-new-privs -- "$@"'
        )
    script = "set -e\n" + "\n".join([*mounts, last])
    return [*command, "unshare", *namespace, "--propagation", "private", "--", "/bin/sh", "-c", script, "sh"]


@contextlib.contextmanager
def call_cgroup(max_processes: int, memory_bytes: int) -> Iterator[list[Path]]:
    """Fresh pids and memory cgroups for one call, when this process may create them (empty list if none
    could be made); on exit kills what is left and removes them."""
    made: list[Path] = []
    name = f"utu-sandbox-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    for controller, limits in (
        ("pids", {"pids.max": max_processes + LAUNCHER_PROCESSES}),
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
        yield made
    finally:
        for group in made:
            kill_cgroup(group)


def kill_cgroup(group: Path, wait_seconds: float = 5.0) -> None:
    """SIGKILL every process still in `group`, then remove it. A process the OOM killer hit can take a
    moment to leave, so removal is retried until `wait_seconds` pass."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            return  # already gone
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 9)
        with contextlib.suppress(OSError):
            group.rmdir()
            return
        if time.monotonic() > deadline:
            return  # a process stuck in uninterruptible sleep: the group holds no limits worth keeping
        time.sleep(0.005)


@functools.cache
def _controller_dir(controller: str) -> Path | None:
    """Where to make a cgroup for `controller`: the root of its hierarchy (cgroup v1's own, else v2's) when this
    process may write there (root), else the nearest cgroup on this process's own path that it may write to: one
    delegated to the user (systemd's `user@UID.service`, or a folder an admin handed over with chown)."""
    v1 = CGROUP_ROOT / controller
    if (v1 / "cgroup.procs").exists():
        return _writable_on_own_path(v1, _own_cgroup(controller))
    for v2 in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (v2 / "cgroup.subtree_control").exists():
            found = _writable_on_own_path(v2, _own_cgroup(""), controller)
            if found is not None:
                return found
    return None


def _own_cgroup(controller: str) -> str:
    """This process's cgroup in the hierarchy of `controller` ("" for cgroup v2's), from /proc/self/cgroup."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if controller in names.split(",") or (not controller and not names):
                return path
    return "/"


def _writable_on_own_path(root: Path, own: str, v2_controller: str | None = None) -> Path | None:
    """The hierarchy's root if writable, else the deepest writable folder from `own` up (on v2, one whose
    subtree_control enables `v2_controller`: only there do its children get the limit)."""
    parts = Path(own).relative_to("/").parts
    for folder in [root, *(root.joinpath(*parts[:n]) for n in range(len(parts), 0, -1))]:
        if v2_controller is not None:
            try:
                if v2_controller not in (folder / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
        if os.access(folder, os.W_OK):
            return folder
    return None


def memory_cgroup_available() -> bool:
    return _controller_dir("memory") is not None


def memory_bounds(memory_mb: int, disk_mb: int, max_processes: int) -> str:
    """One line saying how a box's memory is bounded here: by a memory cgroup, or, without one (a user that is not
    root and has no delegated cgroup), only by per-process limits, which several processes add up."""
    disk = f"3 tmpfs of {disk_mb} MB and {disk_mb * INODES_PER_MB} files each; memfd and System V memory refused"
    if memory_cgroup_available():
        return f"python_executor: each box is held by a memory cgroup ({memory_mb} MB plus its {disk})"
    return (
        f"python_executor: no memory cgroup can be made here (not root, none delegated): a box's processes are"
        f" bounded one by one ({memory_mb} MB of address space each, up to {max_processes} processes) and on disk"
        f" ({disk}), but the kernel memory their sockets and pipes hold is not; run as root or delegate a cgroup for"
        " one bound over all of a box, or run only code you trust"
    )
