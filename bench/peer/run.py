#!/usr/bin/env python3
"""bench/peer/run.py - pagellm beside llama.cpp on the same GGUF files, same threads,
alternating, and the ratios (pagellm / llama.cpp; above 1 = pagellm faster).

usage: bench/peer/run.py [--shapes stories110m,tinyllama-1.1b] [--types f16,q8_0,q4_0,q4_k_m]
                         [--files pl,ll] [--reps 3] [--threads 2] [--batched 16,32,64]
                         [--batched-shapes S,..] [--batched-files pl,ll] [--json OUT.json]
                         [--kld stories260k] [--kld-types q8_0,q4_0,q4_k_m] [--kld-text FILE]
                         [--kld-ctx 128] [--no-speed]

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
            Both latency runs pass --no-prefix-caching: their prompts are random, so the cache
            never hits, and kept on it holds each iteration's blocks, so the next one writes
            KV pages the process never touched. llama-bench writes into the context it cleared
            at start; a first touch costs a VM whose host backs memory lazily (and takes back
            what the guest frees) 0.5 GB/s: 15% of a 512-token prefill on such a machine.
  batched   total tokens/s of B sequences of BP prompt + BG output tokens: llama-batched-bench
            (-npp BP -ntg BG -npl B), best of flash attention off and on, against `pagellm bench
            throughput --num-prompts B --input-len BP --output-len BG --max-batch-size B`
  GB/s      pagellm's matmul weight bytes per decode step x decode tokens/s, and that as a
            share of the read bandwidth `bench latency --bandwidth` measured around its runs
  accuracy  (--kld SHAPE) for each quantised file of SHAPE and the same text: llama-perplexity's
            mean KL divergence from the shape's F32 file and its "Same top p" (the F32 file's
            log-probabilities saved by llama-perplexity --kl-divergence-base, then read with
            --kl-divergence) beside `pagellm perplexity --kl-divergence-base F32-FILE`'s, same
            window size (--kld-ctx), printed side by side (pagellm / llama.cpp, and the
            difference in points)
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
COUNTS = {"stories110m": (128, 512, 128, 64), "tinyllama-1.1b": (32, 512, 128, 64),
          "mixtral-mini": (64, 128, 32, 32)}
# the stories110M-sized family files of bench/peer/family_shapes.py
COUNTS.update({f + "-110m": COUNTS["stories110m"] for f in ("llama", "gemma2", "phi3")})


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
        self.perplexity = os.path.join(d, "build", "bin", "llama-perplexity")
        self.commit = subprocess.run(["git", "-C", d, "rev-parse", "HEAD"], capture_output=True,
                                     text=True).stdout.strip() or "unknown"
        for b in (self.bench, self.batched, self.perplexity):
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
    common = ["--model", model, "-t", t, "--batch-size", "1", "--no-progress",
              "--no-prefix-caching"]
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


def kld_figures(text):
    """Mean KLD and Same top p (%) from llama-perplexity's / pagellm perplexity's output."""
    import re
    k = re.search(r"^Mean +KLD: +([0-9.e+-]+) ± +([0-9.e+-]+)", text, re.M)
    t = re.search(r"^Same top p: +([0-9.]+) ± +([0-9.]+) %", text, re.M)
    if not k or not t:
        sys.exit("no 'Mean    KLD' / 'Same top p' lines in:\n" + text[-3000:])
    return float(k.group(1)), float(k.group(2)), float(t.group(1)), float(t.group(2))


def accuracy(a, peer, pagellm, models, tmp):
    """llama-perplexity and pagellm perplexity on the same quantised files and text."""
    d = os.path.join(models, a.kld)
    base = os.path.join(d, "pl-f32.gguf")
    if not os.path.exists(base):
        sys.exit(f"{base} is missing: bench/peer/make_models.sh {a.kld}")
    t, ctx = str(a.threads), str(a.kld_ctx)
    kld_file = os.path.join(tmp, "base.kld")
    # runs of whitespace as one space: SentencePiece's normaliser collapses them (pagellm
    # tokenizes as SentencePiece does), llama.cpp's tokenizer keeps them, and the two would
    # score different token streams (GPL-3: 21599 tokens against 22144)
    with open(a.kld_text, encoding="utf-8") as f:
        flat = " ".join(f.read().split())
    text = os.path.join(tmp, "text.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(flat)
    locked([[peer.perplexity, "-m", base, "-f", text, "-c", ctx, "-t", t,
             "--kl-divergence-base", kld_file]])
    print(f"\n## accuracy: {a.kld} against its F32 file, text {a.kld_text} (whitespace runs as "
          f"one space), windows of {ctx} tokens, llama.cpp {peer.commit[:12]}")
    print("| file | mean KLD llama.cpp | mean KLD pagellm | pagellm / llama.cpp | "
          "Same top p llama.cpp | Same top p pagellm | difference (points) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    rows = []
    for ty in a.kld_types.split(","):
        for who in a.files.split(","):
            model = os.path.join(d, f"{who}-{ty}.gguf")
            if not os.path.exists(model):
                continue
            ll = subprocess.run(["flock", LOCK, peer.perplexity, "-m", model, "-f", text,
                                 "-c", ctx, "-t", t, "--kl-divergence-base", kld_file,
                                 "--kl-divergence"], capture_output=True, text=True)
            pl = subprocess.run(["flock", LOCK, pagellm, "perplexity", "--model", model,
                                 "--file", text, "--ctx-size", ctx, "-t", t,
                                 "--no-progress", "--kl-divergence-base", base],
                                capture_output=True, text=True)
            lk, lku, lt, ltu = kld_figures(ll.stdout + ll.stderr)
            pk, pku, pt, ptu = kld_figures(pl.stdout)
            rows.append({"file": f"{who}-{ty}", "ll_kld": lk, "pl_kld": pk, "ll_same_top": lt,
                         "pl_same_top": pt})
            print(f"| {who}-{ty} | {lk:.6f} ± {lku:.6f} | {pk:.6f} ± {pku:.6f} | {pk / lk:.3f} "
                  f"| {lt:.3f} ± {ltu:.3f} % | {pt:.3f} ± {ptu:.3f} % | {pt - lt:+.3f} |",
                  flush=True)
    return rows


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
    ap.add_argument("--batched", default="16,32,64", help="sequence counts ('' = none)")
    ap.add_argument("--batched-shapes", default="stories110m,tinyllama-1.1b")
    ap.add_argument("--batched-files", default="pl", help="whose files run batched")
    ap.add_argument("--json", help="write every repetition's figures here")
    ap.add_argument("--kld", help="a shape whose quantised files are compared for accuracy "
                    "(stories260k: make_models.sh stories260k)")
    ap.add_argument("--kld-types", default="q8_0,q4_0,q4_k_m")
    ap.add_argument("--kld-text", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--kld-ctx", type=int, default=128)
    ap.add_argument("--no-speed", action="store_true", help="only the accuracy comparison")
    a = ap.parse_args()
    peer = Peer(os.environ.get("PAGELLM_PEER_DIR",
                               os.path.join(REPO, "..", "pagellm-peer", "llama.cpp")))
    pagellm = os.environ.get("PAGELLM", os.path.join(REPO, "build", "tools", "pagellm"))
    models = os.environ.get("PEER_MODELS", "/tmp/pagellm-peer-models")
    results = []
    print(f"llama.cpp {peer.commit}")
    with tempfile.TemporaryDirectory(prefix="pagellm-peer-") as tmp:
        if a.kld:
            results.append({"accuracy": accuracy(a, peer, pagellm, models, tmp)})
        for shape in ([] if a.no_speed else a.shapes.split(",")):
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
