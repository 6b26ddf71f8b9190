"""The bubblewrap sandbox: isolation facts seen from inside, limits, statuses, measurements,
deadlines, concurrency slots and the refusal to run without bubblewrap."""

from __future__ import annotations

import concurrent.futures
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import missing
from diffugrpo_plugin.sandbox import host as sandbox_module
from diffugrpo_plugin.sandbox.config import SandboxConfig, SandboxError, SandboxUnavailable
from diffugrpo_plugin.sandbox.host import Sandbox
from diffugrpo_plugin.sandbox.jobs import Job
from diffugrpo_plugin.sandbox.probe import instruction_counter_available
from reward_support import TEST_UID_BASE, bwrap_children, processes_with_uids, tight_sandbox

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def box() -> Sandbox:
    return tight_sandbox()


def _inside(box: Sandbox, source: str, **job) -> dict:
    """Runs ``source`` (which prints one JSON object) in the sandbox and returns that object."""
    result = box.run([Job(source, **job)])[0]
    assert result.status == "ok", result
    return json.loads(result.stdout)


@pytest.mark.sandbox
def test_job_runs_unprivileged_in_its_own_namespaces(box, tmp_path):
    host_file = tmp_path / "host_only.txt"
    host_file.write_text("visible?")
    facts = _inside(
        box,
        f"""
import ctypes, json, os, socket
header, data = (ctypes.c_uint32 * 2)(0x20080522, 0), (ctypes.c_uint32 * 6)()  # capget, version 3
ctypes.CDLL(None).capget(header, data)
print(json.dumps({{
    "uid": os.getuid(), "cap_eff": data[0] | data[3] << 32,
    "pids": sorted(int(p) for p in os.listdir('/proc') if p.isdigit()),
    "interfaces": [name for _, name in socket.if_nameindex()],
    "host_file_visible": os.path.exists({str(host_file)!r}),
    "env": sorted(os.environ), "cwd": os.getcwd(),
}}))
""",
    )
    if os.geteuid() == 0:
        assert facts["uid"] >= TEST_UID_BASE and facts["cap_eff"] == 0
    assert len(facts["pids"]) <= 4  # bwrap's init, the launcher, this job: nothing of the host
    assert facts["interfaces"] == ["lo"]
    assert not facts["host_file_visible"]
    assert facts["env"] == sorted(
        ["HOME", "LANG", "PATH", "PWD", "MALLOC_ARENA_MAX", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"]
    )
    assert facts["cwd"] == "/work"


@pytest.mark.sandbox
def test_system_dirs_are_read_only_and_work_dir_is_writable(box):
    facts = _inside(
        box,
        """
import json
def try_write(path):
    try:
        open(path, 'w').write('x')
        return 'written'
    except OSError as exc:
        return exc.__class__.__name__ + ':' + str(exc.errno)
print(json.dumps({"usr": try_write('/usr/evil'), "work": try_write('/work/ok'), "tmp": try_write('/tmp/ok')}))
""",
    )
    assert facts["usr"].endswith(":30") or facts["usr"].startswith("PermissionError")  # EROFS or EACCES
    assert facts["work"] == "written" and facts["tmp"] == "written"


@pytest.mark.sandbox
def test_limits_are_set_hard_inside_the_job(box):
    limits = _inside(
        box,
        """
import json, resource
names = ['RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_NPROC', 'RLIMIT_FSIZE', 'RLIMIT_NOFILE', 'RLIMIT_CORE']
print(json.dumps({n: resource.getrlimit(getattr(resource, n)) for n in names}))
""",
        timeout_s=1.5,
    )
    assert limits["RLIMIT_AS"] == [256 << 20, 256 << 20]
    assert limits["RLIMIT_CPU"] == [3, 4]  # ceil(1.5) + 1 soft, one more hard
    assert limits["RLIMIT_FSIZE"] == [1 << 20, 1 << 20]
    assert limits["RLIMIT_NOFILE"] == [64, 64]
    assert limits["RLIMIT_CORE"] == [0, 0]
    assert limits["RLIMIT_NPROC"][0] == (16 if os.geteuid() == 0 else 18)


@pytest.mark.sandbox
@pytest.mark.parametrize(
    "source, status, detail",
    [
        ("print('hi')", "ok", {"stdout": "hi\n"}),
        ("raise ValueError('bad')", "exception", {"exception": "ValueError", "message": "bad"}),
        ("def f(:\n  pass", "exception", {"exception": "SyntaxError"}),
        ("import sys; sys.exit(3)", "exit", {"exit_code": 3}),
        ("import os; os._exit(0)", "vanished", {"exit_code": 0}),
        ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "signal", {"signal": 11}),
        ("while True: pass", "timeout", {}),
    ],
)
def test_statuses(box, source, status, detail):
    result = box.run([Job(source, timeout_s=0.5)])[0]
    assert result.status == status
    for key, value in detail.items():
        assert getattr(result, key) == value


