#!/usr/bin/env python3
"""`mpirun -n 2 pagellm serve --tensor-parallel-size 2` against `pagellm serve` (stories260K;
SKIP, exit 77, without PAGELLM_TEST_MODELS).

    test_tp_serve.py PAGELLM parity   the same JSON (ids and timestamps aside, logprobs within
                                      1e-4) from both servers, vLLM's compare-two-settings
                                      style: text and
                                      token-id prompts, a list of prompts, logprobs, seeded
                                      samples (n = 2), a stream with usage; /metrics counts
                                      2 x layers x hidden x 4 bytes of all-reduce per token;
                                      SIGTERM to rank 0 drains and every process exits 0
    test_tp_serve.py PAGELLM hang     rank 1 stops (PAGELLM_FAULT_RANK=1:S:hang) while streams
                                      and a whole request are in flight: each gets an error
                                      (never silence), /health answers 503 naming rank 1, rank
                                      0 exits 1 and mpirun ends the job within seconds
    test_tp_serve.py PAGELLM kill     rank 1 dies (SIGKILL): mpirun ends the job, non-zero,
                                      within seconds; no client waits forever
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
from server_util import Failure, Server, check, models_dir  # noqa: E402

MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1",
           # under ASan: Open MPI never frees what MPI_Init and its plugins allocate
           "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0"}


class MpiServer(Server):
    """The same server as N ranks under mpirun (its log: every rank's stderr)."""

    def __init__(self, pagellm, args, n=2, env=None, ready_timeout=120):
        full = dict(MPI_ENV)
        full.update(env or {})
        super().__init__(pagellm, ["--tensor-parallel-size", str(n)] + args, env=full,
                         ready_timeout=ready_timeout, launcher=["mpirun", "-n", str(n)])

    def rank0(self):
        """The pid of rank 0 (mpirun's child whose environment says so)."""
        for line in subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)],
                                   capture_output=True, text=True).stdout.split():
            try:
                env = open(f"/proc/{line}/environ", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"OMPI_COMM_WORLD_RANK=0" in env:
                return int(line)
        raise Failure("rank 0's process not found")


# f32 KV: the ranks' K and V differ from one process's in the last bits of f32, and an f16
# cache would round some of them to the other neighbour (logprobs then differ by ~1e-3)
FLAGS = ["--served-model-name", "stories", "--threads", "1", "--block-size", "4",
         "--kv-dtype", "f32", "--max-num-blocks", "200", "--max-total-tokens", "16",
         "--max-batch-size", "8"]


def same(x, y, tol=1e-4):
    """Equal JSON, floats (logprobs) within tol: the ranks' split sums round differently from
    one process's in the last bits; tokens, text and everything else must be equal."""
    if isinstance(x, float) or isinstance(y, float):
        return isinstance(x, (int, float)) and isinstance(y, (int, float)) and abs(x - y) <= tol
    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, list):
        return isinstance(y, list) and len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    return x == y


