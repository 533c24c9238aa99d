#!/usr/bin/env python3
"""Tests of `pagellm bench serve` against the mock OpenAI-compatible server.

usage: test_bench_serve.py PAGELLM CASE

Each CASE starts tests/tools/mock_openai_server.py on a free loopback port (its delays and
token counts known in advance), runs the client against it and checks: exact counts (requests,
failures, input and output tokens, chunks and inter-token gaps), the request bodies the mock
received, timings within bounds that follow from the mock's delays (a first chunk cannot come
before the mock's TTFT delay, nor the last before all its delays have passed), the arrival
schedule (recomputed here from the seed for Poisson arrivals), the concurrency limit (the mock
records its peak), goodput, the JSON against the printed lines, and usage errors. No pagellm
server and no model are needed. Exit 0 pass, 1 fail, 77 skip.
"""
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK = os.path.join(HERE, "mock_openai_server.py")
TOKENIZER = os.path.join(HERE, "..", "data", "tok512_hf")
PAGELLM = None
TMP = None
SLACK = 1.5  # seconds a loaded machine may add to any delay (upper bounds only)

sys.path.insert(0, HERE)
import test_tools  # noqa: E402  (run_pty, bar_frames)
from test_tools import Failure, check  # noqa: E402


class Mock:
    """The mock server as a context manager: .url, .stats()."""

    def __init__(self, *args):
        self.args = [str(a) for a in args]

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, MOCK, "--port", "0"] + self.args,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        m = re.fullmatch(r"PORT (\d+)\n", line)
        check(m, f"the mock server did not start: {line!r}")
        self.url = f"http://127.0.0.1:{m.group(1)}"
        return self

    def stats(self):
        with urllib.request.urlopen(self.url + "/mock/stats", timeout=30) as r:
            st = json.load(r)
        st["requests"].sort(key=lambda q: q["index"])
        return st

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


