#!/usr/bin/env python3
"""Tests of the pagellm benchmark and profiling commands, run on the built binary.

usage: test_tools.py PAGELLM CASE

Each CASE runs `pagellm` on dummy:tiny (random weights, no files) with a few short prompts
and checks what a user relies on: exit status, the exact result lines, that the JSON parses
and agrees with the printed lines, that token counts add up to what the flags asked for
(expected values are computed here from the flags, never read back from the tool), that the
trace is valid Chrome trace-event JSON with the phase and op events, and that bad flags are
usage errors (exit 2) naming the flag. Exit 0 pass, 1 fail, 77 skip.
"""
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

PAGELLM = None
TMP = None
TINY = ["--model", "dummy:tiny"]
THROUGHPUT_RE = re.compile(
    r"^Throughput: (\d+\.\d\d) requests/s, (\d+\.\d\d) total tokens/s, "
    r"(\d+\.\d\d) output tokens/s$")


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(args, expect_rc=0, timeout=120):
    p = subprocess.run([PAGELLM] + args, capture_output=True, text=True, timeout=timeout)
    check(p.returncode >= 0, f"pagellm {' '.join(args)} died of signal {-p.returncode}\n{p.stderr}")
    # under -Db_sanitize a report may come with an exit status a case expects (1)
    check("Sanitizer" not in p.stderr and "runtime error:" not in p.stderr,
          f"pagellm {' '.join(args)}: sanitizer report\n{p.stderr}")
    if expect_rc is not None:
        check(p.returncode == expect_rc,
              f"pagellm {' '.join(args)}: exit {p.returncode}, expected {expect_rc}\n"
              f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def tmp(name):
    return os.path.join(TMP, name)


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def close(a, b, rel=2e-3, abs_=0.006):
    return abs(a - b) <= max(abs_, rel * max(abs(a), abs(b)))


def throughput_lines(stdout):
    """The three vLLM lines, which must be consecutive and in this order."""
    lines = stdout.splitlines()
    idx = [i for i, l in enumerate(lines) if l.startswith("Throughput:")]
    check(len(idx) == 1, f"expected one Throughput line:\n{stdout}")
    i = idx[0]
    m = THROUGHPUT_RE.match(lines[i])
    check(m, f"Throughput line has the wrong format: {lines[i]!r}")
    check(i + 2 < len(lines), "missing lines after Throughput")
    mp = re.fullmatch(r"Total num prompt tokens: (\d+)", lines[i + 1])
    mo = re.fullmatch(r"Total num output tokens: (\d+)", lines[i + 2])
    check(mp and mo, f"token count lines wrong: {lines[i + 1]!r} {lines[i + 2]!r}")
    return [float(x) for x in m.groups()], int(mp.group(1)), int(mo.group(1))


def check_throughput_consistent(stdout, js):
    (req_s, tok_s, out_s), n_prompt, n_out = throughput_lines(stdout)
    check(js["total_num_prompt_tokens"] == n_prompt, "JSON prompt tokens differ from stdout")
    check(js["total_num_output_tokens"] == n_out, "JSON output tokens differ from stdout")
    check(js["total_num_tokens"] == n_prompt + n_out, "total_num_tokens != prompt + output")
    el = js["elapsed_time"]
    check(el > 0, "elapsed_time must be positive")
    # printed with 2 decimals: equal to the JSON after rounding, and both equal count / time
    for printed, key, count in ((req_s, "requests_per_second", js["num_requests"]),
                                (tok_s, "tokens_per_second", n_prompt + n_out),
                                (out_s, "output_tokens_per_second", n_out)):
        check(close(printed, js[key]), f"{key}: printed {printed} vs JSON {js[key]}")
        check(close(js[key], count / el), f"{key}: {js[key]} != {count} / {el}")
    return n_prompt, n_out


# ------------------------------------------------------------------------------------------
# Cases
# ------------------------------------------------------------------------------------------

def case_throughput():
    out = tmp("t.json")
    p = run(["bench", "throughput"] + TINY + ["--num-prompts", "6", "--input-len", "12",
                                              "--output-len", "7", "--output-json", out])
    js = load_json(out)
    n_prompt, n_out = check_throughput_consistent(p.stdout, js)
    check(n_prompt == 6 * 12, f"prompt tokens {n_prompt} != 6 x 12")
    check(n_out == 6 * 7, f"output tokens {n_out} != 6 x 7 (EOS is ignored by default)")
    check(js["num_requests"] == 6, "num_requests != 6")
    for label in ("Mean batch:", "Peak KV usage:", "Preemptions:", "Prefix cache hit rate:",
                  "TTFT (ms): mean", "TPOT (ms): mean"):
        check(label in p.stdout, f"missing {label!r} in output")
    eng = js["engine"]
    check(1 <= eng["mean_batch_seqs"] <= 6, f"mean batch {eng['mean_batch_seqs']} out of [1, 6]")
    check(0 < eng["kv_usage_peak"] <= 1, "peak KV usage must be in (0, 1]")
    check(js["ttft_ms"]["n"] == 6 and js["tpot_ms"]["n"] == 6, "TTFT/TPOT over 6 requests")
    check(js["ttft_ms"]["median"] <= js["ttft_ms"]["p99"] + 1e-9, "TTFT median > p99")
    check("\r" not in p.stderr, "progress bar drawn although stderr is not a terminal")
    check(js["workload"]["num_prompts"] == 6 and js["config"]["model"] == "dummy:tiny",
          "workload/config not recorded")


def case_prefix():
    # One sequence at a time, so later prompts find the shared prefix's full blocks cached.
    out = tmp("p.json")
    p = run(["bench", "throughput"] + TINY + [
        "--num-prompts", "4", "--prefix-len", "32", "--input-len", "8", "--output-len", "3",
        "--block-size", "16", "--max-batch-size", "1", "--output-json", out])
    js = load_json(out)
    n_prompt, n_out = check_throughput_consistent(p.stdout, js)
    check(n_prompt == 4 * (32 + 8), f"prompt tokens {n_prompt} != 4 x (32 + 8)")
    check(n_out == 4 * 3, f"output tokens {n_out} != 12")
    check(js["engine"]["prefix_cache_hit_rate"] > 0, "a shared prefix gave no prefix-cache hits")
    check(js["engine"]["prompt_tokens_computed"] < n_prompt,
          "every prompt token was computed despite the shared prefix")


def case_range():
    out = tmp("r.json")
    p = run(["bench", "throughput"] + TINY + [
        "--num-prompts", "10", "--input-len", "20", "--output-len", "10",
        "--random-range-ratio", "0.5", "--seed", "3", "--output-json", out])
    n_prompt, n_out = check_throughput_consistent(p.stdout, load_json(out))
    check(10 * 10 <= n_prompt <= 10 * 30, f"prompt tokens {n_prompt} outside [100, 300]")
    check(10 * 5 <= n_out <= 10 * 15, f"output tokens {n_out} outside [50, 150]")
    # same seed, same workload
    p2 = run(["bench", "throughput"] + TINY + [
        "--num-prompts", "10", "--input-len", "20", "--output-len", "10",
        "--random-range-ratio", "0.5", "--seed", "3"])
    _, n_prompt2, n_out2 = throughput_lines(p2.stdout)
    check((n_prompt2, n_out2) == (n_prompt, n_out), "the same seed gave a different workload")


def case_overflow():
    # A bounded waiting queue that refuses: the benchmark feeds it as it drains, all finish.
    out = tmp("o.json")
    p = run(["bench", "throughput"] + TINY + ["--num-prompts", "20", "--input-len", "8",
                                              "--output-len", "4", "--max-waiting", "2",
                                              "--output-json", out])
    n_prompt, n_out = check_throughput_consistent(p.stdout, load_json(out))
    check((n_prompt, n_out) == (160, 80), f"bounded queue: counts {n_prompt}/{n_out} != 160/80")
    # One that drops the oldest: dropped requests are not counted as throughput.
    p = run(["bench", "throughput"] + TINY + ["--num-prompts", "20", "--input-len", "8",
                                              "--output-len", "4", "--max-waiting", "2",
                                              "--overflow-policy", "drop-oldest",
                                              "--max-batch-size", "2", "--output-json", out])
    js = load_json(out)
    n_prompt, n_out = check_throughput_consistent(p.stdout, js)
    done, dropped = js["num_requests"], js["num_dropped"]
    check(done + dropped == 20 and dropped > 0, f"{done} done + {dropped} dropped != 20")
    check((n_prompt, n_out) == (8 * done, 4 * done), f"counts {n_prompt}/{n_out} for {done}")


def case_dataset():
    path = tmp("prompts.jsonl")
    prompts = [([5, 6, 7, 8], 5), ([9, 10], 6), ([11, 12, 13, 14, 15, 16], 7)]
    with open(path, "w", encoding="utf-8") as f:
        for ids, n in prompts:
            f.write(json.dumps({"prompt_token_ids": ids, "max_tokens": n}) + "\n")
        f.write("\n")
    out = tmp("d.json")
    p = run(["bench", "throughput"] + TINY + ["--dataset", path, "--output-json", out])
    n_prompt, n_out = check_throughput_consistent(p.stdout, load_json(out))
    check(n_prompt == 12 and n_out == 18, f"dataset counts {n_prompt}/{n_out}, expected 12/18")
    p = run(["bench", "throughput"] + TINY + ["--dataset", path, "--output-len", "4",
                                              "--num-prompts", "2"])
    _, n_prompt, n_out = throughput_lines(p.stdout)
    check(n_prompt == 6 and n_out == 8, f"--num-prompts 2 --output-len 4 gave {n_prompt}/{n_out}")
    # ShareGPT needs a tokenizer to count answer tokens; dummy models have none
    sg = tmp("sharegpt.json")
    with open(sg, "w", encoding="utf-8") as f:
        json.dump([{"conversations": [{"from": "human", "value": "hello there friend"},
                                      {"from": "gpt", "value": "hi to you too"}]}], f)
    p = run(["bench", "throughput"] + TINY + ["--dataset", sg], expect_rc=2)
    check("--dataset" in p.stderr and "tokenizer" in p.stderr, f"unclear error: {p.stderr}")
    bad = tmp("bad.jsonl")
    with open(bad, "w", encoding="utf-8") as f:
        f.write('{"prompt_token_ids": [1, 2]}\n{"prompt_token_ids": "x"}\n')
    p = run(["bench", "throughput"] + TINY + ["--dataset", bad], expect_rc=2)
    check(":2:" in p.stderr, f"a bad line should be named FILE:2: {p.stderr}")


def case_latency():
    out = tmp("l.json")
    p = run(["bench", "latency"] + TINY + [
        "--batch-size", "3", "--input-len", "8", "--output-len", "6", "--num-iters-warmup", "1",
        "--num-iters", "4", "--output-json", out])
    js = load_json(out)
    lat = js["latencies"]
    check(len(lat) == 4 and all(x > 0 for x in lat), f"latencies: {lat}")
    check(close(js["avg_latency"], sum(lat) / 4, rel=1e-9, abs_=1e-12), "avg != mean(latencies)")
    pct = js["percentiles"]
    keys = ["10", "25", "50", "75", "90", "99"]
    check(sorted(pct, key=int) == keys, f"percentile keys {list(pct)}")
    vals = [pct[k] for k in keys]
    check(vals == sorted(vals) and min(lat) <= vals[0] and vals[-1] <= max(lat),
          f"percentiles not monotonic within [min, max]: {vals}")
    s = sorted(lat)  # numpy's linear interpolation, computed here
    check(close(pct["50"], (s[1] + s[2]) / 2, rel=1e-9, abs_=1e-12), "median of 4 is not mid")
    m = re.search(r"^Avg latency: ([\d.]+) seconds$", p.stdout, re.M)
    check(m and close(float(m.group(1)), js["avg_latency"], rel=1e-5, abs_=2e-6),
          f"Avg latency line missing or differs:\n{p.stdout}")
    for k in keys:
        check(re.search(rf"^{k}% percentile latency: [\d.]+ seconds$", p.stdout, re.M),
              f"missing {k}% line")
    check(js["ttft_ms"]["n"] == 3 * 4, "TTFT should cover 3 requests x 4 iterations")
    check("TTFT (ms)" in p.stdout and "TPOT (ms)" in p.stdout, "TTFT/TPOT lines missing")
    check("bandwidth" not in js, "bandwidth reported without --bandwidth")


def expected_membw_isa():
    """The loads the bandwidth probe must pick on this CPU (bench/membw.c)."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        return None
    if platform.machine() not in ("x86_64", "AMD64"):
        return "baseline"
    return "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "baseline"


def case_latency_bandwidth():
    out = tmp("lb.json")
    p = run(["bench", "latency"] + TINY + [
        "--batch-size", "1", "--input-len", "4", "--output-len", "5", "--num-iters-warmup", "0",
        "--num-iters", "3", "--bandwidth", "--array-mib", "4", "--roofline-reps", "1",
        "--output-json", out])
    js = load_json(out)
    bw = js["bandwidth"]
    read, weight, ratio = bw["read_gbs"], bw["weight_gbs"], bw["ratio"]
    check(len(read) == 4 and len(weight) == 3 and len(ratio) == 3,
          f"one reading before and after each of 3 iterations: {bw}")
    check(all(x > 0 and math.isfinite(x) for x in read + weight + ratio), f"values: {bw}")
    check(bw["array_bytes"] == 4 << 20, "--array-mib not followed")
    for i in range(3):
        around = (read[i] + read[i + 1]) / 2
        check(close(ratio[i], weight[i] / around, rel=1e-9, abs_=1e-12),
              f"iteration {i}: ratio != weight GB/s / mean of the readings around it")
    srt = sorted(ratio)
    check(close(bw["median_ratio"], srt[1], rel=1e-9, abs_=1e-12), "median of 3 ratios")
    m = re.search(r"^Weight streaming: median ([\d.]+) GB/s = ([\d.]+)% of the bandwidth",
                  p.stdout, re.M)
    check(m and close(float(m.group(2)), 100 * bw["median_ratio"], abs_=0.051),
          f"summary line missing or differs from the JSON:\n{p.stdout}")
    check(re.search(r"^Read bandwidth around the iterations \(GB/s, 3 x 4 MiB, " +
                    re.escape(bw["isa"]) + " loads", p.stdout, re.M), "readings line missing")
    want = expected_membw_isa()
    check(want is None or bw["isa"] == want, f"probe loads {bw['isa']}, CPU has {want}")


def check_trace(path, want_ops=True):
    ev = load_json(path)  # valid JSON or this raises
    check(isinstance(ev, list) and ev, "trace must be a non-empty JSON array")
    for e in ev:
        check(isinstance(e, dict) and "ph" in e and "name" in e, f"not a trace event: {e}")
        if e["ph"] == "X":
            check(isinstance(e["ts"], (int, float)) and e["dur"] >= 0, f"bad X event: {e}")
    phases = {e["name"] for e in ev if e["ph"] == "X" and e.get("cat") == "phase"}
    for ph in ("schedule", "forward", "sample", "detokenize", "output"):
        check(ph in phases, f"no {ph!r} phase events in the trace (have {sorted(phases)})")
    ops = {e["name"] for e in ev if e["ph"] == "X" and e.get("cat") == "op"}
    if want_ops:
        for op in ("matmul", "attention"):
            check(op in ops, f"no {op!r} op events in the trace (have {sorted(ops)})")
    counters = {e["name"] for e in ev if e["ph"] == "C"}
    check("batch" in counters, f"no batch counter events (have {sorted(counters)})")


ROOF_SMALL = ["--array-mib", "4", "--gemm-n", "64", "--roofline-reps", "1"]


def case_profile():
    trace, out = tmp("trace.json"), tmp("prof.json")
    p = run(["profile"] + TINY + ["--num-prompts", "3", "--input-len", "8", "--output-len", "4",
                                  "--reps", "2", "--trace", trace, "--output-json", out]
            + ROOF_SMALL)
    check_trace(trace)
    js = load_json(out)
    ov = js["overhead"]
    runs = [ov[k + "_tokens_per_second"] for k in ("off", "on", "on_trace")]
    check(all(len(r) == 2 for r in runs), "overhead should hold 2 runs of each mode")
    check(all(x > 0 for r in runs for x in r), "overhead throughputs must be positive")
    check(math.isclose(ov["overhead_fraction"], 1 - ov["on_trace_median"] / ov["off_median"],
                       rel_tol=1e-9, abs_tol=1e-12), "overhead != 1 - on+trace / off")
    prof = js["profile"]
    names = [e["name"] for e in prof["phases"]]
    check("forward" in names and "schedule" in names, f"phases: {names}")
    shares = sum(e["share"] for e in prof["phases"])
    check(0.5 < shares <= 1.0 + 1e-6, f"phase shares sum to {shares}")
    mm = [e for e in prof["ops"] if e["name"] == "matmul"]
    check(mm and mm[0]["seconds"] > 0 and mm[0]["gbs"] > 0 and mm[0]["gflops"] > 0,
          f"matmul rates missing: {mm}")
    check(math.isclose(mm[0]["gbs"], mm[0]["bytes"] / mm[0]["seconds"] * 1e-9, rel_tol=1e-6),
          "matmul GB/s != bytes / seconds")
    roof = prof["roofline"]
    check(roof["read_gbs"] > 0 and roof["gemm_gflops"] > 0, "roofline ceilings missing")
    check(math.isclose(mm[0]["fraction_of_read_bw"], mm[0]["gbs"] / roof["read_gbs"],
                       rel_tol=1e-6), "fraction of bandwidth inconsistent")
    for label in ("Profiling overhead", "Memory read bandwidth:", "GEMM peak", "matmul",
                  "%roof", "Trace: "):
        check(label in p.stdout, f"missing {label!r} in profile output")


def case_profile_threads():
    """The ceilings are measured with the engine's thread count: a 1-thread engine is not
    compared with an all-core GEMM peak or bandwidth."""
    out = tmp("prof1.json")
    run(["profile"] + TINY + ["--threads", "1", "--num-prompts", "2", "--input-len", "8",
                              "--output-len", "4", "--reps", "1", "--trace", tmp("t1.json"),
                              "--output-json", out] + ROOF_SMALL)
    roof = load_json(out)["profile"]["roofline"]
    check(roof["blas_threads"] == 1 and roof["memory_threads"] == 1,
          f"ceilings on {roof['blas_threads']} GEMM / {roof['memory_threads']} memory threads "
          f"for a 1-thread engine")
    out = tmp("prof2.json")
    run(["profile"] + TINY + ["--threads", "1", "--roofline-threads", "2", "--num-prompts", "2",
                              "--input-len", "8", "--output-len", "4", "--reps", "1",
                              "--trace", tmp("t2.json"), "--output-json", out] + ROOF_SMALL)
    roof = load_json(out)["profile"]["roofline"]
    check(roof["blas_threads"] == 2 and roof["memory_threads"] == 2,
          "--roofline-threads 2 not followed")


def case_throughput_profile():
    trace, out = tmp("tp_trace.json"), tmp("tp.json")
    p = run(["bench", "throughput"] + TINY + ["--num-prompts", "3", "--input-len", "8",
                                              "--output-len", "4", "--profile", trace,
                                              "--output-json", out] + ROOF_SMALL)
    check_trace(trace)
    js = load_json(out)
    check_throughput_consistent(p.stdout, js)
    check("profile" in js and js["profile"]["steps"] > 0, "profile missing from JSON")
    check("Profile:" in p.stdout and "op (forward)" in p.stdout, "profile table missing")
    trace2 = tmp("lat_trace.json")
    run(["bench", "latency"] + TINY + ["--batch-size", "2", "--input-len", "4",
                                       "--output-len", "3", "--num-iters", "2",
                                       "--num-iters-warmup", "0", "--profile", trace2,
                                       "--no-roofline"])
    check_trace(trace2)


def case_roofline():
    out = tmp("roof.json")
    p = run(["bench", "roofline", "--output-json", out] + ROOF_SMALL)
    js = load_json(out)
    for k in ("read_gbs", "triad_gbs", "gemm_gflops"):
        check(js[k] > 0 and math.isfinite(js[k]), f"{k} = {js[k]}")
    check(js["array_bytes"] == 4 << 20 and js["gemm_n"] == 64, "sizes not as asked")
    m = re.search(r"^Memory read bandwidth: ([\d.]+) GB/s \(sum over 3 x 4 MiB, (\S+) loads",
                  p.stdout, re.M)
    check(m and close(float(m.group(1)), js["read_gbs"], abs_=0.006), "printed vs JSON")
    want = expected_membw_isa()
    check(m and m.group(2) == js["memory_isa"] and (want is None or want == js["memory_isa"]),
          f"probe loads: printed {m and m.group(2)}, JSON {js['memory_isa']}, CPU has {want}")
    check(re.search(r"^GEMM peak .*: [\d.]+ GFLOP/s$", p.stdout, re.M), "GEMM line missing")


def case_sweep():
    prefix = tmp("sweep")
    p = run(["bench", "sweep"] + TINY + [
        "--max-batch-size-limit", "4", "--num-prompts", "3", "--input-len", "8",
        "--output-len", "4", "--input-lens", "4,8", "--output-lens", "2", "--no-progress",
        "--plot", prefix, "--gnuplot-script", tmp("no-such-script.gp"),
        "--output-json", tmp("sweep.json")])
    rows = [l.split(",") for l in p.stdout.strip().splitlines()]
    header = rows[0]
    check(header[:4] == ["sweep", "max_batch_size", "input_len", "output_len"],
          f"CSV header: {header}")
    data = [dict(zip(header, r)) for r in rows[1:]]
    check(all(len(r) == len(header) for r in rows), "ragged CSV")
    got = [(d["sweep"], int(d["max_batch_size"]), int(d["input_len"]), int(d["output_len"]),
            int(d["num_prompts"])) for d in data]
    want = [("batch", 1, 8, 4, 3), ("batch", 2, 8, 4, 4), ("batch", 4, 8, 4, 8),
            ("input_len", 32, 4, 4, 64), ("input_len", 32, 8, 4, 64),
            ("output_len", 32, 8, 2, 64)]
    check(got == want, f"sweep points {got}\n  expected {want}")
    for d in data:
        check(float(d["total_tokens_per_s"]) > float(d["output_tokens_per_s"]) > 0,
              f"throughputs in row {d}")
        check(float(d["mean_batch_seqs"]) <= int(d["max_batch_size"]) + 1e-9,
              f"mean batch above the limit in row {d}")
    with open(prefix + ".csv", encoding="utf-8") as f:
        check(f.read().strip().splitlines() == p.stdout.strip().splitlines(),
              "PREFIX.csv differs from the CSV on stdout")
    check("no PNG" in p.stderr, f"missing gnuplot notice: {p.stderr}")
    root = ET.parse(prefix + ".svg").getroot()  # well-formed XML or this raises
    check(root.tag.endswith("svg"), "not an SVG document")
    polylines = [e for e in root.iter() if e.tag.endswith("polyline")]
    check(len(polylines) >= 2, "the SVG has no data lines")
    js = load_json(tmp("sweep.json"))
    check(len(js["points"]) == len(want), "JSON points != CSV rows")
    # With gnuplot installed, the project's script draws PNG and SVG.
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                          "plot_sweep.gp")
    if shutil.which("gnuplot"):
        gp = tmp("gp")
        p = run(["bench", "sweep"] + TINY + [
            "--max-batch-size-limit", "2", "--num-prompts", "2", "--input-len", "4",
            "--output-len", "2", "--input-lens", "4", "--output-lens", "2", "--no-progress",
            "--plot", gp, "--gnuplot-script", script])
        check("gnuplot wrote" in p.stderr, f"gnuplot did not run: {p.stderr}")
        with open(gp + ".png", "rb") as f:
            check(f.read(8) == b"\x89PNG\r\n\x1a\n", "gnuplot's PNG is not a PNG")
        check(ET.parse(gp + ".svg").getroot().tag.endswith("svg"), "gnuplot's SVG is not SVG")
        # Without --gnuplot-script, from another directory: the script is found from the
        # executable (BUILD/tools/pagellm -> BUILD/../scripts) or in the source tree the binary
        # was built from (this file's), or a note says what was tried.
        beside = os.path.join(os.path.dirname(PAGELLM), "..", "..", "scripts", "plot_sweep.gp")
        source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                              "plot_sweep.gp")
        gp = tmp("gp_cwd")
        p = subprocess.run([PAGELLM, "bench", "sweep"] + TINY + [
            "--max-batch-size-limit", "2", "--num-prompts", "2", "--input-len", "4",
            "--output-len", "2", "--input-lens", "4", "--output-lens", "2", "--no-progress",
            "--plot", gp],
            capture_output=True, text=True, timeout=120, cwd=TMP)
        check(p.returncode == 0, f"sweep from {TMP}: exit {p.returncode}\n{p.stderr}")
        if os.path.exists(beside) or os.path.exists(source):
            check("gnuplot wrote" in p.stderr, f"script beside the executable or in the source "
                  f"tree unused: {p.stderr}")
        else:
            check("no gnuplot script (tried ./scripts/plot_sweep.gp, " in p.stderr,
                  f"no clear note when no script is found: {p.stderr}")


SOAK_RES = {
    "head": r"^soak: (\d+) requests on (\S+) \((token|text) prompts\), (\d+) KV blocks of (\d+) "
            r"tokens, max_model_len (\d+)$",
    "served": r"^served: (\d+) accepted \((\d+) refused as QUEUE_FULL and retried, (\d+) "
              r"refused\), (\d+) samples in (\d+) steps$",
    "time": r"^time: ([\d.]+) s: ([\d.]+) requests/s, (\d+) tokens/s \(prompt (\d+) computed "
            r"of (\d+), output (\d+)\)$",
    "preempt": r"^preemptions: (\d+) \(([\d.]+) per request\), KV usage peak (\d+)%, prefix "
               r"cache hit rate (\d+)%$",
    "finish": r"^finish: stop (\d+), length (\d+), abort (\d+), other (\d+)$",
    "memory": r"^memory: peak RSS ([\d.]+) MiB; RSS idle after (\d+) requests ([\d.]+) MiB, "
              r"after (\d+) ([\d.]+) MiB \(([+-]\d+) KiB\)$",
}


def soak_lines(stdout):
    """The soak's result lines, each as its regex groups (ints where they are counts)."""
    got = {}
    for key, pat in SOAK_RES.items():
        m = re.search(pat, stdout, re.M)
        check(m, f"soak: no {key!r} line matching {pat!r} in:\n{stdout}")
        got[key] = [int(g) if re.fullmatch(r"[+-]?\d+", g) else g for g in m.groups()]
    check(re.search(r"^checks: all passed$", stdout, re.M), f"soak checks failed:\n{stdout}")
    return got


def case_soak():
    out, trace = tmp("soak.json"), tmp("soak_trace.json")
    n = 40
    p = run(["bench", "soak", "--requests", str(n), "--seed", "5", "--output-json", out])
    js = load_json(out)
    L = soak_lines(p.stdout)
    check(L["head"][0] == n == js["num_requests"], f"num_requests: {L['head'][0]}, {js}")
    accepted, refused_full, refused, samples, steps = L["served"]
    check((js["accepted"], js["refused_queue_full"], js["refused"], js["samples_reported"],
           js["steps"]) == (accepted, refused_full, refused, samples, steps),
          f"served line {L['served']} differs from the JSON")
    check(accepted + refused == n, f"{accepted} accepted + {refused} refused != {n}")
    check(js["finished"] == accepted and js["samples_expected"] == samples,
          "not every accepted request/sample was reported")
    stop, length, abort, other = L["finish"]
    fin = js["finish"]
    check((fin["stop"], fin["length"], fin["abort"], fin["other"]) == (stop, length, abort, other),
          f"finish line {L['finish']} differs from the JSON {fin}")
    check(stop + length + abort + other == samples, "finish reasons do not add up to samples")
    _, req_s, tok_s, computed, prompt, output = L["time"]
    check((js["prompt_tokens_computed"], js["prompt_tokens"], js["output_tokens"]) ==
          (computed, prompt, output), f"time line token counts {L['time']} differ from JSON")
    el = js["elapsed_time"]
    check(el > 0 and close(js["requests_per_second"], accepted / el, rel=1e-9, abs_=1e-9),
          "requests_per_second != finished / elapsed_time")
    check(close(float(req_s), js["requests_per_second"], rel=1e-3, abs_=0.06),
          f"printed {req_s} requests/s vs JSON {js['requests_per_second']}")
    check(abs(tok_s - js["tokens_per_second"]) <= 0.5 + 1e-6 * tok_s, "tokens/s differ")
    check(js["preemptions"] == L["preempt"][0], "preemptions differ")
    check(L["preempt"][2] == round(100 * js["kv_usage_peak"]), "KV usage peak differs")
    mem = js["memory"]
    check(L["memory"][1] == mem["mark_after_requests"] and L["memory"][3] == n and
          L["memory"][5] == mem["growth_kib"] == mem["idle_rss_end_kib"] - mem["idle_rss_mark_kib"],
          f"memory line {L['memory']} differs from JSON {mem}")
    check(js["checks_passed"] is True and js["workload"]["seed"] == 5, "checks/workload in JSON")
    check(js["config"]["model"] == "dummy:tiny" and js["config"]["block_size"] == 4,
          "soak defaults not recorded in config")
    # --profile: the shared plumbing (trace, table, JSON)
    p = run(["bench", "soak", "--requests", "12", "--seed", "5", "--profile", trace,
             "--no-roofline", "--output-json", out])
    check_trace(trace)
    js = load_json(out)
    check(js["profile"]["steps"] > 0, "profile missing from the soak JSON")
    check("Profile:" in p.stdout and "op (forward)" in p.stdout, "soak profile table missing")
    soak_lines(p.stdout)


def run_pty(args, stdin=subprocess.DEVNULL):
    """Runs pagellm with stderr on a pseudo-terminal and stdout a pipe; returns (exit status,
    stdout, what the terminal received)."""
    import pty
    import select
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([PAGELLM] + args, stdin=stdin, stdout=subprocess.PIPE,
                                stderr=slave)
    finally:
        os.close(slave)
    out_fd = proc.stdout.fileno()
    chunks = {master: [], out_fd: []}
    open_fds = set(chunks)
    while open_fds:
        ready, _, _ = select.select(list(open_fds), [], [], 120)
        check(ready, "pagellm under a pty produced nothing for 120 s")
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the pty's other side is closed
                data = b""
            if data:
                chunks[fd].append(data)
            else:
                open_fds.discard(fd)
    rc = proc.wait(timeout=60)
    os.close(master)
    proc.stdout.close()
    err = b"".join(chunks[master]).decode("utf-8", "replace")
    stdout = b"".join(chunks[out_fd]).decode("utf-8", "replace")
    check(rc == 0, f"pagellm {' '.join(args)}: exit {rc} under a pty\nstdout:\n{stdout}\n"
                   f"stderr:\n{err}")
    check("Sanitizer" not in err and "runtime error:" not in err, f"sanitizer report:\n{err}")
    return rc, stdout, err


# The bar as bench/progress.c draws it:
#   LABEL [###...] DONE/TOTAL UNIT  NOTE  RATE/s  ETA m:ss
BAR = re.compile(r"^(?:(?P<label>.+?) )?\[(?P<bar>[#.]{30})\] (?P<done>\d+)/(?P<total>\d+) "
                 r"(?P<unit>output tokens|requests|ceilings)  (?:(?P<note>.+?)  )?"
                 r"(?:(?P<rate>\d+)/s  )?ETA (?P<eta>\d+:\d\d|--:--) $")


def bar_frames(err, unit):
    """Every frame on the terminal, checked to count what it says: the fill is done/total of
    30, the counts never go back, and the frame where done reaches total is drawn once."""
    pieces = [x for x in re.split(r"\r|\n|\x1b\[K", err) if x]
    frames = [m for m in (BAR.match(x) for x in pieces) if m]
    check(frames, f"no progress bar on the terminal:\n{err!r}")
    for f in frames:
        done, total = int(f["done"]), int(f["total"])
        check(f["unit"] == unit, f"bar counts {f['unit']!r}, expected {unit!r}")
        check(done <= total, f"done > total: {f.group(0)!r}")
        check(f["bar"].count("#") == done * 30 // total,
              f"the bar's fill is not {done}/{total} of its width: {f.group(0)!r}")
    done = [int(f["done"]) for f in frames]
    check(done == sorted(done), f"the bar goes backwards: {done}")
    complete = [f for f in frames if f["done"] == f["total"]]
    check(len(complete) == 1, f"the complete frame is drawn {len(complete)} times:\n{err!r}")
    check(frames[-1] is complete[0] and frames[-1]["eta"] == "0:00",
          f"the last frame is not the complete one: {frames[-1].group(0)!r}")
    check(len(re.findall(r"\r(?:[^\r\n\[]* )?\[[#.]{30}\]", err)) == len(frames),
          "the bar is not redrawn in place with \\r")
    return frames


def check_no_bar_without_tty(args):
    p = run(args)
    check("\r" not in p.stderr and "[#" not in p.stderr and "[." not in p.stderr,
          f"bar drawn without a terminal:\n{p.stderr}")
    return p


def case_progress_tty():
    """bench throughput's bar on a terminal: it counts output tokens and says so, the
    requests finished are its note, and stdout is the same as without a terminal.

    dummy:stories15m on one thread, so that the run lasts several of the bar's 0.1 s redraw
    intervals on any machine (about a second here; dummy:tiny would finish before the first
    redraw)."""
    n, in_len, out_len = 6, 16, 64
    args = ["bench", "throughput", "--model", "dummy:stories15m", "--threads", "1",
            "--num-prompts", str(n), "--input-len", str(in_len), "--output-len", str(out_len),
            "--seed", "4"]
    out = tmp("tty.json")
    _, stdout, err = run_pty(args + ["--output-json", out])
    frames = bar_frames(err, "output tokens")
    check(all(int(f["total"]) == n * out_len for f in frames),
          "bar total != --num-prompts x --output-len (EOS is ignored)")
    notes = [re.fullmatch(r"(\d+)/(\d+) requests", f["note"] or "") for f in frames]
    check(all(m and int(m.group(2)) == n for m in notes), "note is not DONE/N requests")
    check(int(notes[-1].group(1)) == n, "the final frame does not count every request")
    check(int(frames[-1]["rate"]) > 0, "final frame shows 0 tokens/s")
    check(len(frames) >= 2, f"the bar was drawn only once (no update while running):\n{err!r}")
    # stdout is untouched by the bar: same lines as a run without a terminal
    check("\r" not in stdout and "[#" not in stdout, f"bar leaked onto stdout:\n{stdout}")
    js = load_json(out)
    n_prompt, n_out = check_throughput_consistent(stdout, js)
    check((n_prompt, n_out) == (n * in_len, n * out_len), f"counts {n_prompt}/{n_out} under a pty")
    p = check_no_bar_without_tty(args)

    def shape(text):
        return [re.sub(r"\d+(\.\d+)?", "N", l) for l in text.splitlines()]
    check(shape(stdout) == shape(p.stdout),
          f"stdout differs under a pty:\n{stdout}\nvs without:\n{p.stdout}")
    check(throughput_lines(stdout)[1:] == throughput_lines(p.stdout)[1:],
          "token count lines differ between the pty and pipe runs")


def case_progress_latency():
    """bench latency shows one bar over every iteration, warm-up included, counting their
    output tokens (batch x output length each: EOS is ignored)."""
    batch, out_len, warm, iters = 2, 48, 1, 3
    args = ["bench", "latency", "--model", "dummy:stories15m", "--threads", "1",
            "--batch-size", str(batch), "--input-len", "8", "--output-len", str(out_len),
            "--num-iters-warmup", str(warm), "--num-iters", str(iters)]
    _, stdout, err = run_pty(args)
    frames = bar_frames(err, "output tokens")
    want = (warm + iters) * batch * out_len
    check(all(int(f["total"]) == want for f in frames), f"bar total != {want}")
    labels = [f["label"] for f in frames]
    check(labels[0] == "warm-up 1/1" and labels[-1] == f"iteration {iters}/{iters}",
          f"labels {labels[0]!r} .. {labels[-1]!r}")
    check(re.search(r"^Avg latency: ", stdout, re.M), "no result after the bar")
    check_no_bar_without_tty(args)


def case_progress_generate():
    """generate with a prompts file: a bar of output tokens on the terminal, records on stdout
    intact; the total starts at max_tokens x n and loses what early stops leave unused."""
    path = tmp("bar.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i in range(4):
            f.write(json.dumps({"prompt_token_ids": [1, 3 + i], "max_tokens": 64,
                                "ignore_eos": True}) + "\n")
    args = ["generate", "--model", "dummy:stories15m", "--threads", "1", "--json",
            "--prompts", path]
    _, stdout, err = run_pty(args)
    frames = bar_frames(err, "output tokens")
    check(int(frames[-1]["done"]) == 256 and frames[-1]["note"] == "4/4 samples",
          f"final frame {frames[-1].group(0)!r}")
    recs = [json.loads(l) for l in stdout.splitlines()]
    check(sorted(r["index"] for r in recs) == [0, 1, 2, 3], "records missing under a pty")
    check_no_bar_without_tty(args)


def case_progress_roofline():
    """bench roofline: a bar over its three ceilings."""
    args = ["bench", "roofline"] + ROOF_SMALL
    _, stdout, err = run_pty(args)
    frames = bar_frames(err, "ceilings")
    check(frames[-1]["label"] == "roofline" and frames[-1]["total"] == "3",
          f"final frame {frames[-1].group(0)!r}")
    check("GEMM peak" in stdout, "no result after the bar")
    check_no_bar_without_tty(args)


def case_progress_soak():
    """bench soak: a bar of requests settled (reported, or refused for good)."""
    args = ["bench", "soak", "--requests", "300", "--seed", "2"]
    _, stdout, err = run_pty(args)
    frames = bar_frames(err, "requests")
    check(frames[-1]["total"] == "300", f"final frame {frames[-1].group(0)!r}")
    check(re.search(r"^checks: all passed$", stdout, re.M), "soak failed under a pty")
    check_no_bar_without_tty(args)


def case_progress_profile():
    """profile: one bar over every run (warm-up + 3 modes x --reps), in output tokens."""
    args = ["profile"] + TINY + ["--num-prompts", "3", "--input-len", "8", "--output-len", "4",
                                 "--reps", "2", "--no-roofline", "--trace", tmp("pp.json")]
    _, stdout, err = run_pty(args)
    frames = bar_frames(err, "output tokens")
    check(int(frames[-1]["total"]) == (1 + 3 * 2) * 3 * 4, f"final frame {frames[-1].group(0)!r}")
    check(frames[-1]["label"].startswith("run 7/7 "), f"label {frames[-1]['label']!r}")
    check("Profiling overhead" in stdout, "no result after the bar")
    check_no_bar_without_tty(args)


def case_version():
    a = run(["--version"]).stdout
    b = run(["version"]).stdout
    # the second line: the distributed backends built in (docs/distributed.md)
    check(re.fullmatch(r"pagellm \d+\.\d+\.\d+\ntensor parallelism: threads"
                       r"(, mpi \([^)]+\))?(, nccl \([^)]+\))?\n", a) and a == b,
          f"--version {a!r} and version {b!r} differ or are not 'pagellm X.Y.Z' and the "
          f"backends")
    top = run(["--help"]).stdout
    subs = re.findall(r"^  (\w+)  ", run(["bench", "--help"]).stdout, re.M)
    check(len(subs) >= 5, f"bench --help lists {subs}")
    bench_line = re.search(r"^  bench +(.*)$", top, re.M)
    check(bench_line, f"pagellm --help has no bench line:\n{top}")
    for sub in subs:
        check(re.search(rf"\b{sub}\b", bench_line.group(1)),
              f"pagellm --help does not list bench {sub}: {bench_line.group(0)!r}")
    cmds = re.findall(r"^  (\w+)  ", top, re.M)
    for cmd in ("generate", "bench", "profile", "quantize", "version", "help"):
        check(cmd in cmds, f"pagellm --help does not list {cmd}")


BAD_FLAGS = [
    (["bench", "throughput", "--num-prompts", "abc"], "--num-prompts"),
    (["bench", "throughput", "--num-prompts", "0"], "--num-prompts"),
    (["bench", "throughput", "--num-prompts"], "--num-prompts"),
    (["bench", "throughput", "--bogus"], "--bogus"),
    (["bench", "throughput", "--random-range-ratio", "1.5"], "--random-range-ratio"),
    (["bench", "throughput"] + TINY + ["--input-len", "400", "--output-len", "200"],
     "--input-len"),
    (["bench", "throughput", "--max-batch-size", "-1"], "--max-batch-size"),
    (["bench", "throughput", "--profile"], "--profile"),
    (["bench", "throughput"] + TINY + ["--dataset", "/nonexistent/prompts.jsonl"], "--dataset"),
    (["bench", "latency", "--batch-size", "-1"], "--batch-size"),
    (["bench", "latency", "--num-iters"], "--num-iters"),
    (["bench", "latency", "--num-iters", "0"], "--num-iters"),
    (["bench", "sweep", "--input-lens", "8,x"], "--input-lens"),
    (["bench", "sweep", "--sweep", "sideways"], "--sweep"),
    (["bench", "sweep", "--max-batch-size-limit", "0"], "--max-batch-size-limit"),
    (["bench", "roofline", "--gemm-n", "1"], "--gemm-n"),
    (["bench", "roofline", "--array-mib", "lots"], "--array-mib"),
    (["profile", "--reps", "0"], "--reps"),
    (["profile", "--frobnicate"], "--frobnicate"),
    (["bench", "soak", "--requests", "0"], "--requests"),
    (["bench", "soak", "--output-json"], "--output-json"),
    (["bench", "soak", "--profile"], "--profile"),
    (["bench", "nosuch"], "nosuch"),
    (["bench"], "usage"),
]


def case_bad_flags():
    for args, flag in BAD_FLAGS:
        p = run(args, expect_rc=2, timeout=60)
        check(flag in p.stderr, f"pagellm {' '.join(args)}: stderr does not name {flag}:\n"
                                f"{p.stderr}")
    # runtime failures are exit 1 with a message, never a crash
    p = run(["bench", "throughput"] + TINY + ["--num-prompts", "2", "--input-len", "4",
                                              "--output-len", "2", "--output-json",
                                              "/nonexistent/dir/out.json"], expect_rc=1)
    check("/nonexistent/dir/out.json" in p.stderr, f"unclear error: {p.stderr}")
    p = run(["bench", "throughput", "--model", "dummy:nosuch"], expect_rc=1)
    check("nosuch" in p.stderr, f"unclear error: {p.stderr}")
    for sub in (["bench", "throughput"], ["bench", "latency"], ["bench", "sweep"],
                ["bench", "roofline"], ["bench", "soak"], ["profile"], ["bench"]):
        p = run(sub + ["--help"])
        check("usage:" in p.stdout, f"{' '.join(sub)} --help has no usage")


def case_sharegpt():
    models = os.environ.get("PAGELLM_TEST_MODELS")
    if not models:
        print("PAGELLM_TEST_MODELS is not set: skipping the ShareGPT case")
        sys.exit(77)
    model = os.path.join(models, "stories260K.bin")
    tok = os.path.join(models, "tok512.model")
    if not (os.path.exists(model) and os.path.exists(tok)):
        print(f"{model} or {tok} missing: skipping")
        sys.exit(77)
    sg = tmp("sharegpt.json")
    conv = [
        {"conversations": [{"from": "human", "value": "Once upon a time there was a cat"},
                           {"from": "gpt", "value": "who liked to play in the sun all day"}]},
        {"conversations": [{"from": "human", "value": "hi"}]},  # one turn: skipped
        {"conversations": [{"from": "human", "value": "The little dog ran to the park"},
                           {"from": "gpt", "value": "and found a big red ball"}]},
    ]
    with open(sg, "w", encoding="utf-8") as f:
        json.dump(conv, f)
    out = tmp("sg.json")
    p = run(["bench", "throughput", "--model", model, "--tokenizer", tok, "--dataset", sg,
             "--output-json", out])
    js = load_json(out)
    check(js["num_requests"] == 2, f"expected the 2 two-turn conversations, got {js}")
    check_throughput_consistent(p.stdout, js)


def case_quantize():
    """quantize writes a GGUF that generate runs with the same tokens as its source; its
    refusals name the problem and exit 2 (usage) or 1 (a model or type it cannot write)."""
    out = tmp("tiny.gguf")
    p = run(["quantize", "dummy:tiny", out, "f32"])
    check(os.path.getsize(out) > 1000 and open(out, "rb").read(4) == b"GGUF",
          f"quantize wrote no GGUF file:\n{p.stderr}")
    gen = ["generate", "--prompt-ids", "1,5,9", "--temperature", "0", "--max-tokens", "12",
           "--json"]
    a = json.loads(run(gen + ["--model", "dummy:tiny"]).stdout)
    b = json.loads(run(gen + ["--model", out]).stdout)
    check(a["output_token_ids"] == b["output_token_ids"],
          f"dummy:tiny and its GGUF differ: {a['output_token_ids']} {b['output_token_ids']}")
    out16 = tmp("tiny16.gguf")
    run(["quantize", out, out16, "BF16"])
    check(os.path.getsize(out16) < os.path.getsize(out), "bf16 is not smaller than f32")
    e = run(["quantize", "dummy:tiny", tmp("x.gguf"), "q7_z"], expect_rc=1).stderr
    check("q7_z" in e and "f16" in e, f"an unknown type's message: {e}")
    e = run(["quantize", "dummy:tiny", tmp("x.gguf")], expect_rc=2).stderr
    check("IN, OUT and TYPE" in e, e)
    e = run(["quantize", "dummy:tiny", tmp("x.gguf"), "f16", "--frobnicate"], expect_rc=2).stderr
    check("--frobnicate" in e, e)
    e = run(["quantize", "dummy:tiny", tmp("x.gguf"), "f16", "--tokenizer", "t.json",
             "--no-tokenizer"], expect_rc=2).stderr
    check("contradict" in e, e)
    check(not os.path.exists(tmp("x.gguf")), "a refused quantize wrote a file")
    check("quantize" in run(["quantize", "--help"]).stdout, "quantize --help")


def case_quantize_stories():
    """stories260K.bin to GGUF: generate needs no --tokenizer and prints the .bin's story."""
    models = os.environ.get("PAGELLM_TEST_MODELS")
    if not models:
        print("PAGELLM_TEST_MODELS is not set: skipping")
        sys.exit(77)
    model = os.path.join(models, "stories260K.bin")
    out = tmp("stories.gguf")
    run(["quantize", model, out, "f16"])
    gen = ["generate", "--prompt", "Once upon a time", "--temperature", "0",
           "--max-tokens", "60", "--dtype", "f16"]
    a = run(gen + ["--model", model, "--tokenizer", os.path.join(models, "tok512.model")])
    b = run(gen + ["--model", out])
    check(a.stdout == b.stdout and "Once upon a time" in b.stdout,
          f"the .bin and its GGUF print different stories:\n{a.stdout}\n---\n{b.stdout}")


def write_random_hf(d, dim=256, hidden=512, n_layers=2, n_heads=4, n_kv=2, vocab=512):
    """A Llama Hugging Face directory with seeded random f32 weights whose rows are whole
    K-quant super-blocks (256), so q4_k_m stores real K-quants (no fallback)."""
    import array
    import random
    rng = random.Random(19)
    hd = dim // n_heads
    shapes = [("model.embed_tokens.weight", [vocab, dim])]
    for i in range(n_layers):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", [dim]),
                   (p + "self_attn.q_proj.weight", [n_heads * hd, dim]),
                   (p + "self_attn.k_proj.weight", [n_kv * hd, dim]),
                   (p + "self_attn.v_proj.weight", [n_kv * hd, dim]),
                   (p + "self_attn.o_proj.weight", [dim, n_heads * hd]),
                   (p + "post_attention_layernorm.weight", [dim]),
                   (p + "mlp.gate_proj.weight", [hidden, dim]),
                   (p + "mlp.up_proj.weight", [hidden, dim]),
                   (p + "mlp.down_proj.weight", [dim, hidden])]
    shapes += [("model.norm.weight", [dim]), ("lm_head.weight", [vocab, dim])]
    header, blobs, off = {}, [], 0
    for name, shape in shapes:
        n = math.prod(shape)
        if len(shape) == 1:
            a = array.array("f", (1.0 + rng.uniform(-0.2, 0.2) for _ in range(n)))
        else:
            bound = 1.0 if name.endswith("embed_tokens.weight") else 1.0 / math.sqrt(shape[1])
            a = array.array("f", (rng.uniform(-bound, bound) for _ in range(n)))
        b = a.tobytes()
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
           "intermediate_size": hidden, "num_hidden_layers": n_layers,
           "num_attention_heads": n_heads, "num_key_value_heads": n_kv, "vocab_size": vocab,
           "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
           "torch_dtype": "float32"}
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)