@pytest.mark.sandbox
def test_a_job_that_times_out_does_not_stop_the_next_ones(box):
    results = box.run([Job("import time; time.sleep(5)", timeout_s=0.3), Job("print(6 * 7)")])
    assert [r.status for r in results] == ["timeout", "ok"]
    assert results[1].stdout == "42\n"


@pytest.mark.sandbox
def test_stdin_is_fed_and_output_is_capped(box):
    echoed, flood = box.run([Job("print(input()[::-1])", stdin="abc\n"), Job("while True: print('y' * 999)")])
    assert echoed.stdout == "cba\n"
    assert flood.status == "output_limit"  # stopped once past the cap: the rest can no longer match
    assert flood.stdout_truncated and len(flood.stdout) == 20_000


@pytest.mark.sandbox
def test_time_and_memory_are_measured_inside_the_sandbox(box):
    # generous wall-clock limits: on a loaded host the 0.3 s CPU spin needs far more wall time
    idle, busy, big = box.run(
        [
            Job("x = 1", timeout_s=10.0),
            Job("import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass", timeout_s=10.0),
            Job("block = bytearray(100 * 2**20)\nblock[::4096] = b'x' * len(block[::4096])", timeout_s=10.0),
        ]
    )
    assert [job.status for job in (idle, busy, big)] == ["ok"] * 3, (idle, busy, big)
    assert idle.cpu_s < 0.1 and idle.memory_kb < 5_000
    assert busy.cpu_s >= 0.25
    if instruction_counter_available():
        assert busy.instructions > 10_000_000
    else:  # no PMU exposed (virtual machines, this CI box): reported as unknown, never as zero
        assert busy.instructions is None
    assert 95_000 <= big.memory_kb <= 130_000  # the 100 MiB it touched, not the interpreter's own


@pytest.mark.sandbox
def test_a_counted_job_reports_the_lines_its_program_ran(box):
    loop = "x = 0\nfor i in range(5):\n    x += i\nprint(x)\n"
    threaded = (
        "import threading\ndef work():\n    for i in range(3):\n        pass\n"
        "t = threading.Thread(target=work)\nt.start()\nt.join()\n"
    )
    plain, *counted = box.run(
        [Job(loop), Job(loop, count_lines=True), Job(loop, count_lines=True), *[Job(threaded, count_lines=True)] * 3]
    )
    assert plain.lines is None and plain.stdout == "10\n"
    # line 1 once, the `for` line 5 + 1 times (the last finds range exhausted), the body 5 times, print once
    assert [job.lines for job in counted[:2]] == [13, 13]
    # the thread's body (4 + 3 lines) and the main thread's 5 lines at least, the same count every time
    thread_counts = {job.lines for job in counted[2:]}
    assert len(thread_counts) == 1 and thread_counts.pop() >= 12


