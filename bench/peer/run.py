#!/usr/bin/env python3
"""bench/peer/run.py - pagellm beside llama.cpp on the same GGUF files, same threads,
alternating, and the ratios (pagellm / llama.cpp; above 1 = pagellm faster).

usage: bench/peer/run.py [--shapes stories110m,tinyllama-1.1b] [--types f16,q8_0,q4_0,q4_k_m]
                         [--files pl,ll] [--reps 3] [--threads 2] [--batched 16,64]
                         [--batched-shapes S,..] [--batched-files pl,ll] [--json OUT.json]

Files come from bench/peer/make_models.sh ($PEER_MODELS/SHAPE/{pl,ll}-TYPE.gguf: made by
`pagellm quantize` or by llama-quantize; f16 only pl); the peer from
bench/peer/build_llama_cpp.sh ($PAGELLM_PEER_DIR/build/bin). Per shape, type and file, each
repetition is one alternating pair under `flock /tmp/pagellm-bench.lock` (the shared-machine
rule), the order swapped every repetition; the table gives medians:

  decode    batch-1 tokens/s: llama-bench -n N (from an empty context) against
            `pagellm bench latency --batch-size 1 --input-len 1 --output-len N` (1000 / the
            median TPOT)
  prefill   tokens/s of one P-token prompt: llama-bench -p P against `bench latency
            --input-len P --output-len 1` (P / the median TTFT)
  batched   total tokens/s of B sequences of BP prompt + BG output tokens: llama-batched-bench
            (-npp BP -ntg BG -npl B), best of flash attention off and on, against `pagellm bench
            throughput --num-prompts B --input-len BP --output-len BG --max-batch-size B`
  GB/s      pagellm's matmul weight bytes per decode step x decode tokens/s, and that as a
            share of the read bandwidth `bench latency --bandwidth` measured around its runs
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOCK = "/tmp/pagellm-bench.lock"
# token counts per shape: (decode N, prefill P, batched prompt BP, batched output BG); the
# TinyLlama shape is ~10x the work per token on 2 cores, so its counts are smaller
COUNTS = {"stories110m": (128, 128, 64, 64), "tinyllama-1.1b": (32, 128, 32, 16),
          "mixtral-mini": (64, 128, 32, 32)}


def sh(cmd, timeout=1800):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}{p.stderr[-4000:]}")
    return p.stdout


def locked(cmds):
    """Runs the commands back to back under the bench lock (one alternating pair)."""
    script = " && ".join(" ".join(_q(a) for a in c) for c in cmds)
    sh(["flock", LOCK, "sh", "-c", script])


def _q(a):
    return "'" + a.replace("'", "'\\''") + "'"


class Peer:
    def __init__(self, d):
        self.bench = os.path.join(d, "build", "bin", "llama-bench")
        self.batched = os.path.join(d, "build", "bin", "llama-batched-bench")
        for b in (self.bench, self.batched):
            if not os.access(b, os.X_OK):
                sys.exit(f"{b} is missing: run bench/peer/build_llama_cpp.sh (PAGELLM_PEER_DIR)")
        # newer llama.cpp takes -fa on|off|auto (a bare -fa is an error there), older a bare flag
        h = subprocess.run([self.batched, "--help"], capture_output=True, text=True)
        self.fa_on = ["-fa", "on"] if "[on|off|auto]" in h.stdout + h.stderr else ["-fa"]


def one_rep(a, peer, pagellm, model, shape, tmp, first_llama):
    """One alternating pair for decode + prefill; returns the four figures."""
    n, p, _, _ = COUNTS[shape]
    t = str(a.threads)
    ll_out = os.path.join(tmp, "ll.json")
    dec_out, pre_out = os.path.join(tmp, "dec.json"), os.path.join(tmp, "pre.json")
    llama = [peer.bench, "-m", model, "-t", t, "-p", str(p), "-n", str(n), "-r", "3",
             "-o", "json"]
    common = ["--model", model, "-t", t, "--batch-size", "1", "--no-progress"]
    dec = [pagellm, "bench", "latency"] + common + [
        "--input-len", "1", "--output-len", str(n), "--num-iters-warmup", "1", "--num-iters",
        "3", "--bandwidth", "--array-mib", "128", "--output-json", dec_out]
    pre = [pagellm, "bench", "latency"] + common + [
        "--input-len", str(p), "--output-len", "1", "--num-iters-warmup", "1", "--num-iters",
        "3", "--output-json", pre_out]
    ll_cmd = ["sh", "-c", " ".join(_q(x) for x in llama) + " > " + _q(ll_out)]
    cmds = [ll_cmd, dec, pre] if first_llama else [dec, pre, ll_cmd]
    locked(cmds)
    with open(ll_out, encoding="utf-8") as f:
        rows = json.load(f)
    ll_pp = next(r["avg_ts"] for r in rows if r["n_prompt"] == p and r["n_gen"] == 0)
    ll_tg = next(r["avg_ts"] for r in rows if r["n_gen"] == n and r["n_prompt"] == 0)
    with open(dec_out, encoding="utf-8") as f:
        d = json.load(f)
    with open(pre_out, encoding="utf-8") as f:
        q = json.load(f)
    pl_tg = 1000.0 / d["tpot_ms"]["median"]
    pl_pp = p / (q["ttft_ms"]["median"] / 1000.0)
    bw = statistics.median(d["bandwidth"]["read_gbs"])
    return {"ll_decode": ll_tg, "pl_decode": pl_tg, "ll_prefill": ll_pp, "pl_prefill": pl_pp,
            "weight_bytes": d["model"]["weight_bytes"], "weight_type": d["model"]["weight_type"],
            "read_gbs": bw}


def batched_rep(a, peer, pagellm, model, shape, npl, tmp, first_llama):
    _, _, bp, bg = COUNTS[shape]
    t = str(a.threads)
    ctx = str(npl * (bp + bg) + 256)
    outs = [os.path.join(tmp, f"bb{fa}.jsonl") for fa in (0, 1)]
    lls = []
    for fa, out in zip((0, 1), outs):
        c = [peer.batched, "-m", model, "-c", ctx, "-b", "2048", "-ub", "512", "-npp", str(bp),
             "-ntg", str(bg), "-npl", str(npl), "-t", t, "-tb", t, "--output-format", "jsonl"]
        if fa:
            c += peer.fa_on
        lls.append(["sh", "-c", " ".join(_q(x) for x in c) + " > " + _q(out) + " 2>/dev/null"])
    pl_out = os.path.join(tmp, "thr.json")
    pl = [pagellm, "bench", "throughput", "--model", model, "-t", t, "--num-prompts", str(npl),
          "--input-len", str(bp), "--output-len", str(bg), "--max-batch-size", str(npl),
          "--no-progress", "--output-json", pl_out]
    locked(lls + [pl] if first_llama else [pl] + lls)
    best = 0.0
    for out in outs:
        with open(out, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    r = json.loads(line)
                    if r.get("pl") == npl:
                        best = max(best, r["speed"])
    with open(pl_out, encoding="utf-8") as f:
        pl_tps = json.load(f)["tokens_per_second"]
    return best, pl_tps


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="stories110m,tinyllama-1.1b")
    ap.add_argument("--types", default="f16,q8_0,q4_0,q4_k_m")
    ap.add_argument("--files", default="pl,ll", help="whose files: pl (pagellm quantize), "
                    "ll (llama-quantize)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batched", default="16,64", help="sequence counts ('' = none)")
    ap.add_argument("--batched-shapes", default="stories110m,tinyllama-1.1b")
    ap.add_argument("--batched-files", default="pl", help="whose files run batched")
    ap.add_argument("--json", help="write every repetition's figures here")
    a = ap.parse_args()
    peer = Peer(os.environ.get("PAGELLM_PEER_DIR",
                               os.path.join(REPO, "..", "pagellm-peer", "llama.cpp")))
    pagellm = os.environ.get("PAGELLM", os.path.join(REPO, "build", "tools", "pagellm"))
    models = os.environ.get("PEER_MODELS", "/tmp/pagellm-peer-models")
    results = []
    with tempfile.TemporaryDirectory(prefix="pagellm-peer-") as tmp:
        for shape in a.shapes.split(","):
            n, p, bp, bg = COUNTS[shape]
            print(f"\n## {shape}: decode {n} tokens, prefill {p}, batched {bp}+{bg} per "
                  f"sequence, {a.threads} threads, median of {a.reps} alternating pairs")
            print("| file | weights | decode ll / pl (x) | prefill ll / pl (x) | "
                  "pl GB/s (of read bw) | " +
                  " | ".join(f"{b} seqs ll / pl (x)" for b in a.batched.split(",") if b) + " |")
            for t in a.types.split(","):
                for who in a.files.split(","):
                    model = os.path.join(models, shape, f"{who}-{t}.gguf")
                    if not os.path.exists(model):
                        continue
                    reps = [one_rep(a, peer, pagellm, model, shape, tmp, r % 2 == 0)
                            for r in range(a.reps)]
                    row = {k: med([r[k] for r in reps])
                           for k in ("ll_decode", "pl_decode", "ll_prefill", "pl_prefill",
                                     "read_gbs")}
                    row.update(shape=shape, type=t, file=who, reps=reps,
                               weight_type=reps[0]["weight_type"],
                               weight_bytes=reps[0]["weight_bytes"])
                    gbs = row["weight_bytes"] * row["pl_decode"] / 1e9
                    cells = []
                    if (shape in a.batched_shapes.split(",") and
                            who in a.batched_files.split(",")):
                        for b in (int(x) for x in a.batched.split(",") if x):
                            br = [batched_rep(a, peer, pagellm, model, shape, b, tmp, r % 2 == 1)
                                  for r in range(a.reps)]
                            ll, pl = med([x[0] for x in br]), med([x[1] for x in br])
                            row[f"batched_{b}"] = {"ll": ll, "pl": pl, "reps": br}
                            cells.append(f"{ll:.0f} / {pl:.0f} ({pl / ll:.2f}x)")
                    results.append(row)
                    print(f"| {who}-{t} | {row['weight_type']} | "
                          f"{row['ll_decode']:.1f} / {row['pl_decode']:.1f} "
                          f"({row['pl_decode'] / row['ll_decode']:.2f}x) | "
                          f"{row['ll_prefill']:.0f} / {row['pl_prefill']:.0f} "
                          f"({row['pl_prefill'] / row['ll_prefill']:.2f}x) | "
                          f"{gbs:.1f} ({gbs / row['read_gbs'] * 100:.0f}% of "
                          f"{row['read_gbs']:.1f}) | " + " | ".join(cells) + " |", flush=True)
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
