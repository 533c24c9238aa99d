#!/usr/bin/env python3
"""`pagellm bench serve` against `pagellm serve`, beside `pagellm bench throughput` offline, on
the same workload, model and engine flags (a benchmark, not a test).

usage: scripts/bench_serve_vs_offline.py PAGELLM [--pairs N] [--vocab-size V] [--idle K]
           [--lock PATH] [--num-prompts N] [--input-len N] [--output-len N] [--seed S]
           [ENGINE FLAGS...]

Each pair runs the workload offline (bench throughput: one engine, every prompt submitted at
once) and online (a fresh `pagellm serve` with the same engine flags, and `bench serve` at
request rate inf, streaming every request), in alternating order, each pair under the shared
benchmark lock (flock on /tmp/pagellm-bench.lock, as `flock(1)` takes it). The prompts are the
same random token ids on both sides: the same seed and vocabulary size, sent as token-id
arrays (bench serve is given no tokenizer; the server is, so it detokenizes as the offline
engine does). Both sample at temperature 1 and ignore EOS, so every request runs to its
max_tokens.

Prints each run, then the medians and the ratio online / offline of total tokens/s, and from
the server's own /metrics the HTTP layer's share of the stepping thread (delivery over
step + delivery, wall and CPU time). With --idle K the online runs have K idle keep-alive
connections open (each made one request first).

The client (one thread, libcurl) and the server's HTTP threads run on the same machine as the
engine: give the engine fewer threads than cores (--threads) to leave the client a core, or as
many to see what the competition costs.
"""
import argparse
import fcntl
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
from server_util import Server  # noqa: E402

COUNTERS = ("pagellm:server_step_seconds_total", "pagellm:server_deliver_seconds_total",
            "pagellm:server_step_cpu_seconds_total", "pagellm:server_deliver_cpu_seconds_total",
            "pagellm:server_idle_seconds_total")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid):
    """CPU seconds (user + system) a running process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# The client needs no BLAS: without this, OpenBLAS's worker threads, started when the library
# loads, spin in sched_yield for their first ~0.1 s, on the cores the server is using.
CLIENT_ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1")


def run_json(cmd, env=None):
    """Runs a bench command with --output-json; its JSON and the CPU seconds it used."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        c0 = children_cpu()
        p = subprocess.run(cmd + ["--output-json", path, "--no-progress"], capture_output=True,
                           text=True, env=env)
        cpu = children_cpu() - c0
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        with open(path) as f:
            return json.load(f), cpu
    finally:
        os.unlink(path)


def offline(args, workload):
    j, cpu = run_json([args.pagellm, "bench", "throughput"] + workload + args.engine)
    return {"total": j["tokens_per_second"], "output": j["output_tokens_per_second"],
            "elapsed": j["elapsed_time"], "tokens": j["total_num_tokens"], "cpu": cpu}


def open_idle(port, k):
    socks = []
    for _ in range(k):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"GET /version HTTP/1.1\r\nHost: t\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            got += s.recv(4096)
        socks.append(s)
    return socks


