#!/usr/bin/env python3
"""The MPI communicator under mpirun (tests/dist/comm_check.c does the work in each rank).

    test_comm_mpi.py COMM_CHECK cases   1-4 ranks (--oversubscribe: this machine may have
                                        fewer cores): every case, the same digest on every
                                        rank, equal to the threads reference in rank 0
    test_comm_mpi.py COMM_CHECK kill    3 ranks, rank 1 killed (SIGKILL) before an all-reduce:
                                        with --enable-recovery (mpirun lets the job go on)
                                        ranks 0 and 2 fail within the 1 s timeout naming
                                        themselves, the operation and rank 1; without it
                                        mpirun ends the job, non-zero, within seconds
    test_comm_mpi.py COMM_CHECK hang    2 ranks, rank 1 stopped (SIGSTOP): rank 0 fails
                                        within the timeout and mpirun ends the job non-zero

Running as root needs Open MPI's two variables (set here; docs/distributed.md).
"""
import os
import re
import subprocess
import sys
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1",
           # under ASan: Open MPI never frees what MPI_Init and its plugins allocate; our own
           # leaks are checked in one process (test_comm.c, test_e2e_tp.c)
           ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")


def mpirun(n, args, extra=(), timeout=60):
    t0 = time.monotonic()
    p = subprocess.run(["mpirun", *extra, "-n", str(n), *args], env=ENV, timeout=timeout,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, time.monotonic() - t0


def fail(msg, p=None):
    print("FAIL:", msg)
    if p is not None:
        print("stdout:", p.stdout, "\nstderr:", p.stderr, sep="\n")
    sys.exit(1)


def cases(check):
    for n in (1, 2, 3, 4):
        p, secs = mpirun(n, [check, "cases"])
        if p.returncode != 0:
            fail(f"{n} ranks: exit {p.returncode}", p)
        digests = dict(re.findall(r"^digest (\d+) ([0-9a-f]+)$", p.stdout, re.M))
        if sorted(map(int, digests)) != list(range(n)) or len(set(digests.values())) != 1:
            fail(f"{n} ranks: digests {digests}", p)
        if "threads reference %s: equal" % next(iter(digests.values())) not in p.stdout:
            fail(f"{n} ranks: no agreement with the threads reference", p)
        print(f"{n} ranks: digest {digests['0']} on every rank, equal to threads ({secs:.1f} s)")


def kill(check):
    p, secs = mpirun(3, [check, "kill", "1"], extra=["--enable-recovery"])
    for r in (0, 2):
        m = re.search(rf"^rank {r} failed after ([\d.]+) s: rank {r}: all_reduce: timed out "
                      rf"after 1\.0 s waiting for rank 1 \(--distributed-timeout\)$", p.stdout, re.M)
        if not m:
            fail(f"rank {r} did not report rank 1 missing", p)
        if not 0.9 < float(m.group(1)) < 3:
            fail(f"rank {r} failed after {m.group(1)} s, not about the 1 s timeout", p)
    print(f"kill with recovery: ranks 0 and 2 named rank 1 after the timeout ({secs:.1f} s)")
    p, secs = mpirun(3, [check, "kill", "1"])
    if p.returncode == 0 or secs > 15:
        fail(f"kill: mpirun exit {p.returncode} after {secs:.1f} s", p)
    print(f"kill: mpirun ended the job, exit {p.returncode}, after {secs:.1f} s")


def hang(check):
    p, secs = mpirun(2, [check, "hang", "1"])
    if not re.search(r"^rank 0 failed after (0\.9|1\.[0-9]+|2\.[0-9]+) s: rank 0: all_reduce: "
                     r"timed out after 1\.0 s waiting for rank 1", p.stdout, re.M):
        fail("rank 0 did not report rank 1 missing", p)
    if p.returncode == 0 or secs > 15:
        fail(f"hang: mpirun exit {p.returncode} after {secs:.1f} s", p)
    print(f"hang: rank 0 named rank 1; mpirun exit {p.returncode} after {secs:.1f} s")


if __name__ == "__main__":
    {"cases": cases, "kill": kill, "hang": hang}[sys.argv[2]](sys.argv[1])
