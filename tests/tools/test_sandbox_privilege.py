"""The code box holds no privilege on the host: one test per escape, run as root and as a user that is not.

Run by root, bwrap once mapped the box's user to host root: model code wrote /proc/sys/kernel/core_pattern and
the kernel ran its command as root on the host. Each escape below is tried from inside the box.
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from utu.tools import sandbox
from utu.tools.python_executor import run_python

AS_USER = Path(__file__).with_name("as_user.py")
CHECKOUT = Path(__file__).resolve().parents[2]
TEST_UID = 4242  # a host user with no name and no files: what a careful admin would run utu as

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="root runs both modes; as a user this file has no root")


async def in_box(mode: str, code: str, cgroups: list[Path] = (), **limits) -> dict:
    """`code`'s result from a box made by this (root) process, or by a process running as TEST_UID (that process
    first joins `cgroups`, as a user in a delegated cgroup would be)."""
    if mode == "root":
        return await run_python(code, **limits)
    snippet = (
        "import asyncio, json\nfrom utu.tools.python_executor import run_python\n"
        f"print(json.dumps(asyncio.run(run_python({code!r}, **{limits!r}))))"
    )
    return json.loads((await as_user(snippet, cgroups)).strip().splitlines()[-1])


async def as_user(snippet: str, cgroups: list[Path] = ()) -> str:
    """What `snippet` prints, run with this checkout's Python as TEST_UID, in `cgroups`."""
    paths = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.executable, CHECKOUT)}
    stage = tempfile.mkdtemp(prefix="as-user-")
    join = [f"echo $$ > {g / 'cgroup.procs'}" for g in cgroups]
    argv = ["/bin/sh", "-c", "\n".join([*join, 'exec "$@"']), "sh", "unshare", "--mount", "--propagation", "private"]
    argv += ["--", sys.executable, "-I", str(AS_USER), str(TEST_UID), stage, snippet, *sorted(paths)]
    proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await proc.communicate()
    shutil.rmtree(stage, ignore_errors=True)  # its binds lived in the child's mount namespace only
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


MODES = ["root", "user"]


@pytest.mark.parametrize("mode", MODES)
async def test_core_pattern_cannot_be_written(mode, tmp_path):
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    proof = tmp_path / "ran-as-root"
    code = (
        "import os\n"
        "try:\n"
        f"    open('/proc/sys/kernel/core_pattern', 'w').write('|/bin/sh -c id>{proof}')\n"
        "    print('written')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "if os.fork() == 0:\n"
        "    os.abort()\n"  # the crash that would run the pattern's command on the host
        "os.wait()\n"
    )
    try:
        result = await in_box(mode, code)
    finally:
        after = Path("/proc/sys/kernel/core_pattern").read_text()
        if after != before:  # the escape worked: put the host back before failing
            Path("/proc/sys/kernel/core_pattern").write_text(before)
    assert after == before and result["output"].startswith("refused"), result
    assert not proof.exists()