def first_difference(x, y, path="$"):
    """The path of the first place where same() fails, or None."""
    if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
        for k in x:
            d = first_difference(x[k], y[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        for i, (a, b) in enumerate(zip(x, y)):
            d = first_difference(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if same(x, y) else f"{path}: {x!r} vs {y!r}"


def normalise(v):
    if isinstance(v, dict):
        return {k: normalise(x) for k, x in v.items() if k not in ("id", "created")}
    if isinstance(v, list):
        return [normalise(x) for x in v]
    return v


REQUESTS = [
    ("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 60, "temperature": 0,
                         "logprobs": 2}),
    ("/v1/completions", {"prompt": [1, 400, 30, 261], "max_tokens": 40, "temperature": 0}),
    ("/v1/completions", {"prompt": ["The little dog", "Tom and Lily went to the park."],
                         "max_tokens": 30, "temperature": 0, "echo": True}),
    ("/v1/completions", {"prompt": "One day", "max_tokens": 40, "temperature": 0.8, "seed": 7,
                         "n": 2, "top_p": 0.9}),
    ("/v1/completions", {"prompt": "Once upon a time there was", "max_tokens": 300,
                         "temperature": 0, "ignore_eos": True}),
]
STREAM = ("/v1/completions", {"prompt": "The sun was", "max_tokens": 50, "temperature": 0,
                              "stream": True, "stream_options": {"include_usage": True}})


def answers(srv):
    out = []
    for path, body in REQUESTS:
        status, _, v = srv.post(path, body)
        check(status == 200, f"{path} {body}: {status} {v}")
        out.append(normalise(v))
    status, events, done = srv.stream(*STREAM)
    check(status == 200 and done == 1, f"stream: {status}, {done} [DONE]")
    out.append(normalise(events))
    return out


def parity(exe, models):
    model = ["-m", os.path.join(models, "stories260K.bin"), "--tokenizer",
             os.path.join(models, "tok512.model")]
    one = Server(exe, model + FLAGS)
    try:
        a = answers(one)
    finally:
        one.stop()
    two = MpiServer(exe, model + FLAGS, env={"PAGELLM_LOG": "info"})
    try:
        check("tensor parallel: mpi: 2 ranks, Open MPI" in two.text(),
              "no start-up line naming backend, transport and ranks")
        b = answers(two)
        m = two.metrics()
        tokens = m["pagellm:tokens_computed_total"]
        check(tokens > 500, f"{tokens} tokens computed")
        check(m["pagellm:tp_all_reduce_bytes_total"] == 2 * 5 * 64 * 4 * tokens,
              f"all-reduce bytes {m['pagellm:tp_all_reduce_bytes_total']} for {tokens} tokens")
        check(m["pagellm:tp_size"] == 2, "tp_size")
        status, _, h = two.get("/health")
        check(status == 200 and h["status"] == "ok", f"/health {status} {h}")
        # SIGTERM to rank 0 drains (mpirun would kill the ranks a second after forwarding it)
        os.kill(two.rank0(), signal.SIGTERM)
        rc = two.proc.wait(timeout=60)
        log = two.text()
        check(rc == 0, f"mpirun exited {rc}:\n{log[-3000:]}")
        check("Sanitizer" not in log and "runtime error:" not in log,
              f"sanitizer report in a rank's log:\n{log[-6000:]}")
        check("SIGTERM received" in log and "drained in" in log, "no drain in the log")
        # every rank's counters: 2 x 5 layers x 64 x 4 bytes per token, the same tokens
        c = re.findall(r"rank (\d) of 2: \d+ steps, (\d+) tokens; all_reduce \d+ calls (\d+) "
                       r"bytes", log)
        check(sorted(x[0] for x in c) == ["0", "1"], f"counters of both ranks: {c}")
        for rank, toks, nbytes in c:
            check(int(nbytes) == 2560 * int(toks) and int(toks) == int(tokens),
                  f"rank {rank}: {nbytes} bytes for {toks} tokens ({tokens} on /metrics)")
    finally:
        two.kill()
    for i, (x, y) in enumerate(zip(a, b)):
        where = first_difference(x, y)
        check(where is None, f"answer {i} differs at {where}:\n  one process: {x}\n"
              f"  mpirun -n 2: {y}")
    print(f"parity: {len(a)} answers equal; {int(tokens)} tokens, 2560 all-reduce bytes each "
          f"on both ranks; drained on SIGTERM to rank 0")


def in_flight(srv, results):
    """Two streams and a whole request; each result: 'error' or 'ok'."""

    def streamed(i):
        try:
            status, events, done = srv.stream("/v1/completions", {
                "prompt": "Once upon a time", "max_tokens": 400, "temperature": 0,
                "ignore_eos": True, "stream": True}, timeout=30)
            err = status != 200 or any("error" in e for e in events)
            results[i] = "error" if err and done == 1 or status != 200 else "ok"
        except Exception as e:  # a reset connection is an error the client sees
            results[i] = f"error ({type(e).__name__})"

    def whole(i):
        try:
            status, _, v = srv.post("/v1/completions", {"prompt": "One day", "max_tokens": 400,
                                                        "temperature": 0, "ignore_eos": True},
                                    timeout=30)
            results[i] = "error" if status >= 500 else "ok"
        except Exception as e:
            results[i] = f"error ({type(e).__name__})"

    ts = [threading.Thread(target=streamed, args=(0,)), threading.Thread(target=streamed, args=(1,)),
          threading.Thread(target=whole, args=(2,))]
    for t in ts:
        t.start()
    return ts


def hang(exe, models):
    model = ["-m", os.path.join(models, "stories260K.bin"), "--tokenizer",
             os.path.join(models, "tok512.model"), "--backend", "ref"]
    srv = MpiServer(exe, model + FLAGS + ["--distributed-timeout", "1"],
                    env={"PAGELLM_FAULT_RANK": "1:40:hang"})
    try:
        results = [None] * 3
        ts = in_flight(srv, results)
        t0 = time.monotonic()
        saw_503 = None
        while time.monotonic() - t0 < 15 and srv.proc.poll() is None:
            try:
                status, _, h = srv.get("/health", timeout=2)
                if status == 503:
                    saw_503 = h
                    break
            except Exception:
                pass
            time.sleep(0.05)
        check(saw_503 and saw_503["status"] == "failed" and "waiting for rank 1" in
              saw_503.get("error", ""), f"/health never said failed: {saw_503}\n{srv.text()[-3000:]}")
        for t in ts:
            t.join(30)
        check(all(r and r.startswith("error") for r in results),
              f"every request in flight must end in an error: {results}")
        rc = srv.proc.wait(timeout=20)
        took = time.monotonic() - t0
        log = srv.text()
        check(rc != 0, f"mpirun exited 0 after a hung rank:\n{log[-3000:]}")
        check("stopping: the engine cannot serve any more" in log, "rank 0 did not stop")
        check(took < 15, f"the job took {took:.1f} s to end")
        print(f"hang: /health 503 ({saw_503['error'][:80]}...), requests {results}, mpirun exit "
              f"{rc} {took:.1f} s after the failure began")
    finally:
        srv.kill()


def kill(exe, models):
    model = ["-m", os.path.join(models, "stories260K.bin"), "--tokenizer",
             os.path.join(models, "tok512.model"), "--backend", "ref"]
    srv = MpiServer(exe, model + FLAGS, env={"PAGELLM_FAULT_RANK": "1:40"})
    try:
        results = [None] * 3
        ts = in_flight(srv, results)
        t0 = time.monotonic()
        rc = srv.proc.wait(timeout=20)
        took = time.monotonic() - t0
        for t in ts:
            t.join(30)
        check(rc != 0, "mpirun exited 0 after a rank died")
        check(all(r and r.startswith("error") for r in results),
              f"every request in flight must end in an error: {results}")
        check(took < 10, f"the job took {took:.1f} s to end")
        print(f"kill: mpirun exit {rc} in {took:.1f} s; requests {results}")
    finally:
        srv.kill()


def main():
    exe, case = sys.argv[1], sys.argv[2]
    models = models_dir()
    if not models:
        print("SKIP: PAGELLM_TEST_MODELS is not set")
        sys.exit(77)
    try:
        {"parity": parity, "hang": hang, "kill": kill}[case](exe, models)
    except Failure as e:
        print("FAIL:", e)
        sys.exit(1)


if __name__ == "__main__":
    main()
