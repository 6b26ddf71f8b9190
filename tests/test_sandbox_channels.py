"""Cross-row channels: what one sandboxed job sets in the machine's counters, a concurrent one cannot read.

The kernel counts some things for the whole machine: the threads in ``/proc/loadavg`` and ``sysinfo()``, the shared
memory in ``/proc/meminfo`` (every tmpfs file is counted there), the pseudo-terminals in
``/proc/sys/kernel/pty/nr``, and more under ``/proc/sys`` and ``/proc/stat``. Two jobs running at once (two rows,
two jobs) could signal each other through them. In the sandbox ``/proc`` shows the sandbox's own processes only,
``sysinfo`` is refused, there is no ``/dev/ptmx``, and ``/dev/shm`` has the same file-count cap as ``/tmp``.
Everything here runs through the real sandbox (bubblewrap, as root where the host allows it).
"""

from __future__ import annotations

import concurrent.futures
import errno
import json
import os
import time

import pytest

from conftest import missing
from diffugrpo_plugin.sandbox.jobs import Job
from reward_support import tight_sandbox


def _needs_root() -> None:
    if os.geteuid() != 0:
        missing("root: the sandbox mounts its private /proc (subset=pid) and capped tmpfs only as root")


SIGNAL_MB = 40
HOLD_S = 4.0
# sets every channel it can: threads, shared memory (files in /dev/shm), pseudo-terminals; holds them a while
SENDER = f"""
import json, os, threading, time
stop = threading.Event()
threads = []
for _ in range(8):
    try:
        thread = threading.Thread(target=stop.wait)
        thread.start()
        threads.append(thread)
    except RuntimeError:
        break
with open('/dev/shm/signal', 'wb') as handle:
    handle.write(b'x' * ({SIGNAL_MB} << 20))
try:
    terminals = [os.openpty() for _ in range(4)]
except OSError as error:
    terminals = error.errno
time.sleep({HOLD_S})
stop.set()
print(json.dumps({{"threads": len(threads), "terminals": terminals}}))
"""
# reads every channel, as a program of another row running at the same moment would
READER = """
import ctypes, json, os
seen = {"proc": sorted(name for name in os.listdir('/proc') if not name.isdigit())}
for path in ('/proc/loadavg', '/proc/meminfo', '/proc/stat', '/proc/uptime', '/proc/vmstat',
             '/proc/sys/kernel/pty/nr', '/proc/sys/fs/file-nr', '/dev/ptmx', '/dev/pts/ptmx'):
    try:
        with open(path, 'rb') as handle:
            seen[path] = handle.read(4096).decode()
    except OSError as error:
        seen[path] = error.errno
libc = ctypes.CDLL(None, use_errno=True)
info = ctypes.create_string_buffer(128)
seen['sysinfo'] = [libc.sysinfo(info), ctypes.get_errno()]
print(json.dumps(seen))
"""
NONE = {
    "proc": ["self", "thread-self"],
    **{
        path: errno.ENOENT
        for path in (
            "/proc/loadavg",
            "/proc/meminfo",
            "/proc/stat",
            "/proc/uptime",
            "/proc/vmstat",
            "/proc/sys/kernel/pty/nr",
            "/proc/sys/fs/file-nr",
            "/dev/ptmx",
            "/dev/pts/ptmx",
        )
    },
    "sysinfo": [-1, errno.ENOSYS],
}


def _host_shmem_kb() -> int:
    with open("/proc/meminfo") as meminfo:
        return next(int(line.split()[1]) for line in meminfo if line.startswith("Shmem:"))


@pytest.mark.sandbox
def test_a_concurrent_job_reads_none_of_the_signal_another_one_sets():
    _needs_root()
    box = tight_sandbox(max_concurrency=2, timeout_s=HOLD_S + 5, memory_mb=512, max_file_size_mb=SIGNAL_MB + 1)
    alone = json.loads(box.run([Job(READER)])[0].stdout)
    assert alone == NONE
    before = _host_shmem_kb()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        sender = pool.submit(lambda: box.run([Job(SENDER)])[0])
        # the signal is real: the machine's shared memory rises by what the sender wrote ...
        deadline, risen = time.monotonic() + HOLD_S, 0
        while time.monotonic() < deadline and risen < SIGNAL_MB * 1024 // 2:
            risen = _host_shmem_kb() - before
            time.sleep(0.05)
        assert risen >= SIGNAL_MB * 1024 // 2, f"the sender's /dev/shm file did not show on the host ({risen} kB)"
        # ... and a job running meanwhile sees none of it, nor of the sender's threads
        during = box.run([Job(READER)])[0]
        sent = sender.result()
    assert sent.status == "ok", sent
    facts = json.loads(sent.stdout)
    assert facts["threads"] >= 4 and facts["terminals"] == errno.ENOENT  # no terminal to open either
    assert during.status == "ok", during
    assert json.loads(during.stdout) == NONE


@pytest.mark.sandbox
@pytest.mark.parametrize("directory", ["/dev/shm", "/tmp", "/work"])
def test_every_writable_tmpfs_refuses_150k_files(directory):
    _needs_root()
    box = tight_sandbox(timeout_s=20.0)
    source = f"""
import errno, json
made, error = 0, None
try:
    for made in range(150_000):
        open('{directory}/f%d' % made, 'w').close()
except OSError as exc:
    error = exc.errno
print(json.dumps([made, error]))
"""
    [result] = box.run([Job(source)])
    assert result.status == "ok", result
    made, error = json.loads(result.stdout)
    assert error == errno.ENOSPC and made < box.config.max_files