@pytest.mark.parametrize("mode", MODES)
async def test_no_sysctl_is_writable(mode):
    code = (
        "import os\nwritable = []\n"
        "for folder, _, files in os.walk('/proc/sys'):\n"
        "    for name in files:\n"
        "        try:\n"
        "            with open(os.path.join(folder, name), 'r+') as f:\n"
        "                writable.append(f.name)\n"
        "        except OSError:\n"
        "            pass\n"
        "print(len(writable), writable[:5])\n"
        "try:\n"
        "    open('/proc/sys/vm/drop_caches', 'w').write('3')\n"
        "    print('dropped')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    result = await in_box(mode, code, timeout=60)
    count_line, last = result["output"].strip().splitlines()
    assert count_line.startswith("0 "), result
    assert last.startswith("refused"), result


@pytest.mark.parametrize("mode", MODES)
async def test_ptrace_of_pid_1_is_refused(mode):
    code = (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"  # PTRACE_ATTACH to the box's init
    )
    result = await in_box(mode, code)
    assert result["output"].split() == ["-1", "1"], result  # EPERM


@pytest.mark.parametrize("mode", MODES)
async def test_no_nested_namespace(mode):
    code = (
        "import ctypes, subprocess\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(subprocess.run(['unshare', '-Urm', 'id'], capture_output=True).returncode)\n"
        "print(libc.unshare(0x10000000), libc.unshare(0x00020000))\n"  # CLONE_NEWUSER, CLONE_NEWNS
    )
    result = await in_box(mode, code)
    nested, direct = result["output"].strip().splitlines()
    assert nested != "0" and direct == "-1 -1", result


@pytest.mark.parametrize("mode", MODES)
async def test_io_uring_and_vsock_are_refused(mode):
    code = (
        "import ctypes, socket\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "params = ctypes.create_string_buffer(120)\n"
        "print(libc.syscall(425, 4, params), ctypes.get_errno())\n"  # io_uring_setup on x86_64 and arm64
        "try:\n"
        "    socket.socket(40, socket.SOCK_STREAM)\n"  # AF_VSOCK: the hypervisor's sockets
        "    print('vsock open')\n"
        "except OSError as e:\n"
        "    print('vsock', e.errno)\n"
    )
    result = await in_box(mode, code)
    uring, vsock = result["output"].strip().splitlines()
    assert uring == "-1 1" and vsock == "vsock 97", result  # EPERM; EAFNOSUPPORT


@pytest.mark.parametrize("mode", MODES)
async def test_the_box_is_not_root_on_the_host(mode):
    mark = f"utu-marker-{uuid.uuid4().hex}"
    code = (
        "import subprocess, time\n"
        "status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines())\n"
        "print({k: status[k].strip() for k in ('CapEff', 'CapPrm', 'CapBnd', 'NoNewPrivs', 'Seccomp')}, flush=True)\n"
        f"subprocess.run(['/bin/sh', '-c', 'sleep 3 # {mark}'])\n"
    )
    task = asyncio.create_task(in_box(mode, code, timeout=20))
    host_uids = set()
    for _ in range(200):
        await asyncio.sleep(0.05)
        # the box's shell only: the [user] launcher's own argv holds the mark too, while it is still root
        ps = subprocess.run(["pgrep", "-f", f"^/bin/sh -c sleep 3 # {mark}"], capture_output=True, text=True)
        for pid in ps.stdout.split():
            with open(f"/proc/{pid}/status") as f:
                host_uids |= {int(x) for line in f if line.startswith("Uid:") for x in line.split()[1:]}
        if host_uids:
            break
    result = await task
    assert host_uids and 0 not in host_uids, host_uids
    # (/proc/self/uid_map is no witness: --disable-userns nests a second user namespace, whose map reads
    # relative to bwrap's own; the host's view of the process above is what counts.)
    status = eval(result["output"])  # noqa: S307 - our own print of a dict of strings
    assert status["CapEff"] == status["CapPrm"] == status["CapBnd"] == "0000000000000000", status
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status


@pytest.mark.parametrize("mode", MODES)
async def test_only_the_capped_folders_are_writable(mode):
    code = (
        "import os\n"
        "for path in ('/x', '/dev/x', '/proc/x', '/usr/x'):\n"
        "    try:\n"
        "        open(path, 'w')\n"
        "        print(path, 'written')\n"
        "    except OSError as e:\n"
        "        print(path, 'refused')\n"
        "n = 0\n"
        "try:\n"
        "    for i in range(1500):\n"
        "        open(f'/dev/shm/f{i}', 'wb').write(b'x' * 1024 * 1024)\n"
        "        n += 1\n"
        "except OSError:\n"
        "    pass\n"
        "print('shm', n)\n"
        "seen = [open(p, 'rb').read() for p in ('/proc/self/mountinfo', '/proc/1/cmdline', '/proc/1/environ')]\n"
        "print('host paths', any(b'/tmp/utu-' in s for s in seen) or seen[2] not in (b'', b'PWD=/\\x00'))\n"
    )
    result = await in_box(mode, code, disk_mb=8, timeout=30)
    lines = result["output"].strip().splitlines()
    assert lines[:4] == ["/x refused", "/dev/x refused", "/proc/x refused", "/usr/x refused"], result
    assert int(lines[4].split()[1]) <= 8, result
    assert lines[5] == "host paths False", result


async def test_an_out_of_memory_kill_says_so_and_leaves_no_cgroup():
    code = (
        "import os, time\n"
        "r, w = os.pipe()\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        hold = b'x' * (200 * 1024 * 1024)\n"
        "        os.write(w, b'.')\n"
        "        time.sleep(30)\n"
        "for _ in range(3):\n"
        "    os.read(r, 1)\n"
        "hold = b'y' * (500 * 1024 * 1024)\n"  # the box's largest process: the one the OOM killer picks
        "print('survived')\n"
    )
    if sandbox._controller_dir("memory") is None:
        pytest.skip("this host lets no process make a memory cgroup")
    result = await run_python(code, memory_mb=600, disk_mb=8, timeout=60)
    assert not result["success"] and "out-of-memory" in result["error"], result
    mine = f"utu-sandbox-{os.getpid()}-*"
    assert not [*sandbox.CGROUP_ROOT.glob(mine), *sandbox.CGROUP_ROOT.glob(f"*/{mine}")]


def test_what_a_killed_run_left_is_swept(tmp_path):
    dead = 2**22 + 12345  # above any pid this machine hands out (pid_max is at most 2**22)
    staged = Path(f"/tmp/utu-box-{dead}-x")
    staged.mkdir()
    groups = [
        d / f"utu-sandbox-{dead}-x"
        for d in (sandbox._controller_dir("pids"), sandbox._controller_dir("memory"))
        if d is not None
    ]
    for group in groups:
        group.mkdir()
    sandbox._sweep_leftovers.__wrapped__()
    assert not staged.exists() and not [g for g in groups if g.exists()]


@pytest.mark.parametrize("mode", MODES)
async def test_anonymous_files_are_refused(mode):
    """Without a memory cgroup, 200 memfds of 10 MB held 2,000 MB past memory_mb=256, and detached System V
    segments 3 GB: no limit counts them."""
    code = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "try:\n"
        "    os.memfd_create('x')\n"
        "    print('created')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "print(libc.shmget(0, 128 * 1024 * 1024, 0o1600), ctypes.get_errno())\n"  # IPC_PRIVATE, IPC_CREAT
        "print(libc.msgget(0, 0o1600), ctypes.get_errno())\n"
    )
    result = await in_box(mode, code)
    assert result["output"].split("\n")[:3] == ["refused 1", "-1 1", "-1 1"], result  # EPERM


