#!/usr/bin/env python3
"""bench/peer/constrained.py - constrained serving beside llama-server: the same GGUF file, the
same JSON Schema, the same concurrency, alternating runs, and the ratio of output throughputs
(pagellm / llama-server; above 1 = pagellm faster).

usage: bench/peer/constrained.py --model FILE [--llama-server BIN] [--pagellm BIN]
                                 [--concurrency 32] [--requests 64] [--max-tokens 128]
                                 [--threads 2] [--reps 3] [--unconstrained] [--json OUT]

Each server is started on a free loopback port with --threads, room for --concurrency
sequences of 256 tokens (llama-server: -np N -c N*256, pagellm: --max-num-seqs N), then sent
--requests completions (a 24-word prompt of its own per request, temperature 1, a seed per
request) with at most --concurrency open at once, each constrained by SCHEMA below
(pagellm: "response_format" json_schema; llama-server: its "json_schema" field): an array
of objects with no bound, so a random-weight model writes until max_tokens. Output throughput
= the completion tokens both report (usage) / the wall time from the first request to the last
answer. Every answer is checked: it parses as a prefix of JSON that SCHEMA accepts (an
object with "items"; cut by max_tokens, so a prefix). --unconstrained runs the same requests
without the schema (the engines' plain speed, for the grammar's share). Each repetition is one
pair (order swapped every time) under `flock /tmp/pagellm-bench.lock`; the table gives medians.

The peer: llama.cpp's llama-server built outside the repository (cmake -DLLAMA_BUILD_SERVER=ON
--target llama-server, e.g. from the clone bench/peer/build_llama_cpp.sh makes). The model:
`pagellm quantize dummy:stories110m FILE q8_0 --tokenizer tokenizer.model` (bench/peer's
stories110M shape with Llama 2's vocabulary).
"""
import argparse
import http.client
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCK = "/tmp/pagellm-bench.lock"
SCHEMA = {
    "type": "object",
    "properties": {"items": {"type": "array", "items": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "score": {"type": "integer"},
                       "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["name", "score", "tags"]}}},
    "required": ["items"],
}
WORDS = ("the cat sat on a mat and then it ran to the big red house where a little girl "
         "named lily was playing with her dog in the sun").split()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    def __init__(self, name, cmd, port, log):
        self.name, self.port = name, port
        self.log = open(log, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 300
        while time.time() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"{name} exited {self.proc.returncode}; see {log}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/v1/models")
                if c.getresponse().status == 200:
                    c.close()
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        sys.exit(f"{name} did not start; see {log}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def body(kind, i, args, constrained):
    rng = random.Random(i)
    b = {"prompt": " ".join(rng.choice(WORDS) for _ in range(24)), "max_tokens": args.max_tokens,
         "temperature": 1.0, "seed": 1000 + i}
    if constrained:
        if kind == "pagellm":
            b["response_format"] = {"type": "json_schema",
                                    "json_schema": {"name": "items", "schema": SCHEMA}}
        else:
            b["json_schema"] = SCHEMA
    return b


def json_prefix_ok(text):
    """A prefix of an object with "items" (whitespace and string contents not checked)."""
    t = text.lstrip()
    if not t.startswith("{"):
        return False
    try:
        v = json.loads(t)
        return isinstance(v, dict) and "items" in v
    except ValueError:
        return re.match(r'\{\s*("(i(t(e(m(s("\s*(:.*)?)?)?)?)?)?)?)?$', t, re.S) is not None


def run(srv, kind, args, constrained):
    """(output tokens/s, requests that failed the check)."""
    todo = list(range(args.requests))
    lock = threading.Lock()
    tokens, bad = [0], [0]

    def worker():
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=600)
        while True:
            with lock:
                if not todo:
                    break
                i = todo.pop(0)
            c.request("POST", "/v1/completions", body=json.dumps(body(kind, i, args, constrained)),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            v = json.loads(r.read())
            with lock:
                if r.status != 200:
                    sys.exit(f"{kind}: {r.status} {v}")
                tokens[0] += v["usage"]["completion_tokens"]
                text = v["choices"][0]["text"]
                if constrained and not json_prefix_ok(text):
                    bad[0] += 1
        c.close()

    t0 = time.time()
    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tokens[0] / (time.time() - t0), bad[0], tokens[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--pagellm", default=os.path.join(REPO, "build", "tools", "pagellm"))
    ap.add_argument("--llama-server", default="/tmp/wt-agents-llama/build/bin/llama-server")
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--unconstrained", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    n = args.concurrency
    pp, lp = free_port(), free_port()
    pl = Server("pagellm", [args.pagellm, "serve", "--model", args.model, "--port", str(pp),
                            "--threads", str(args.threads), "--max-num-seqs", str(n),
                            "--max-batch-size", str(n), "--log-interval", "0",
                            "--disable-access-log", "--http-threads", "4"], pp,
                "/tmp/pagellm-constrained-pagellm.log")
    ll = Server("llama-server", [args.llama_server, "-m", args.model, "--port", str(lp),
                                 "--threads", str(args.threads), "--threads-batch",
                                 str(args.threads), "-np", str(n), "-c", str(n * 256),
                                 "--no-webui"], lp,
                "/tmp/pagellm-constrained-llama.log")
    rows = {}
    try:
        modes = [True] + ([False] if args.unconstrained else [])
        for constrained in modes:
            got = {"pagellm": [], "llama-server": []}
            for rep in range(args.reps):
                order = [(pl, "pagellm"), (ll, "llama-server")]
                if rep % 2:
                    order.reverse()
                lockfd = os.open(LOCK, os.O_CREAT | os.O_RDWR)
                import fcntl
                fcntl.flock(lockfd, fcntl.LOCK_EX)
                try:
                    for srv, kind in order:
                        tps, bad, toks = run(srv, kind, args, constrained)
                        if bad:
                            sys.exit(f"{kind}: {bad} answers are not a prefix of the schema's JSON")
                        got[kind].append(tps)
                        print(f"{'constrained' if constrained else 'plain'} rep {rep} {kind}: "
                              f"{tps:.1f} output tok/s ({toks} tokens)", flush=True)
                finally:
                    fcntl.flock(lockfd, fcntl.LOCK_UN)
                    os.close(lockfd)
            med = {k: statistics.median(v) for k, v in got.items()}
            rows["constrained" if constrained else "plain"] = {
                "pagellm": med["pagellm"], "llama-server": med["llama-server"],
                "ratio": med["pagellm"] / med["llama-server"], "runs": got}
    finally:
        pl.stop()
        ll.stop()
    print(f"\n| workload | pagellm tok/s | llama-server tok/s | ratio |")
    print("| --- | ---: | ---: | ---: |")
    for k, v in rows.items():
        print(f"| {k}, {n} concurrent, {args.requests} x {args.max_tokens} tokens | "
              f"{v['pagellm']:.1f} | {v['llama-server']:.1f} | {v['ratio']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
