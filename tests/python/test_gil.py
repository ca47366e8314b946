"""The GIL is released while cucore compiles and does cache I/O (checked without timing), and
threads compile concurrently with correct results."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import pytest

import cucore
from conftest import ARCH, KERNEL, run_in_threads

# A thread calls into cucore while another process holds an SQLite write lock on the cache file,
# so the call blocks inside C++ (SQLite's busy handler sleeps until busy_timeout). The lock is
# another process's: the portable wheel links its own copy of SQLite (docs/python.md), and POSIX
# locks taken through one copy do not exclude another copy in the same process. The main thread
# then waits until it sees that thread asleep in the kernel (/proc/self/task/TID/syscall:
# nanosleep or clock_nanosleep; the thread runs no Python sleep), which it can only observe if the
# call released the GIL, and releases the lock. Had the call kept the GIL, the main thread could
# never run again: the child deadlocks and the parent's timeout fails the test (a deadlocked
# interpreter cannot fail by itself). No timing is assumed anywhere.
HOLDER = textwrap.dedent(
    """
    import sqlite3, sys
    lock = sqlite3.connect(sys.argv[1], isolation_level=None)
    lock.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.readline()
    lock.execute("COMMIT")
    """
)
CHILD = "HOLDER = " + repr(HOLDER) + textwrap.dedent(
    """
    import os, platform, subprocess, sys, threading
    import cucore

    # nanosleep, clock_nanosleep
    SLEEPS = {"x86_64": {"35", "230"}, "aarch64": {"101", "115"}}[platform.machine()]
    db = os.path.join(sys.argv[1], "cache.db")
    cache = cucore.SQLiteProgramCache(db, busy_timeout=600, on_write_failure="strict")
    options = cucore.ProgramOptions(arch=sys.argv[2])
    program = cucore.Program('extern "C" __global__ void k(int* x) { *x = 1; }', "c++", options)
    calls = {
        "put": lambda: cache.__setitem__(b"key", b"value"),
        "compile": lambda: program.compile("cubin", cache=cache),
    }
    call = calls[sys.argv[3]]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, db], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    tid = []
    done = []

    def work():
        tid.append(threading.get_native_id())
        call()
        done.append(True)

    t = threading.Thread(target=work)
    t.start()
    while not tid:
        pass
    while True:
        with open(f"/proc/self/task/{tid[0]}/syscall") as f:
            if f.read().split()[0] in SLEEPS:
                break
    assert not done
    holder.communicate("commit")  # its readline returns at the end of input
    assert holder.returncode == 0
    t.join()
    assert done
    assert len(cache) == 1
    print("released")
    """
)


@pytest.mark.parametrize("call", ["put", "compile"])
def test_cache_io_and_compile_release_the_gil(tmp_path, call):
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), ARCH, call],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "released"


def test_threads_compile_concurrently_with_correct_results(tmp_path, options):
    sources = [KERNEL + f"\nextern \"C\" __global__ void extra{i}(int* x) {{ *x = {i}; }}\n"
               for i in range(4)]
    expected = [cucore.Program(s, "c++", options).compile("cubin").code for s in sources]
    cache = cucore.FileStreamProgramCache(tmp_path / "d")
    results: dict[int, bytes] = {}

    def work(i):
        results[i] = cucore.Program(sources[i], "c++", options).compile("cubin", cache=cache).code

    assert run_in_threads(work, 4) == []
    assert [results[i] for i in range(4)] == expected
    assert len(cache) == 4


def test_one_program_shared_by_threads(options):
    program = cucore.Program(KERNEL, "c++", options)
    expected = program.compile("ptx").code
    out = []
    threads = [threading.Thread(target=lambda: out.append(program.compile("ptx").code)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [expected] * 3