def run(args, expect_rc=0, env=None, timeout=120):
    p = subprocess.run([PAGELLM, "bench", "serve"] + [str(a) for a in args], capture_output=True,
                       text=True, timeout=timeout, env=env)
    check(p.returncode >= 0, f"died of signal {-p.returncode}\n{p.stderr}")
    check("Sanitizer" not in p.stderr and "runtime error:" not in p.stderr,
          f"sanitizer report:\n{p.stderr}")
    check(p.returncode == expect_rc,
          f"bench serve {' '.join(map(str, args))}: exit {p.returncode}, expected {expect_rc}\n"
          f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def tmp(name):
    return os.path.join(TMP, name)


def serve(mock, args, expect_rc=0, env=None):
    """Runs the client against the mock with --output-json; returns (process, json, rows)."""
    out = tmp("serve.json")
    if os.path.exists(out):
        os.remove(out)
    p = run(["--base-url", mock.url, "--output-json", out] + args, expect_rc, env)
    js = None
    if os.path.exists(out):
        with open(out, encoding="utf-8") as f:
            js = json.load(f)
    return p, js, result_rows(p.stdout) if "Serving Benchmark Result" in p.stdout else {}


# ------------------------------------------------------------------------------------------
# The result block, as vLLM prints it
# ------------------------------------------------------------------------------------------

ROW = re.compile(r"^(.{40}) (\S+) *$")
SECTIONS = {"ttft": "---------------Time to First Token----------------",
            "tpot": "-----Time per Output Token (excl. 1st token)------",
            "itl": "---------------Inter-token Latency----------------",
            "e2el": "----------------End-to-end Latency----------------"}
LABEL = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2EL"}


def result_rows(stdout):
    lines = stdout.splitlines()
    check(lines.count("============ Serving Benchmark Result ============") == 1,
          f"no result header:\n{stdout}")
    start = lines.index("============ Serving Benchmark Result ============")
    check(lines[-1] == "=" * 50, f"the block does not end with 50 '=':\n{stdout}")
    rows = {}
    for line in lines[start + 1:-1]:
        if line in SECTIONS.values():
            continue
        m = ROW.match(line)
        check(m and len(line) >= 51, f"row not in vLLM's '{{:<40}} {{:<10}}' format: {line!r}")
        rows[m.group(1).rstrip()] = m.group(2)
    return rows


def num(rows, label):
    check(label in rows, f"missing row {label!r}: {sorted(rows)}")
    return float(rows[label])


def near2(printed, value):
    """A row printed with 2 decimals shows value."""
    return abs(printed - value) <= 0.0051 + 1e-9 * abs(value)


def check_consistent(rows, js, percentiles=("99",), metrics=("ttft", "tpot", "itl", "e2el")):
    """The printed rows are the JSON's numbers, and the JSON's figures follow from its own
    per-request arrays (recomputed here as vLLM's calculate_metrics does)."""
    check(int(rows["Successful requests:"]) == js["completed"], "completed differs")
    check(int(rows["Failed requests:"]) == js["failed"], "failed differs")
    check(int(rows["Total input tokens:"]) == js["total_input_tokens"], "input tokens differ")
    check(int(rows["Total generated tokens:"]) == js["total_output_tokens"], "output differs")
    for label, key in (("Benchmark duration (s):", "duration"),
                       ("Request throughput (req/s):", "request_throughput"),
                       ("Output token throughput (tok/s):", "output_throughput"),
                       ("Peak output token throughput (tok/s):", "max_output_tokens_per_s"),
                       ("Peak concurrent requests:", "max_concurrent_requests"),
                       ("Total token throughput (tok/s):", "total_token_throughput")):
        check(near2(num(rows, label), js[key]), f"{label} {rows[label]} vs JSON {js[key]}")
    ok = [i for i, e in enumerate(js["errors"]) if e == ""]
    check(len(ok) == js["completed"] and len(js["errors"]) - len(ok) == js["failed"],
          "errors[] does not match completed/failed")
    n_in = sum(js["input_lens"][i] for i in ok)
    n_out = sum(js["output_lens"][i] for i in ok)
    check(n_in == js["total_input_tokens"] and n_out == js["total_output_tokens"],
          "totals are not the sums of the successful requests' lengths")
    d = js["duration"]
    check(abs(js["request_throughput"] - len(ok) / d) < 1e-6 * max(1, len(ok) / d),
          "request_throughput != completed / duration")
    check(abs(js["output_throughput"] - n_out / d) < 1e-6 * max(1, n_out / d),
          "output_throughput != output tokens / duration")
    series = {"ttft": [js["ttfts"][i] for i in ok], "e2el": [js["latencies"][i] for i in ok],
              "itl": [g for i in ok for g in js["itls"][i]],
              "tpot": [(js["latencies"][i] - js["ttfts"][i]) / (js["output_lens"][i] - 1)
                       for i in ok if js["output_lens"][i] > 1]}
    for m in ("ttft", "tpot", "itl", "e2el"):
        present = SECTIONS[m] in rows or any(k.endswith(f" {LABEL[m]} (ms):") for k in rows)
        check(present == (m in metrics), f"section {m}: shown {present}, asked {m in metrics}")
        if m not in metrics:
            check(f"mean_{m}_ms" not in js, f"mean_{m}_ms in the JSON although not asked")
            continue
        v = sorted(series[m])
        mean = sum(v) / len(v) * 1e3 if v else 0
        check(abs(js[f"mean_{m}_ms"] - mean) < 1e-6 * max(1, mean), f"mean {m} differs")
        check(near2(num(rows, f"Mean {LABEL[m]} (ms):"), js[f"mean_{m}_ms"]), f"mean {m} row")
        check(near2(num(rows, f"Median {LABEL[m]} (ms):"), js[f"median_{m}_ms"]),
              f"median {m} row")
        for p in percentiles:
            check(near2(num(rows, f"P{p} {LABEL[m]} (ms):"), js[f"p{p}_{m}_ms"]), f"P{p} {m}")
            if v:
                pos = float(p) / 100 * (len(v) - 1)
                lo = int(pos)
                want = (v[lo] + (pos - lo) * (v[min(lo + 1, len(v) - 1)] - v[lo])) * 1e3
                check(abs(js[f"p{p}_{m}_ms"] - want) < 1e-6 * max(1, want), f"P{p} {m} value")


# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------

def case_basic():
    """Random token-id prompts, one token per chunk: exact counts and bodies, timings from the
    mock's delays, JSON against the printed rows."""
    n, in_len, out_len, ttft, itl = 8, 16, 5, 80, 30
    with Mock("--ttft-ms", ttft, "--itl-ms", itl) as mock:
        p, js, rows = serve(mock, ["--num-prompts", n, "--input-len", in_len, "--output-len",
                                   out_len, "--seed", 3])
        st = mock.stats()
    check(p.stdout.startswith(f"Server: {mock.url}/v1/completions (model mock-model)\n"),
          f"header: {p.stdout.splitlines()[0]!r}")
    check("Traffic request rate: inf" in p.stdout, "no request rate line")
    check(rows["Successful requests:"] == str(n) and rows["Failed requests:"] == "0",
          f"counts: {rows}")
    check(int(rows["Total input tokens:"]) == n * in_len, "input tokens != n x input-len")
    check(int(rows["Total generated tokens:"]) == n * out_len, "output tokens != n x output-len")
    check("Request goodput (req/s):" not in rows and "Maximum request concurrency:" not in rows
          and "Request rate configured (RPS):" not in rows, "rows shown that were not asked for")
    check_consistent(rows, js)
    # what the mock received
    reqs = st["requests"]
    check([q["index"] for q in reqs] == list(range(n)), f"request ids {[q['index'] for q in reqs]}")
    for q in reqs:
        b = q["body"]
        check(q["path"] == "/v1/completions" and b["model"] == "mock-model", f"body {b}")
        check(isinstance(b["prompt"], list) and len(b["prompt"]) == in_len and
              all(isinstance(t, int) and 3 <= t < 512 for t in b["prompt"]),
              f"prompt is not {in_len} ids in [3, 512): {b['prompt']}")
        check(b["max_tokens"] == out_len and b["stream"] is True and b["ignore_eos"] is True and
              b["stream_options"] == {"include_usage": True}, f"request fields: {b}")
        check(not any(k in b for k in ("temperature", "top_p")), "sampling sent unasked")
        check(q["auth"] is None, "an Authorization header without an API key")
    check(len({tuple(q["body"]["prompt"]) for q in reqs}) == n, "prompts repeat")
    check(st["peak_concurrency"] == n and js["max_concurrent_requests"] == n,
          f"rate inf: all {n} open at once (mock {st['peak_concurrency']}, "
          f"client {js['max_concurrent_requests']})")
    # timings: lower bounds are exact (nothing arrives before the mock sends it)
    for i in range(n):
        t, e, g = js["ttfts"][i], js["latencies"][i], js["itls"][i]
        check(len(g) == out_len - 1, f"request {i}: {len(g)} gaps for {out_len} chunks")
        check(t >= ttft / 1e3 and t < ttft / 1e3 + SLACK, f"TTFT {t} vs the mock's {ttft} ms")
        check(e >= (ttft + (out_len - 1) * itl) / 1e3, f"E2EL {e} shorter than the mock's delays")
        check(e < (ttft + (out_len - 1) * itl) / 1e3 + SLACK, f"E2EL {e} far over the delays")
        check(all(x >= 0 for x in g) and abs(t + sum(g) - e) < 1e-6, "TTFT + ITLs != E2EL")
        check(js["generated_texts"][i] == "".join(f" t{j}" for j in range(out_len)),
              f"text {js['generated_texts'][i]!r}")
    check(js["median_itl_ms"] < itl + SLACK * 1e3, f"median ITL {js['median_itl_ms']}")
    check(js["input_lens"] == [in_len] * n and js["output_lens"] == [out_len] * n, "lens")
    check(js["model_id"] == "mock-model" and js["backend"] == "openai" and
          js["request_rate"] == "inf" and js["max_concurrency"] is None and
          js["request_goodput"] is None, "run description in the JSON")
    check("\r" not in p.stderr and "[#" not in p.stderr, "progress bar drawn without a terminal")


def case_chunks():
    """Several tokens per chunk: ITLs are per chunk; output tokens come from the usage, else
    from token_ids, else one per chunk."""
    n, out_len, k = 4, 7, 3
    chunks = math.ceil(out_len / k)
    args = ["--num-prompts", n, "--input-len", 10, "--output-len", out_len]
    for extra, want_out, want_in in ((["--token-ids"], out_len, 10), ([], out_len, 10),
                                     (["--no-usage", "--token-ids"], out_len, 10),
                                     (["--no-usage"], chunks, 10)):
        with Mock("--ttft-ms", 20, "--itl-ms", 20, "--tokens-per-chunk", k, *extra) as mock:
            p, js, rows = serve(mock, args)
        check(js["output_lens"] == [want_out] * n,
              f"mock {extra}: output lens {js['output_lens']}, expected {want_out}")
        check(js["input_lens"] == [want_in] * n, f"mock {extra}: input lens {js['input_lens']}")
        check(all(len(g) == chunks - 1 for g in js["itls"]), f"mock {extra}: ITLs per chunk")
        check(all(t == "".join(f" t{j}" for j in range(out_len)) for t in js["generated_texts"]),
              "joined chunk texts differ from the tokens sent")
        check_consistent(rows, js)


def case_chat():
    """The chat endpoint with a local tokenizer: text prompts of the asked token length, a role
    chunk and an empty final chunk not timed, usage's prompt count preferred."""
    n, in_len, out_len = 4, 24, 4
    args = ["--endpoint", "/v1/chat/completions", "--tokenizer", TOKENIZER,
            "--num-prompts", n, "--input-len", in_len, "--output-len", out_len]
    with Mock("--role-chunk", "--final-empty-chunk", "--ttft-ms", 30, "--itl-ms", 10) as mock:
        p, js, rows = serve(mock, args)
        st = mock.stats()
    check("prompts as text" in p.stdout, "prompts were not sent as text")
    check_consistent(rows, js)
    for q in st["requests"]:
        b = q["body"]
        check(q["path"] == "/v1/chat/completions" and b["max_completion_tokens"] == out_len and
              "max_tokens" not in b, f"chat body {b}")
        msgs = b["messages"]
        check(len(msgs) == 1 and msgs[0]["role"] == "user" and isinstance(msgs[0]["content"], str)
              and msgs[0]["content"], f"messages {msgs}")
    words = [len(q["body"]["messages"][0]["content"].split()) for q in st["requests"]]
    check(js["input_lens"] == words, f"input lens {js['input_lens']} are not the server's {words}")
    check(js["output_lens"] == [out_len] * n, "output lens")
    check(all(len(g) == out_len - 1 for g in js["itls"]), "role/empty chunks were timed")
    # without usage: the prompt's tokens as counted here (BOS included) = --input-len
    with Mock("--no-usage") as mock:
        p, js, rows = serve(mock, args)
    check(js["input_lens"] == [in_len] * n,
          f"local counts {js['input_lens']} != --input-len {in_len}")
    # completions with a tokenizer: text prompts too
    with Mock() as mock:
        serve(mock, ["--tokenizer", TOKENIZER, "--num-prompts", 2, "--input-len", 12,
                     "--output-len", 2])
        st = mock.stats()
    check(all(isinstance(q["body"]["prompt"], str) for q in st["requests"]), "prompt not text")


def case_failures():
    """HTTP errors, error objects, cut connections, missing [DONE] and garbage fail their
    request only, are counted, and the first reason is printed."""
    n, out_len = 12, 3
    fails = {1: "http", 3: "error", 5: "drop", 7: "nodone", 9: "garbage", 10: "json"}
    spec = ",".join(f"{i}:{m}" for i, m in fails.items())
    with Mock("--fail", spec, "--ttft-ms", 10, "--itl-ms", 10) as mock:
        p, js, rows = serve(mock, ["--num-prompts", n, "--input-len", 8, "--output-len", out_len])
    check(js["failed"] == len(fails) and js["completed"] == n - len(fails), f"counts {rows}")
    check(rows["Failed requests:"] == str(len(fails)), "printed failures")
    want = {1: "HTTP 500: mock failure of request 1",
            3: "error in the stream: mock error object in request 3",
            5: "partial", 7: "without data: [DONE]", 9: "not JSON",
            10: "not an event stream (Content-Type: application/json)"}
    for i, e in enumerate(js["errors"]):
        if i in fails:
            check(want[i].lower() in e.lower(), f"request {i} ({fails[i]}): error {e!r}")
            check(js["output_lens"][i] == 0, "a failed request's output counted")
        else:
            check(e == "", f"request {i} failed: {e}")
    check(js["total_output_tokens"] == (n - len(fails)) * out_len, "tokens of failed requests")
    check(js["total_input_tokens"] == (n - len(fails)) * 8, "input of failed requests")
    check(f"{len(fails)} of {n} requests failed; the first (request 1): HTTP 500: mock failure "
          "of request 1" in p.stderr, f"first error not printed:\n{p.stderr}")
    check_consistent(rows, js)
    # nothing succeeds: exit 1
    with Mock("--fail", ",".join(f"{i}:http" for i in range(3))) as mock:
        p, js, rows = serve(mock, ["--num-prompts", 3, "--output-len", 2], expect_rc=1)
    check(js["completed"] == 0 and "no request succeeded" in p.stderr, p.stderr)


def poisson_schedule(n, rate, seed):
    """serve_schedule.c's arrivals for burstiness 1, recomputed."""
    mask = (1 << 64) - 1
    st = (seed * 0x2545F4914F6CDD1D + 13) & mask
    t, out = 0.0, []
    for _ in range(n):
        st = (st + 0x9E3779B97F4A7C15) & mask
        z = st
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        z ^= z >> 31
        u = ((z >> 11) + 0.5) * (1.0 / 9007199254740992.0)
        t += -math.log(u) * (1.0 / rate)
        out.append(t)
    scale = (n / rate) / out[-1]
    return [x * scale for x in out]


def in_flight(intervals, t):
    return sum(1 for a, b in intervals if a <= t < b)


def case_rate():
    """--request-rate with a seed: the arrivals are the Poisson schedule of that seed, requests
    go out on time, and the mock sees the number of open requests the schedule implies."""
    n, rate, seed, ttft, itl, out_len = 10, 4.0, 7, 200, 100, 3
    dur = (ttft + (out_len - 1) * itl) / 1e3
    sched = poisson_schedule(n, rate, seed)
    with Mock("--ttft-ms", ttft, "--itl-ms", itl) as mock:
        p, js, rows = serve(mock, ["--request-rate", rate, "--seed", seed, "--num-prompts", n,
                                   "--input-len", 4, "--output-len", out_len])
        st = mock.stats()
    check(rows["Request rate configured (RPS):"] == "4.00", "rate row")
    check("Burstiness factor: 1 (Poisson process)" in p.stdout, "burstiness line")
    arr = js["arrival_times"]
    check(all(abs(a - b) < 1e-9 for a, b in zip(arr, sched)), f"arrivals {arr} != {sched}")
    check(abs(arr[-1] - n / rate) < 1e-9, "the last arrival is not at n / rate")
    starts = js["start_times"]
    check(all(s >= a - 1e-9 for s, a in zip(starts, arr)), "a request was sent early")
    late = max(s - a for s, a in zip(starts, arr))
    check(late < 0.25, f"a request was sent {late:.3f} s after its arrival time")
    # the mock's view: arrivals in the same order and spacing
    reqs = st["requests"]
    m_arr = [q["arrival"] for q in reqs]
    off = sorted(m - s for m, s in zip(m_arr, starts))[n // 2]  # the mock's clock - ours
    check(all(abs(m - off - s) < 0.25 for m, s in zip(m_arr, starts)),
          f"mock arrivals {m_arr} do not follow the sends {starts}")
    # open requests over time: expected from the schedule and the mock's fixed duration, at
    # instants away from every edge
    expected = [(a, a + dur) for a in sched]
    seen = [(q["arrival"] - off, q["end"] - off) for q in reqs]
    edges = sorted(x for iv in expected for x in iv)
    samples = [k * 0.005 for k in range(int((sched[-1] + dur) * 200) + 1)]
    checked = 0
    for t in samples:
        if min(abs(t - e) for e in edges) < 0.1:
            continue
        checked += 1
        check(in_flight(seen, t) == in_flight(expected, t),
              f"at {t:.2f} s the mock had {in_flight(seen, t)} requests open, the schedule "
              f"implies {in_flight(expected, t)}")
    check(checked >= 50, f"only {checked} instants checked")
    check(st["peak_concurrency"] >= max(in_flight(expected, t) for t in samples) - 1,
          "peak concurrency below the schedule's")
    # the same seed gives the same schedule, another seed another one
    with Mock("--ttft-ms", 1, "--itl-ms", 1) as mock:
        _, js2, _ = serve(mock, ["--request-rate", 40, "--seed", seed, "--num-prompts", n,
                                 "--output-len", 1])
        _, js3, _ = serve(mock, ["--request-rate", 40, "--seed", seed + 1, "--num-prompts", n,
                                 "--output-len", 1])
    check(all(abs(x - y * rate / 40) < 1e-9 for x, y in zip(js2["arrival_times"], arr)),
          "the same seed at another rate is not the same schedule scaled")
    check(js3["arrival_times"] != js2["arrival_times"], "another seed, the same schedule")


def case_burstiness():
    """Gamma gaps: a large burstiness spaces arrivals evenly, inf exactly, a small one bunches
    them; every schedule ends at n / rate."""
    n, rate = 12, 50.0
    gaps = {}
    with Mock("--ttft-ms", 1, "--itl-ms", 1) as mock:
        for b in ("inf", "400", "0.2"):
            p, js, rows = serve(mock, ["--request-rate", rate, "--burstiness", b, "--seed", 5,
                                       "--num-prompts", n, "--output-len", 1, "--input-len", 2])
            arr = js["arrival_times"]
            check(abs(arr[-1] - n / rate) < 1e-9 and arr == sorted(arr), f"b={b}: {arr}")
            gaps[b] = [y - x for x, y in zip([0.0] + arr, arr)]
            check(js["burstiness"] == ("inf" if b == "inf" else float(b)), "burstiness in JSON")
    check(all(abs(g - 1 / rate) < 1e-9 for g in gaps["inf"]), f"inf: gaps {gaps['inf']}")
    check(all(abs(g * rate - 1) < 0.3 for g in gaps["400"]), f"400: gaps {gaps['400']}")
    cv = lambda g: (sum((x - sum(g) / len(g)) ** 2 for x in g) / len(g)) ** 0.5 / (sum(g) / len(g))
    check(cv(gaps["0.2"]) > 3 * cv(gaps["400"]), "burstiness 0.2 is not burstier than 400")


def case_concurrency():
    """--max-concurrency N: never more than N open (the mock's peak), the rest queued."""
    n, cap = 12, 3
    with Mock("--ttft-ms", 60, "--itl-ms", 30) as mock:
        p, js, rows = serve(mock, ["--max-concurrency", cap, "--num-prompts", n, "--output-len",
                                   4, "--input-len", 4])
        st = mock.stats()
    check(st["peak_concurrency"] == cap, f"the mock saw {st['peak_concurrency']} open at once")
    check(rows["Maximum request concurrency:"] == str(cap), "concurrency row")
    check(js["max_concurrent_requests"] == cap and rows["Peak concurrent requests:"] == "3.00",
          f"client peak {js['max_concurrent_requests']}")
    check(js["max_concurrency"] == cap, "max_concurrency in JSON")
    queued = sorted(js["queue_times"])
    check(queued[-1] >= 3 * (60 + 3 * 30) / 1e3, f"the last request waited {queued[-1]} s")
    check_consistent(rows, js)


def case_goodput():
    """--goodput: requests meeting every objective, per second."""
    with Mock("--ttft-ms", 80, "--itl-ms", 10) as mock:
        args = ["--num-prompts", 4, "--output-len", 3, "--input-len", 4]
        p, js, rows = serve(mock, args + ["--goodput", "ttft:40"])
        check(rows["Request goodput (req/s):"] == "0.00" and js["good_requests"] == 0,
              f"TTFT over 40 ms counted as good: {rows}")
        check(js["goodput_slo_ms"] == {"ttft": 40.0}, "objectives in JSON")
        p, js, rows = serve(mock, args + ["--goodput", "ttft:60000", "tpot:60000",
                                          "e2el:60000"])
        check(js["good_requests"] == 4 and
              abs(js["request_goodput"] - js["request_throughput"]) < 1e-9,
              "all requests within loose objectives are not all good")
        check(near2(num(rows, "Request goodput (req/s):"), js["request_goodput"]), "goodput row")
        p, js, rows = serve(mock, args + ["--goodput", "e2el:50"])
        check(js["good_requests"] == 0, "E2EL objective not applied")


def case_percentiles():
    """--percentile-metrics and --metric-percentiles choose the sections and their rows."""
    with Mock("--ttft-ms", 10, "--itl-ms", 5) as mock:
        p, js, rows = serve(mock, ["--num-prompts", 6, "--output-len", 4, "--input-len", 4,
                                   "--percentile-metrics", "ttft,e2el",
                                   "--metric-percentiles", "50,90,99.9"])
    check_consistent(rows, js, percentiles=("50", "90", "99.9"), metrics=("ttft", "e2el"))
    check(abs(js["p50_ttft_ms"] - js["median_ttft_ms"]) < 1e-9, "P50 != median")
    lines = p.stdout.splitlines()
    check(lines.index(SECTIONS["ttft"]) < lines.index(SECTIONS["e2el"]), "section order")


def case_api_key():
    """--api-key (or $OPENAI_API_KEY) is sent as a bearer token; without it the 401 is
    reported."""
    with Mock("--api-key", "s3cret", "--ttft-ms", 1, "--itl-ms", 1) as mock:
        args = ["--num-prompts", 2, "--output-len", 2, "--input-len", 3]
        serve(mock, args + ["--api-key", "s3cret"])
        check(all(q["auth"] == "Bearer s3cret" for q in mock.stats()["requests"]), "auth header")
        env = dict(os.environ, OPENAI_API_KEY="s3cret")
        serve(mock, args, env=env)
        env.pop("OPENAI_API_KEY")
        p, _, _ = serve(mock, args, expect_rc=1, env=env)
        check("GET " + mock.url + "/v1/models: HTTP 401: invalid or missing API key" in p.stderr,
              f"401 on the model list not reported:\n{p.stderr}")
        p, js, _ = serve(mock, args + ["--model", "mock-model", "--vocab-size", 100],
                         expect_rc=1, env=env)
        check("HTTP 401: invalid or missing API key" in p.stderr and js["failed"] == 2,
              f"401 on requests not reported:\n{p.stderr}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def case_unreachable():
    """Nothing listening: a clear error and exit 1, both when the model list is asked for and
    when every request fails."""
    url = f"http://127.0.0.1:{free_port()}"
    p = run(["--base-url", url, "--num-prompts", 2], expect_rc=1)
    check(f"cannot reach the server: GET {url}/v1/models: Couldn't connect to server" in p.stderr,
          f"stderr:\n{p.stderr}")
    p = run(["--base-url", url, "--model", "m", "--vocab-size", 100, "--num-prompts", 2],
            expect_rc=1)
    check("2 of 2 requests failed" in p.stderr and "Couldn't connect to server" in p.stderr and
          "no request succeeded" in p.stderr, f"stderr:\n{p.stderr}")


def case_bad_flags():
    """Usage errors exit 2 naming the flag, before any request."""
    url = f"http://127.0.0.1:{free_port()}"  # never reached
    cases = [
        (["--request-rate", "0"], "--request-rate"), (["--request-rate", "fast"], "--request-rate"),
        (["--burstiness", "-1"], "--burstiness"), (["--max-concurrency", "0"], "--max-concurrency"),
        (["--goodput"], "--goodput"), (["--goodput", "itl:5"], "--goodput"),
        (["--goodput", "ttft:x"], "--goodput"), (["--goodput", "ttft"], "--goodput"),
        (["--endpoint", "/v1/embeddings"], "--endpoint"),
        (["--percentile-metrics", "ttft,foo"], "--percentile-metrics"),
        (["--metric-percentiles", "0"], "--metric-percentiles"),
        (["--metric-percentiles", "50,abc"], "--metric-percentiles"),
        (["--dataset-name", "bogus"], "--dataset-name"),
        (["--dataset-name", "sharegpt"], "--dataset-name sharegpt needs --dataset-path"),
        (["--port", "99999"], "--port"), (["--port", "8000"], "--base-url and --host/--port"),
        (["--temperature", "hot"], "--temperature"), (["--vocab-size", "2"], "--vocab-size"),
        (["--num-prompts", "0"], "--num-prompts"), (["--frobnicate"], "'--frobnicate'"),
        (["--endpoint", "/v1/chat/completions"], "--tokenizer"),
        (["--tokenizer", tmp("missing.json")], "--tokenizer"),
    ]
    for extra, needle in cases:
        base = [] if "--port" in extra and extra[1] == "99999" else ["--base-url", url]
        p = run(base + extra, expect_rc=2)
        check(needle in p.stderr, f"{extra}: {needle!r} not in:\n{p.stderr}")
    p = run(["--base-url", "ftp://x"], expect_rc=2)
    check("--base-url" in p.stderr, p.stderr)
    # a server that does not say its vocabulary size and has no /tokenize: random ids need one
    with Mock("--vocab", 0) as mock:
        p = run(["--base-url", mock.url], expect_rc=2)
        check("--vocab-size" in p.stderr and "--tokenizer" in p.stderr, p.stderr)
    # with vLLM's /tokenize: ids below the largest it gives for a sample text
    with Mock("--vocab", 0, "--tokenize-max-id", 300) as mock:
        p = run(["--base-url", mock.url, "--num-prompts", 6, "--random-input-len", 40])
        check("/tokenize" in p.stderr and "301" in p.stderr, f"no word of the fallback: {p.stderr}")
        reqs = [r for r in mock.stats()["requests"] if r["path"] == "/v1/completions"]
        ids = [t for r in reqs for t in r["body"]["prompt"]]
        check(len(reqs) == 6 and ids and all(3 <= t < 301 for t in ids) and max(ids) > 150,
              f"ids outside [3, 301) or none near the top: {sorted(set(ids))[-5:]}")
    h = subprocess.run([PAGELLM, "bench", "serve", "--help"], capture_output=True, text=True)
    check(h.returncode == 0 and "--request-rate" in h.stdout and "--goodput" in h.stdout,
          "--help")


def case_dataset():
    """A JSONL dataset: text prompts go as text (the server tokenizes), ids as arrays, each
    with its max_tokens; ShareGPT with a tokenizer sends the conversations' first turns."""
    path = tmp("p.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"prompt": "Once upon a time", "max_tokens": 3}) + "\n")
        f.write(json.dumps({"prompt_token_ids": [5, 6, 7, 8], "max_tokens": 2}) + "\n")
    with Mock("--ttft-ms", 1, "--itl-ms", 1) as mock:
        p, js, rows = serve(mock, ["--dataset-path", path, "--dataset-name", "custom"])
        reqs = mock.stats()["requests"]
    check([q["body"]["prompt"] for q in reqs] == ["Once upon a time", [5, 6, 7, 8]],
          f"prompts {[q['body']['prompt'] for q in reqs]}")
    check([q["body"]["max_tokens"] for q in reqs] == [3, 2], "max_tokens per line")
    check(js["input_lens"] == [4, 4] and js["output_lens"] == [3, 2], f"lens {js}")
    p = run(["--base-url", "http://127.0.0.1:1", "--model", "m", "--dataset-path", path,
             "--dataset-name", "sharegpt"], expect_rc=2)
    check("holds JSON lines" in p.stderr, p.stderr)
    sg = tmp("sg.json")
    conv = [{"conversations": [{"value": "Once upon a time there was a little cat"},
                               {"value": "who liked to play in the sun all day long"}]},
            {"conversations": [{"value": "hi"}]},
            {"conversations": [{"value": "The little dog ran to the park to play"},
                               {"value": "and found a big red ball under the tree"}]}]
    with open(sg, "w", encoding="utf-8") as f:
        json.dump(conv, f)
    with Mock("--ttft-ms", 1, "--itl-ms", 1) as mock:
        p, js, rows = serve(mock, ["--dataset-path", sg, "--tokenizer", TOKENIZER,
                                   "--endpoint", "/v1/chat/completions"])
        reqs = mock.stats()["requests"]
    firsts = {c["conversations"][0]["value"] for c in conv if len(c["conversations"]) > 1}
    check({q["body"]["messages"][0]["content"] for q in reqs} == firsts, "ShareGPT prompts")
    check(js["completed"] == 2 and all(q["body"]["max_completion_tokens"] >= 4 for q in reqs),
          "ShareGPT output lengths")


def case_progress_tty():
    """On a terminal the bar counts output tokens up to the workload's; stdout keeps the
    result block."""
    n, out_len = 6, 12
    with Mock("--ttft-ms", 50, "--itl-ms", 40) as mock:
        test_tools.PAGELLM = PAGELLM
        _, stdout, err = test_tools.run_pty(["bench", "serve", "--base-url", mock.url,
                                             "--num-prompts", str(n), "--input-len", "4",
                                             "--output-len", str(out_len)])
    frames = test_tools.bar_frames(err, "output tokens")
    check(int(frames[-1]["total"]) == n * out_len and int(frames[-1]["done"]) == n * out_len,
          f"final frame {frames[-1].group(0)!r}")
    check(frames[-1]["note"] == f"{n}/{n} requests", f"note {frames[-1]['note']!r}")
    check(len(frames) >= 2, "the bar was drawn only once")
    check("Serving Benchmark Result" in stdout and "\r" not in stdout, "stdout")


def case_save_result():
    """vLLM's --save-result / --result-dir / --result-filename: the JSON --output-json writes,
    under vLLM's default name in the directory (made when missing)."""
    with Mock() as mock:
        p, js, rows = serve(mock, ["--num-prompts", 3, "--input-len", 4, "--output-len", 2,
                                   "--save-result", "--result-dir", tmp("results"),
                                   "--max-concurrency", 2, "--request-rate", 10])
        files = os.listdir(tmp("results"))
        check(len(files) == 1 and re.fullmatch(
            r"openai-10\.0qps-concurrency2-mock-model-\d{8}-\d{6}\.json", files[0]),
            f"--save-result wrote {files}")
        with open(os.path.join(tmp("results"), files[0]), encoding="utf-8") as f:
            saved = json.load(f)
        check(saved["completed"] == 3 and saved["total_input_tokens"] == js["total_input_tokens"]
              and saved["ttfts"] == js["ttfts"], "the saved JSON differs from --output-json's")
        check(f"results saved to {tmp('results')}/{files[0]}" in p.stderr, "the path is not said")
        run(["--base-url", mock.url, "--num-prompts", 2, "--input-len", 4, "--output-len", 2,
             "--save_result", "--result-dir", tmp("results"), "--result-filename", "r.json"])
        with open(tmp("results/r.json"), encoding="utf-8") as f:
            check(json.load(f)["completed"] == 2, "--result-filename")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    global PAGELLM, TMP
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(f"usage: {sys.argv[0]} PAGELLM CASE  (CASE: {', '.join(sorted(CASES))})")
        return 2
    PAGELLM = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="pagellm-serve-") as d:
        TMP = d
        try:
            CASES[sys.argv[2]]()
        except Failure as e:
            print(f"FAIL {sys.argv[2]}: {e}")
            return 1
    print(f"PASS {sys.argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