@pytest.mark.sandbox
def test_a_pool_of_threads_is_counted_the_same_every_time(box):
    pooled = (
        "from concurrent.futures import ThreadPoolExecutor\ndef square(x):\n    return x * x\n"
        "with ThreadPoolExecutor(2) as pool:\n    print(list(pool.map(square, range(50))))\n"
    )
    counts = {job.lines for job in box.run([Job(pooled, count_lines=True)] * 3)}
    assert len(counts) == 1 and counts.pop() >= 50 + 4  # square's line 50 times, the module's 4 lines


@pytest.mark.sandbox
def test_a_program_that_replaces_the_line_tracer_gets_no_count(box):
    stopped, profiled, threads_traced = box.run(
        [
            Job("import sys\nsys.settrace(None)\nfor i in range(100):\n    pass\n", count_lines=True),
            Job("import sys\nsys.setprofile(lambda *a: None)\nx = 1\n", count_lines=True),
            Job("import threading\nthreading.settrace(lambda *a: None)\nx = 1\n", count_lines=True),
        ]
    )
    assert [job.status for job in (stopped, profiled, threads_traced)] == ["ok"] * 3
    assert stopped.lines is None and profiled.lines is None and threads_traced.lines is None


@pytest.mark.sandbox
def test_a_program_that_breaks_what_the_counter_needs_still_ends_in_its_own_report(box):
    """The harness's last steps run in the job's process after the program: they must not fail because of it."""
    unthreaded = "import sys\nsys.modules.pop('threading', None)\nraise SystemExit(3)\n"
    no_settrace = "import sys\ndef broken(*a):\n    raise RuntimeError('no')\nsys.settrace = broken\nx = 1\n"
    first, second, after = box.run(
        [Job(unthreaded, count_lines=True), Job(no_settrace, count_lines=True), Job("print('next')", count_lines=True)]
    )
    # the counter holds its own references: what the program removed or replaced is not what it calls
    assert (first.status, first.exit_code, first.lines) == ("exit", 3, 3)
    assert second.status == "ok" and second.lines == 4
    assert (after.status, after.stdout, after.lines) == ("ok", "next\n", 1)


@pytest.mark.sandbox
def test_a_counted_job_gets_the_tracers_time_and_no_more():
    """6x the CPU limit, and the 5 extra seconds on the wall clock, not 6x the wall limit: a program that
    sleeps when traced holds its slot little longer than one that sleeps anyway."""
    box = Sandbox(SandboxConfig(timeout_s=1.0, wall_timeout_factor=3.0))
    plain, counted = box._job_payload(Job("x = 1")), box._job_payload(Job("x = 1", count_lines=True))
    assert (plain["cpu_s"], plain["wall_s"]) == (2, 3.0)
    assert (counted["cpu_s"], counted["wall_s"]) == (7, 8.0)


@pytest.mark.sandbox
def test_whole_run_deadline_kills_the_sandbox(box, monkeypatch):
    """If the launcher itself stalls, the caller still gets an answer at the run's deadline."""
    monkeypatch.setattr(Sandbox, "_deadline_s", lambda self, payload: 1.0)
    started = time.monotonic()
    results = box.run([Job("import time; time.sleep(30)", timeout_s=30)])
    assert time.monotonic() - started < 10
    assert results[0].status == "timeout"
    assert bwrap_children() == []


@pytest.mark.sandbox
def test_concurrent_runs_use_separate_uids(box):
    if os.geteuid() != 0:
        pytest.fail("the uid-per-slot layout is the root mode; run this suite as root, as CI does")
    uids: list[int] = []
    barrier = threading.Barrier(2)

    def one():
        barrier.wait()
        uids.append(int(box.run([Job("import os, time; print(os.getuid()); time.sleep(0.5)")])[0].stdout))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(uids) == [TEST_UID_BASE, TEST_UID_BASE + 1]
    assert processes_with_uids(TEST_UID_BASE, TEST_UID_BASE + 64) == []