def online(args, workload):
    srv = Server(args.pagellm, args.engine + ["--disable-access-log", "--log-interval", "0",
                                              "--timeout-keep-alive", "600",
                                              "--max-connections", str(args.idle + 1024)])
    idle = []
    try:
        idle = open_idle(srv.port, args.idle)
        before = srv.metrics()
        server_cpu = proc_cpu(srv.proc.pid)
        j, client_cpu = run_json([args.pagellm, "bench", "serve", "--port", str(srv.port),
                      "--vocab-size", str(args.vocab_size), "--temperature", "1"] + workload,
                             env=CLIENT_ENV)
        server_cpu = proc_cpu(srv.proc.pid) - server_cpu
        after = srv.metrics()
    finally:
        for s in idle:
            s.close()
        srv.stop()
    d = {k: after[k] - before[k] for k in COUNTERS}
    step, deliver = d[COUNTERS[0]], d[COUNTERS[1]]
    step_cpu, deliver_cpu = d[COUNTERS[2]], d[COUNTERS[3]]
    if j["failed"]:
        sys.exit(f"bench serve: {j['failed']} requests failed: {j['errors'][:3]}")
    return {"total": j["total_token_throughput"], "output": j["output_throughput"],
            "elapsed": j["duration"], "tokens": j["total_input_tokens"] + j["total_output_tokens"],
            "ttft_ms": j["median_ttft_ms"], "tpot_ms": j["median_tpot_ms"],
            "share": 100 * deliver / (step + deliver) if step + deliver else 0,
            "share_cpu": 100 * deliver_cpu / (step_cpu + deliver_cpu) if step_cpu + deliver_cpu
            else 0, "step": step, "deliver": deliver, "idle": d[COUNTERS[4]],
            "cpu": server_cpu + client_cpu, "server_cpu": server_cpu, "client_cpu": client_cpu}


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1].removeprefix("usage: "))
    ap.add_argument("pagellm")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--vocab-size", type=int, default=32000,
                    help="the model's vocabulary (random ids in [3, V)); 32000 for the stories "
                         "presets, 512 for stories260K")
    ap.add_argument("--idle", type=int, default=0)
    ap.add_argument("--lock", default="/tmp/pagellm-bench.lock")
    ap.add_argument("--num-prompts", default="256")
    ap.add_argument("--input-len", default="128")
    ap.add_argument("--output-len", default="128")
    ap.add_argument("--seed", default="0")
    args, args.engine = ap.parse_known_args()
    if not any(a == "--model" for a in args.engine):
        args.engine = ["--model", "dummy:stories15m"] + args.engine
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workload = ["--num-prompts", args.num_prompts, "--input-len", args.input_len,
                "--output-len", args.output_len, "--seed", args.seed]
    # bench throughput's CPU time includes creating the engine: measured once on a one-token
    # workload and taken off, so the CPU columns compare the runs alone
    _, startup_cpu = run_json([args.pagellm, "bench", "throughput", "--num-prompts", "1",
                               "--input-len", "1", "--output-len", "1"] + args.engine)
    off, on = [], []
    for k in range(args.pairs):
        with open(args.lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            order = (offline, online) if k % 2 == 0 else (online, offline)
            for f in order:
                r = f(args, workload)
                if f is offline:
                    r["cpu"] -= startup_cpu
                (off if f is offline else on).append(r)
                print(f"pair {k + 1} {f.__name__}: " + json.dumps(r), file=sys.stderr, flush=True)
    print(f"engine flags: {' '.join(args.engine)}; workload: {' '.join(workload)}; "
          f"{args.idle} idle connections online; engine start-up CPU {startup_cpu:.2f} s")
    print("| pair | offline total tok/s | online total tok/s | online / offline | "
          "online TTFT p50 / TPOT p50 (ms) | HTTP layer share, wall / CPU | "
          "CPU s offline / online (server + client) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    ratios = []
    for k in range(args.pairs):
        a, b = off[k], on[k]
        ratios.append(b["total"] / a["total"])
        print(f"| {k + 1} | {a['total']:.1f} | {b['total']:.1f} | {ratios[-1]:.3f} | "
              f"{b['ttft_ms']:.1f} / {b['tpot_ms']:.2f} | {b['share']:.2f}% / "
              f"{b['share_cpu']:.2f}% | {a['cpu']:.2f} / {b['cpu']:.2f} ({b['server_cpu']:.2f} + "
              f"{b['client_cpu']:.2f}) |")
    mo = statistics.median(r["total"] for r in off)
    mn = statistics.median(r["total"] for r in on)
    print(f"median total tokens/s: offline {mo:.1f}, online {mn:.1f} (ratio of medians "
          f"{mn / mo:.3f}); median of the pairs' ratios {statistics.median(ratios):.3f}")
    print(f"CPU seconds, median: offline {statistics.median(r['cpu'] for r in off):.2f}, online "
          f"{statistics.median(r['cpu'] for r in on):.2f}; HTTP layer share of the stepping "
          f"thread, median: {statistics.median(r['share'] for r in on):.2f}% wall, "
          f"{statistics.median(r['share_cpu'] for r in on):.2f}% CPU")

if __name__ == "__main__":
    main()
