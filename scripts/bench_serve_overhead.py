#!/usr/bin/env python3
"""What the HTTP layer of `pagellm serve` costs (a benchmark, not a test).

usage: scripts/bench_serve_overhead.py PAGELLM [--model M] [--requests N] [--clients C]
                                        [--max-tokens T] [--idle K] [--rounds R]
                                        [SERVER FLAGS...]

Starts a server, runs C streaming clients through N completions of T tokens (after a warm-up)
and reports, from the server's own /metrics, how the stepping thread spent the run: inside
pl_engine_step, handing results to requests (copying deltas, resuming connections: the HTTP
layer's cost on that thread) and asleep; and from the clients, requests/s, tokens/s and TTFT /
end-to-end percentiles. Each round runs the load once as it is and once with K idle keep-alive
connections open (each has made one request and stays open), to show whether they slow the
others; rounds alternate so the machine's noise falls on both.
Prints a Markdown table for docs/benchmarks.md. Clients are Python threads on the same
machine: their CPU competes with the server's, the same in both runs.
"""
import argparse
import json
import os
import resource
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "server"))
from server_util import Server, stream_text  # noqa: E402

PROMPTS = ["Once upon a time", "Lily and Tom went to the park", "The little dog", "One day, a big",
           "She was sad because", "In a small town there lived", "Tom had a red ball", "The sun"]


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def load(srv, n_requests, n_clients, max_tokens):
    """Streams n_requests completions from n_clients threads; per-request TTFT and e2e."""
    next_i, lock = [0], threading.Lock()
    ttft, e2e, tokens, errors = [], [], [0], []

    def client():
        c = srv.conn()
        while True:
            with lock:
                i = next_i[0]
                next_i[0] += 1
            if i >= n_requests:
                break
            body = {"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
            t0 = time.perf_counter()
            c.request("POST", "/v1/completions", body=json.dumps(body),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            first, buf, usage = None, b"", None
            while True:
                chunk = r.read1(65536)
                if not chunk:
                    break
                if first is None:
                    first = time.perf_counter()
                buf += chunk
            t1 = time.perf_counter()
            events = [json.loads(e[6:]) for e in buf.split(b"\n\n") if e.startswith(b"data: {")]
            _, _, usage = stream_text(events)
            with lock:
                if r.status != 200 or not usage:
                    errors.append(r.status)
                    continue
                ttft.append(first - t0)
                e2e.append(t1 - t0)
                tokens[0] += usage["completion_tokens"]
        c.close()

    threads = [threading.Thread(target=client) for _ in range(n_clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, ttft, e2e, tokens[0], errors


def measure(srv, args, label):
    before = srv.metrics()
    wall, ttft, e2e, tokens, errors = load(srv, args.requests, args.clients, args.max_tokens)
    after = srv.metrics()
    d = {k: after[k] - before[k] for k in ("pagellm:server_step_seconds_total",
                                           "pagellm:server_deliver_seconds_total",
                                           "pagellm:server_idle_seconds_total",
                                           "pagellm:server_step_cpu_seconds_total",
                                           "pagellm:server_deliver_cpu_seconds_total")}
    step, deliver, idle = (d["pagellm:server_step_seconds_total"],
                           d["pagellm:server_deliver_seconds_total"],
                           d["pagellm:server_idle_seconds_total"])
    row = {"label": label, "wall": wall, "rps": len(e2e) / wall, "tps": tokens / wall,
           "ttft50": pct(ttft, 0.5) * 1e3, "ttft99": pct(ttft, 0.99) * 1e3,
           "e2e50": pct(e2e, 0.5) * 1e3, "e2e99": pct(e2e, 0.99) * 1e3,
           "step": step, "deliver": deliver, "idle": idle,
           "share": 100 * deliver / (step + deliver) if step + deliver > 0 else 0,
           "step_cpu": d["pagellm:server_step_cpu_seconds_total"],
           "deliver_cpu": d["pagellm:server_deliver_cpu_seconds_total"],
           "errors": len(errors)}
    print(json.dumps(row), file=sys.stderr)
    return row


def open_idle(port, k):
    """k keep-alive connections that each made one request and stay open."""
    socks = []
    for _ in range(k):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"GET /version HTTP/1.1\r\nHost: t\r\n\r\n")
        got = b""
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            got += s.recv(4096)
        socks.append(s)
    return socks


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pagellm")
    ap.add_argument("--model", default="../shared/models/stories260K.bin")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=2)
    args, args.extra = ap.parse_known_args()  # the rest are the server's flags
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    srv = Server(args.pagellm, ["--model", args.model, "--disable-access-log", "--log-interval", "0",
                                "--timeout-keep-alive", "600", "--max-connections", "4096"]
                 + args.extra)
    try:
        load(srv, 64, min(args.clients, 16), args.max_tokens)  # warm-up
        rows = []
        for k in range(args.rounds):  # alternated: the machine's noise falls on both
            rows.append(measure(srv, args, f"round {k + 1}: no idle connections"))
            idle = open_idle(srv.port, args.idle)
            rows.append(measure(srv, args, f"round {k + 1}: {args.idle} idle keep-alive connections"))
            for s in idle:
                s.close()
    finally:
        srv.stop()
    print(f"model {args.model}, {args.requests} streamed requests x {args.max_tokens} tokens, "
          f"{args.clients} clients; server flags: {' '.join(args.extra) or '(defaults)'}\n")
    print("| run | requests/s | output tok/s | TTFT p50 / p99 (ms) | e2e p50 / p99 (ms) | "
          "stepping thread, wall: step / deliver / idle (s) | deliver share, wall | "
          "stepping thread, CPU: step / deliver (s) | deliver share, CPU |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        cpu_share = 100 * r["deliver_cpu"] / (r["step_cpu"] + r["deliver_cpu"]) \
            if r["step_cpu"] + r["deliver_cpu"] > 0 else 0
        print(f"| {r['label']} | {r['rps']:.1f} | {r['tps']:.0f} | {r['ttft50']:.1f} / "
              f"{r['ttft99']:.1f} | {r['e2e50']:.1f} / {r['e2e99']:.1f} | {r['step']:.2f} / "
              f"{r['deliver']:.3f} / {r['idle']:.2f} | {r['share']:.2f}% | "
              f"{r['step_cpu']:.2f} / {r['deliver_cpu']:.3f} | {cpu_share:.2f}% |"
              + (f" ({r['errors']} failed)" if r["errors"] else ""))


if __name__ == "__main__":
    main()