def test_without_bubblewrap_untrusted_code_does_not_run(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(sandbox_module.UNSAFE_ENV_VAR, raising=False)
    with pytest.raises(SandboxUnavailable, match=r"apt-get install -y bubblewrap.*DIFFUGRPO_UNSAFE_NO_SANDBOX=1"):
        Sandbox(SandboxConfig())


def test_explicit_unsafe_fallback_runs_with_rlimits_only(monkeypatch, capsys):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv(sandbox_module.UNSAFE_ENV_VAR, "1")
    box = Sandbox(SandboxConfig(timeout_s=1.0, memory_mb=256, uid_base=TEST_UID_BASE + 128))
    assert not box.isolated
    assert "UNSAFE" in capsys.readouterr().err
    ok, slow = box.run([Job("import os; print(os.getcwd() != '/work')"), Job("while True: pass", timeout_s=0.3)])
    assert (ok.status, ok.stdout, slow.status) == ("ok", "True\n", "timeout")


def test_config_option_also_allows_the_fallback(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(sandbox_module.UNSAFE_ENV_VAR, raising=False)
    config = SandboxConfig.from_mapping({sandbox_module.FALLBACK_CONFIG_KEY: True})
    assert not Sandbox(config).isolated


@pytest.mark.sandbox
def test_a_sandbox_that_cannot_start_is_a_harness_error_not_a_verdict(box, monkeypatch):
    broken = tight_sandbox()
    real_argv = Sandbox._bwrap_argv
    monkeypatch.setattr(Sandbox, "_bwrap_argv", lambda self, *binds: [real_argv(self)[0], "--no-such-option"])
    with pytest.raises(SandboxError, match="the sandbox failed to start.*no-such-option"):
        broken.check()


@pytest.mark.sandbox
def test_unusable_interpreter_is_named():
    with pytest.raises(SandboxError, match="cannot use '/nonexistent/python'.*python_executable"):
        tight_sandbox(python_executable="/nonexistent/python").check()


def test_config_errors_name_the_option():
    with pytest.raises(ValueError, match=r"unknown sandbox option\(s\) \['memroy_mb'\].*memory_mb"):
        SandboxConfig.from_mapping({"memroy_mb": 10})
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        SandboxConfig.from_mapping({"timeout_s": -1})
    with pytest.raises(ValueError, match="site_packages must be true or false"):
        SandboxConfig.from_mapping({"site_packages": "yes"})
    assert SandboxConfig.from_mapping({"memory_mb": 512.0, "extra_ro_binds": ["/opt"]}) == SandboxConfig(
        memory_mb=512, extra_ro_binds=("/opt",)
    )


@pytest.mark.sandbox
@pytest.mark.root
def test_non_root_mode_under_a_user_namespace(tmp_path):
    """As an ordinary user: bwrap makes a user namespace, limits still hold (run as nobody with the
    system interpreter, which that user can read; it has no pyseccomp, so seccomp is not required), and no job
    opens a file under /proc: neither a machine-wide counter (no subset=pid mount without root) nor its own memory."""
    package = tmp_path / "diffugrpo_plugin"  # the sandbox modules alone (the package's __init__ needs pluggy)
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    shutil.copytree(
        REPO / "diffugrpo_plugin" / "sandbox", package / "sandbox", ignore=shutil.ignore_patterns("__pycache__")
    )
    for path in (tmp_path, *tmp_path.parents):
        if path != Path("/"):
            os.chmod(path, os.stat(path).st_mode | 0o005)
    script = f"""
import json, sys
sys.path.insert(0, {str(tmp_path)!r})
import diffugrpo_plugin.sandbox.host as sb
box = sb.Sandbox(sb.SandboxConfig(python_executable="/usr/bin/python3", timeout_s=2, max_processes=8,
                                  require=("namespaces",)))
results = box.run([sb.Job("import os; print(os.getuid())"), sb.Job("import os\\nwhile True: os.fork()"),
                   sb.Job("open('/proc/loadavg').read()"), sb.Job("open('/proc/self/mem', 'rb')"),
                   sb.Job("print(open('/dev/stdin').read())", stdin="still fine")])
print(json.dumps([[r.status, r.exception, r.stdout] for r in results]))
"""
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-"],
        input=script,
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [
        ["ok", None, "65534\n"],
        ["exception", "BlockingIOError", ""],
        ["exception", "PermissionError", ""],
        ["exception", "PermissionError", ""],
        ["ok", None, "still fine\n"],
    ]


def test_sandbox_module_imports_no_torch():
    code = (
        "import sys; import diffugrpo_plugin.sandbox.host, diffugrpo_plugin.rewards.code_tests; "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.sandbox
def test_missing_protections_are_said_once_and_required_ones_refuse_to_start(capsys, monkeypatch):
    monkeypatch.setattr(sandbox_module, "_reported_missing", set())
    for _ in range(2):
        Sandbox(SandboxConfig(cgroups=False, inode_cap=False))
    err = capsys.readouterr().err
    assert err.count("sandbox protections not active on this host") == 1
    assert "cgroups: switched off in the sandbox config" in err and "tmpfs_inode_cap" in err
    with pytest.raises(SandboxUnavailable, match=r"requires protection\(s\).*seccomp \(switched off"):
        Sandbox(SandboxConfig(seccomp=False))


@pytest.mark.sandbox
def test_seccomp_is_an_allow_list(box):
    """A call off the list (one newer than any kernel, inotify, io_uring) and a socket family the network
    namespace does not isolate (vsock) are refused; threads, subprocesses and unix/inet sockets still work."""
    facts = _inside(
        box,
        """
import ctypes, errno, json, socket, subprocess, threading
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(number, *args):
    result = libc.syscall(number, *args)
    return 0 if result >= 0 else ctypes.get_errno()
def refused(family):
    try:
        socket.socket(family, socket.SOCK_STREAM).close()
        return False
    except OSError:
        return True
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
print(json.dumps({"unknown": errno_of(1000), "inotify_init1": errno_of(294, 0), "io_uring_setup": errno_of(425, 1, 0),
                  "vsock": refused(40), "unix": refused(socket.AF_UNIX), "inet": refused(socket.AF_INET),
                  "subprocess": subprocess.run(["true"]).returncode}))
""",
    )
    assert facts == {
        "unknown": errno.EPERM,
        "inotify_init1": errno.EPERM,
        "io_uring_setup": errno.EPERM,
        "vsock": True,
        "unix": False,
        "inet": False,
        "subprocess": 0,
    }


@pytest.mark.sandbox
def test_no_file_lock_is_shared_between_two_jobs_at_once():
    """Both jobs lock the same read-only system file (bind mounts share its inode) at the same time: neither
    sees the other's lock, because a lock inside the sandbox succeeds without locking anything."""
    two = tight_sandbox(max_concurrency=2, timeout_s=5.0)
    locker = (
        "import fcntl, json, time\nhandle = open('/usr/lib/os-release', 'rb')\n"
        "fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)\nfcntl.lockf(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)\n"
        "time.sleep(1.0)\nprint(json.dumps('locked'))\n"
    )
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: two.run([Job(locker)])[0], range(2)))
    assert [(r.status, r.stdout) for r in results] == [("ok", '"locked"\n')] * 2


def test_a_missing_host_facility_skips_saying_what_unless_every_test_is_required(monkeypatch):
    from conftest import BWRAP_HINT, REQUIRE_ALL_VAR

    monkeypatch.delenv(REQUIRE_ALL_VAR, raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs bubblewrap, which runs the untrusted code: apt-get"):
        missing(BWRAP_HINT)
    monkeypatch.setenv(REQUIRE_ALL_VAR, "1")
    with pytest.raises(pytest.fail.Exception, match="DIFFUGRPO_REQUIRE_ALL is set: every test must run here"):
        missing(BWRAP_HINT)