def weight_type(model, backend):
    """pl_model_info.weight_type of a model, through bench latency's JSON."""
    out = tmp("wt.json")
    run(["bench", "latency", "--model", model, "--backend", backend, "--batch-size", "1",
         "--input-len", "2", "--output-len", "2", "--num-iters-warmup", "0", "--num-iters", "1",
         "--no-progress", "--output-json", out], timeout=300)
    return load_json(out)["model"]["weight_type"]


def gguf_types(backend):
    """The issue's done-when: `generate --model FILE.gguf --prompt ...` with no tokenizer flag
    for F32/F16/Q8_0/Q4_0/Q4_K_M files that `quantize` made, on `backend`.
    - stories260K (rows of 64 and 172: Q8_0/Q4_0 keep ffn_down (172 wide) in f16, Q4_K_M falls
      back everywhere): the text starts with the prompt, the embedded tokenizer prints what
      tok512.model prints for the same ids, and the first 8 generated tokens are the f32
      .bin's (a broken type would part at once; the quantisation's rounding may part them
      later, where the model's choice is close);
    - a random Llama directory with 256-wide rows: Q4_K_M stores real Q4_K and Q6_K (the
      tensor types checked through pl_model_info.weight_type), and generates as above."""
    models = os.environ.get("PAGELLM_TEST_MODELS")
    if not models:
        print("PAGELLM_TEST_MODELS is not set: skipping")
        sys.exit(77)
    tok = os.path.join(models, "tok512.model")
    bin_ = os.path.join(models, "stories260K.bin")
    ids = ["generate", "--prompt", "Once upon a time", "--temperature", "0", "--max-tokens",
           "24", "--json"]
    ref = json.loads(run(ids + ["--model", bin_, "--tokenizer", tok]).stdout)
    ids += ["--backend", backend]
    # what each type's file holds: stories260K's 36 matrices (5 layers x 7 + the tied
    # embedding); which fall back follows from their widths (64, and ffn_down's 172)
    want_types = {"f32": ("f32", 0), "f16": ("f16", 0), "q8_0": ("q8_0+f16", 5),
                  "q4_0": ("q4_0+f16", 5), "q4_k_m": ("q4_0+f16+q8_0", 36)}
    for t, (wt, n_fallback) in want_types.items():
        out = tmp(f"s260k-{t}.gguf")
        p = run(["quantize", bin_, out, t])
        check(f"{n_fallback} of 47 tensors fell back" in p.stderr,
              f"{t}: expected {n_fallback} fallbacks:\n{p.stderr}")
        check(weight_type(out, backend) == wt, f"{t}: weight_type is not {wt}")
        a = run(["generate", "--model", out, "--prompt", "Once upon a time", "--temperature",
                 "0", "--max-tokens", "24", "--backend", backend])
        check(a.stdout.startswith("Once upon a time") and len(a.stdout) > 40,
              f"{t}: generate printed {a.stdout!r}")
        b = json.loads(run(ids + ["--model", out]).stdout)
        check(b["output_token_ids"][:8] == ref["output_token_ids"][:8],
              f"{t}: tokens {b['output_token_ids']} part from the .bin's "
              f"{ref['output_token_ids']} within 8")
        c = run(["generate", "--model", out, "--tokenizer", tok, "--prompt", "Once upon a time",
                 "--temperature", "0", "--max-tokens", "24", "--backend", backend])
        check(a.stdout == c.stdout, f"{t}: the embedded tokenizer prints\n{a.stdout}\n"
              f"and tok512.model\n{c.stdout}")
    hf = tmp("hf256")
    write_random_hf(hf)
    for t, wt in (("q4_k_m", "q4_k+q6_k"), ("q5_k_m", "q5_k+q6_k"), ("q4_0", "q4_0"),
                  ("q8_0", "q8_0")):
        out = tmp(f"hf-{t}.gguf")
        p = run(["quantize", hf, out, t, "--tokenizer", tok])
        check("0 of 21 tensors fell back" in p.stderr, f"{t}: fell back:\n{p.stderr}")
        check(weight_type(out, backend) == wt, f"{t}: weight_type is not {wt}")
        a = run(["generate", "--model", out, "--prompt", "Once upon a time", "--temperature",
                 "0", "--max-tokens", "16", "--ignore-eos", "--backend", backend])
        c = run(["generate", "--model", out, "--tokenizer", tok, "--prompt", "Once upon a time",
                 "--temperature", "0", "--max-tokens", "16", "--ignore-eos", "--backend",
                 backend])
        check(a.stdout.startswith("Once upon a time") and a.stdout == c.stdout,
              f"{t}: without and with --tokenizer:\n{a.stdout}\n---\n{c.stdout}")
        j = json.loads(run(ids + ["--model", out, "--ignore-eos"]).stdout)
        check(len(j["output_token_ids"]) == 24, f"{t}: {j}")


def case_gguf_types():
    gguf_types("cpu")


def case_gguf_types_cuda():
    """As gguf_types on the CUDA backend (this binary must have it: tests/tools/meson.build
    links `pagellm` with the emulated backend for this case)."""
    gguf_types("cuda")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main():
    global PAGELLM, TMP
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(f"usage: {sys.argv[0]} PAGELLM CASE  (CASE: {', '.join(sorted(CASES))})")
        return 2
    PAGELLM = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="pagellm-tools-") as d:
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
