#!/usr/bin/env python3
"""A request-rate sweep of `pagellm bench serve` against `pagellm serve` (a benchmark, not a
test): TTFT, TPOT, ITL and E2EL against the request rate, as CSV, a Markdown table and a plot.

usage: scripts/bench_serve_sweep.py PAGELLM [--rates 1,2,4,8,inf] [--plot PREFIX]
           [--vocab-size V] [--lock PATH] [--num-prompts N] [--input-len N] [--output-len N]
           [--seed S] [ENGINE FLAGS...]

Starts one `pagellm serve` with the engine flags (default --model dummy:stories15m), then for
each rate runs `bench serve --request-rate R` (Poisson arrivals, every request streamed, EOS
ignored, token-id prompts of the same lengths at every rate, drawn with seed S + the rate's
index: prompts seen at an earlier rate would be prefix-cache hits) under the shared benchmark lock
(flock on /tmp/pagellm-bench.lock, one rate at a time), and waits for the engine to be empty
before the next (after a short warm-up run, not recorded). Writes PREFIX.csv and, with
gnuplot (Debian: gnuplot-nox) and scripts/plot_serve_sweep.gp, PREFIX.png and PREFIX.svg.
"""
import argparse
import csv
import fcntl
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
from server_util import Server  # noqa: E402

METRICS = ("ttft", "tpot", "itl", "e2el")
COLUMNS = (["request_rate", "completed", "failed", "duration_s", "request_throughput",
            "output_throughput", "total_token_throughput", "max_concurrent_requests"]
           + [f"{s}_{m}_ms" for m in METRICS for s in ("mean", "median", "p99")])


def bench(args, port, rate, workload):
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        path = f.name
    try:
        cmd = [args.pagellm, "bench", "serve", "--port", str(port), "--vocab-size",
               str(args.vocab_size), "--temperature", "1", "--request-rate", rate,
               "--metric-percentiles", "50,99", "--no-progress", "--output-json", path] + workload
        # the client needs no BLAS: OpenBLAS's threads would spin for their first ~0.1 s
        p = subprocess.run(cmd, capture_output=True, text=True,
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        with open(path) as f:
            j = json.load(f)
    finally:
        os.unlink(path)
    row = {"request_rate": rate, "completed": j["completed"], "failed": j["failed"],
           "duration_s": j["duration"], "request_throughput": j["request_throughput"],
           "output_throughput": j["output_throughput"],
           "total_token_throughput": j["total_token_throughput"],
           "max_concurrent_requests": j["max_concurrent_requests"]}
    for m in METRICS:
        row[f"mean_{m}_ms"] = j[f"mean_{m}_ms"]
        row[f"median_{m}_ms"] = j[f"median_{m}_ms"]
        row[f"p99_{m}_ms"] = j[f"p99_{m}_ms"]
    return row


def wait_idle(srv, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = srv.metrics()
        if m["pagellm:num_requests_running"] == 0 and m["pagellm:num_requests_waiting"] == 0:
            return
        time.sleep(0.1)
    sys.exit("the server did not become idle")


def plot(prefix, csv_path):
    script = os.path.join(HERE, "plot_serve_sweep.gp")
    if not shutil.which("gnuplot"):
        print("gnuplot is not installed (Debian: gnuplot-nox): no plot", file=sys.stderr)
        return
    for q in (prefix, csv_path):
        if "'" in q:
            sys.exit(f"{q}: a quote in a path (gnuplot string)")
    subprocess.run(["gnuplot", "-e", f"csv='{csv_path}'; out='{prefix}'", script], check=True)
    print(f"wrote {prefix}.png and {prefix}.svg", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(usage=__doc__.split("\n\n")[1].removeprefix("usage: "))
    ap.add_argument("pagellm")
    ap.add_argument("--rates", default="1,2,4,8,inf")
    ap.add_argument("--plot", metavar="PREFIX")
    ap.add_argument("--vocab-size", type=int, default=32000,
                    help="the model's vocabulary (random ids in [3, V)); 32000 for the stories "
                         "presets, 512 for stories260K")
    ap.add_argument("--lock", default="/tmp/pagellm-bench.lock")
    ap.add_argument("--num-prompts", default="40")
    ap.add_argument("--input-len", default="128")
    ap.add_argument("--output-len", default="128")
    ap.add_argument("--seed", default="0")
    args, engine = ap.parse_known_args()
    if not any(a == "--model" for a in engine):
        engine = ["--model", "dummy:stories15m"] + engine
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    workload = ["--num-prompts", args.num_prompts, "--input-len", args.input_len,
                "--output-len", args.output_len]
    rows = []
    srv = Server(args.pagellm, engine + ["--disable-access-log", "--log-interval", "0"])
    try:
        # warm-up, not recorded: the first requests of a fresh server touch its KV pages
        bench(args, srv.port, "inf", ["--num-prompts", "8", "--input-len", args.input_len,
                                      "--output-len", "16", "--seed", str(int(args.seed) + 1000)])
        wait_idle(srv)
        for k, rate in enumerate(args.rates.split(",")):
            with open(args.lock, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                seed = ["--seed", str(int(args.seed) + k)]
                rows.append(bench(args, srv.port, rate, workload + seed))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            wait_idle(srv)
    finally:
        srv.stop()
    if args.plot:
        csv_path = args.plot + ".csv"
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=COLUMNS)
            w.writeheader()
            for r in rows:
                w.writerow({k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in r.items()})
        plot(args.plot, csv_path)
    print(f"engine flags: {' '.join(engine)}; workload: {' '.join(workload)}, seed {args.seed} + "
          f"the rate's index")
    print("| request rate (req/s) | achieved req/s | output tok/s | peak concurrency | "
          "TTFT mean / median / P99 (ms) | TPOT mean / median / P99 (ms) | "
          "ITL mean / median / P99 (ms) | E2EL mean / median / P99 (ms) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        cells = [f"{r[f'mean_{m}_ms']:.1f} / {r[f'median_{m}_ms']:.1f} / {r[f'p99_{m}_ms']:.1f}"
                 for m in METRICS]
        print(f"| {r['request_rate']} | {r['request_throughput']:.2f} | "
              f"{r['output_throughput']:.0f} | {r['max_concurrent_requests']} | "
              + " | ".join(cells) + " |" + (f" ({r['failed']} failed)" if r["failed"] else ""))


if __name__ == "__main__":
    main()
