#!/usr/bin/env python3
"""Splits a `pagellm profile --trace` Chrome trace into decode and prefill steps.

usage: scripts/trace_split.py TRACE.json PEAK_GFLOPS LAYER_PARAMS HEAD_PARAMS

A step is one engine step: from its `drain` phase event to the end of its `output` event; the
`batch` counter inside it gives its sequences and tokens. A decode step computes one token per
sequence (tokens == sequences); any other step holds prefill work. FLOPs of a step:
2 x (LAYER_PARAMS x tokens + HEAD_PARAMS x sequences), the logits being computed for one row
per sequence (an upper bound for prefill chunks that do not sample). For each kind the table
gives ms per step, the matrix products' and the whole step's GFLOP/s and percentage of
PEAK_GFLOPS, and where the rest of the step went.
"""
import json
import sys

NORMS = {"norm", "rope", "activation", "embedding", "kv_store", "copy"}
ENGINE = {"drain", "schedule", "build_batch", "detokenize", "output"}


def load_events(path):
    with open(path) as f:
        d = json.load(f)
    return d["traceEvents"] if isinstance(d, dict) else d


def split_steps(events):
    spans = sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e["ts"])
    counters = sorted((e for e in events if e.get("ph") == "C" and e["name"] == "batch"),
                      key=lambda e: e["ts"])
    starts = [e["ts"] for e in spans if e["name"] == "drain"]
    steps = []
    for i, t0 in enumerate(starts):
        t1 = starts[i + 1] if i + 1 < len(starts) else float("inf")
        inside = [e for e in spans if t0 <= e["ts"] < t1]
        batch = [c["args"] for c in counters if t0 <= c["ts"] < t1]
        if not batch:
            continue  # a step that ran nothing
        end = max(e["ts"] + e["dur"] for e in inside)
        steps.append({"ms": (end - t0) / 1e3, "seqs": batch[0]["sequences"],
                      "tokens": batch[0]["tokens"], "events": inside})
    return steps


def summarize(kind, steps, peak, layer_params, head_params):
    if not steps:
        return
    n = len(steps)
    ms = sum(s["ms"] for s in steps)
    flops = sum(2.0 * (layer_params * s["tokens"] + head_params * s["seqs"]) for s in steps)
    part = {}
    for s in steps:
        for e in s["events"]:
            name = e["name"]
            key = ("matmul" if name == "matmul" else "attention" if name == "attention"
                   else "norms+rope+act+kv" if name in NORMS
                   else "sample" if name == "sample"
                   else "engine" if name in ENGINE else None)
            if key:
                part[key] = part.get(key, 0.0) + e["dur"] / 1e3
    mm = part.get("matmul", 0.0)
    seqs = sum(s["seqs"] for s in steps) / n
    tokens = sum(s["tokens"] for s in steps) / n
    print(f"{kind}: {n} steps, {seqs:.1f} sequences and {tokens:.1f} tokens per step, "
          f"{ms / n:.2f} ms per step")
    if mm > 0:
        g = flops / (mm * 1e-3) / 1e9
        print(f"  matmul     {mm / n:8.2f} ms/step  {g:7.1f} GFLOP/s  "
              f"{100 * g / peak:5.1f}% of peak")
    g = flops / (ms * 1e-3) / 1e9
    print(f"  whole step {ms / n:8.2f} ms/step  {g:7.1f} GFLOP/s  {100 * g / peak:5.1f}% of peak")
    for key in ("attention", "norms+rope+act+kv", "sample", "engine"):
        v = part.get(key, 0.0)
        print(f"  {key:<18} {v / n:8.3f} ms/step  {100 * v / ms:5.1f}% of the step")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    events = load_events(sys.argv[1])
    peak, layer_params, head_params = (float(a) for a in sys.argv[2:5])
    steps = split_steps(events)
    decode = [s for s in steps if s["tokens"] == s["seqs"]]
    prefill = [s for s in steps if s["tokens"] != s["seqs"]]
    summarize("decode", decode, peak, layer_params, head_params)
    summarize("prefill", prefill, peak, layer_params, head_params)


if __name__ == "__main__":
    main()