@pytest.mark.parametrize("mode", MODES)
async def test_empty_files_stop_at_the_inode_cap(mode):
    """Empty files use no tmpfs space but about 1 KB of kernel memory each: with disk_mb=8 they once grew the
    kernel's unreclaimable memory by 2.3 GB in 20 s."""
    code = (
        "import os\nn = {}\n"
        "for folder in ('/tmp', '/sandbox', '/dev/shm'):\n"
        "    n[folder] = 0\n"
        "    try:\n"
        "        for i in range(100000):\n"
        "            os.close(os.open(f'{folder}/e{i}', os.O_CREAT | os.O_WRONLY))\n"
        "            n[folder] += 1\n"
        "    except OSError as e:\n"
        "        n[folder] = (n[folder], e.errno)\n"
        "print(n)\n"
    )
    result = await in_box(mode, code, disk_mb=8, timeout=60)
    cap = 8 * sandbox.INODES_PER_MB
    for folder, (count, error) in eval(result["output"]).items():  # noqa: S307 - our own print
        assert cap - 10 < count < cap and error == 28, (folder, result)  # ENOSPC


@pytest.mark.parametrize("mode", MODES)
async def test_one_allocation_past_the_limit_fails(mode):
    result = await in_box(mode, "x = bytearray(8 * 1024**3)\nprint('allocated')", memory_mb=256)
    assert not result["success"] and "memory" in result["error"].lower(), result


async def test_a_user_is_told_at_start_which_bounds_hold():
    snippet = (
        "from utu.tools import sandbox\n"
        "print(sandbox.memory_cgroup_available())\n"
        "print(sandbox.memory_bounds(256, 8, 16))\n"
    )
    available, line = (await as_user(snippet)).strip().splitlines()
    assert available == "False", line  # this host delegates no cgroup to TEST_UID
    assert "no memory cgroup" in line and "up to 16 processes" in line and "sockets and pipes" in line, line
    assert sandbox.memory_cgroup_available() and "held by a memory cgroup" in sandbox.memory_bounds(256, 8, 16)


async def test_a_cgroup_delegated_to_the_user_holds_its_box():
    """A user who is not root, in a cgroup handed to it (chown, as systemd's Delegate= does), gets each box its
    own memory cgroup: four processes of 140 to 260 MB (each under memory_mb=300, together past the call's cap
    of memory_mb + 3 disk_mb + 256) are held as one: the largest is killed."""
    delegated = []
    for controller in ("memory", "pids"):
        root = sandbox._controller_dir(controller)
        if root is None:
            pytest.skip("this host lets no process make cgroups")
        group = root / f"utu-delegated-{uuid.uuid4().hex[:8]}"
        group.mkdir()
        delegated.append(group)
        for path in [group, *group.iterdir()]:
            os.chown(path, TEST_UID, TEST_UID)
    code = (
        "import os, time\n"
        "r, w = os.pipe()\n"
        "for _ in range(3):\n"
        "    if os.fork() == 0:\n"
        "        hold = b'x' * (140 * 1024 * 1024)\n"
        "        os.write(w, b'.')\n"
        "        time.sleep(30)\n"
        "for _ in range(3):\n"
        "    os.read(r, 1)\n"
        "hold = b'y' * (260 * 1024 * 1024)\n"  # the largest process: the one the OOM killer picks
        "print('survived')\n"
    )
    try:
        result = await in_box("user", code, cgroups=delegated, memory_mb=300, disk_mb=8, timeout=60)
        assert not result["success"] and "out-of-memory" in result["error"], result
        assert not [g for group in delegated for g in group.glob("utu-sandbox-*")]  # each call's group removed
    finally:
        for group in delegated:
            sandbox.kill_cgroup(group)


def test_as_pid_1_the_boxes_leave_no_zombie(tmp_path):
    """In a container without an init, utu is PID 1 and inherits each box's inner bwrap: 20 calls left 20
    zombies (on a long eval, the machine runs out of pids)."""
    script = tmp_path / "pid1.py"
    script.write_text(
        "import asyncio, os\nfrom utu.tools.python_executor import run_python\n"
        "async def main():\n"
        "    for _ in range(10):\n"
        "        assert (await run_python('print(1)'))['output'] == '1\\n'\n"
        "    zombies = [p for p in os.listdir('/proc') if p.isdigit() and open(f'/proc/{p}/stat').read()"
        ".rsplit(')', 1)[1].split()[0] == 'Z']\n"
        "    print(os.getpid(), len(zombies))\n"
        "asyncio.run(main())\n"
    )
    argv = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, str(script)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    pid, zombies = done.stdout.split()
    assert pid == "1" and int(zombies) <= 1, done.stdout  # the last call's, reaped by the next
