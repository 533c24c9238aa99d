#!/usr/bin/env python3
"""One model on one backend, every figure the GPU kit reports for it, from one engine: decode
steps at each batch size and prefill steps at each prompt length (scripts/gpu_kit.sh, run.py).

usage: bench.py --backend cuda|cpu --model dummy:NAME --dtype TYPE [--threads N]
                [--batches 1,8,64] [--prefills 512,2048] [--decode-steps N] [--reps N]

Prints one JSON object per line:
  {"kind": "meta", "weight_bytes": streamed bytes per decode step, "create_s": ...}
  {"kind": "decode", "batch": B, "step_ms": median, "tok_s": B / step, "steps": n,
   "weight_gbs": weight bytes / step}
  {"kind": "prefill", "tokens": T, "ms": median, "tok_s": T / step}
  {"kind": "error", "message": ...}
Each figure is the median of the engine's own steps, timed around pl_engine_step alone (the
Python package only submits; the timed loop calls the library directly), so the numbers are
the engine's. Decode: B requests of 32 prompt tokens; after every prompt is in, the pure decode
steps (B sequences, B tokens) are timed, the first two dropped. Prefill: one request of T
tokens (T is capped at the model's context - 1) in one step (max_total_tokens >= T), after a
warm-up prefill; fresh random prompts and no prefix caching, so nothing is a cache hit.
"""
import argparse
import ctypes
import json
import random
import statistics
import sys
import time


def emit(**kw):
    print(json.dumps(kw), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="f16")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--prefills", default="512,2048")
    ap.add_argument("--decode-steps", type=int, default=24)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    batches = [int(x) for x in a.batches.split(",") if x]
    prefills = [int(x) for x in a.prefills.split(",") if x]

    import pagellm
    from pagellm import _lib
    L = _lib.lib()
    raw = ctypes.CDLL(_lib.library_path())
    raw.pl_engine_weight_bytes.restype = ctypes.c_size_t
    raw.pl_engine_weight_bytes.argtypes = [ctypes.c_void_p]

    max_b = max(batches) if batches else 1
    ctx = 32 + a.decode_steps + 8
    max_pre = max(prefills) if prefills else 0
    # a pool for what runs, not for max_num_seqs x the model's context (tens of GB on the CPU
    # backend for the 7B shape): every decode batch at once, or the longest prefill
    block = 16
    blocks = max(max_b * ((ctx + block - 1) // block + 1), (max_pre + 2 * block) // block) + 8
    t0 = time.monotonic()
    eng = pagellm.LLMEngine(a.model, backend=a.backend, dtype=a.dtype, threads=a.threads,
                            max_batch_size=max_b, max_num_seqs=max_b, block_size=block,
                            max_num_blocks=blocks,
                            max_total_tokens=max(max_pre + 8, max_b, 256),
                            enable_prefix_caching=False, seed=0)
    info = eng.model_info
    limit = info.max_model_len
    h = eng._handle
    with h as e:
        wbytes = raw.pl_engine_weight_bytes(e)
    emit(kind="meta", backend=a.backend, model=a.model, dtype=a.dtype,
         weight_type=getattr(info, "weight_type", None), weight_bytes=wbytes,
         create_s=round(time.monotonic() - t0, 3), max_model_len=limit)
    rng = random.Random(1234)
    vocab = info.vocab_size if hasattr(info, "vocab_size") else 32000

    def prompt(n):
        return [rng.randrange(3, vocab) for _ in range(n)]

    def run_steps():
        """Steps until idle; (seqs, tokens, seconds) of each step."""
        res = _lib.StepResult()
        out = []
        with h as e:
            while L.pl_engine_has_pending_work(e):
                t = time.perf_counter()
                st = L.pl_engine_step_sized(e, ctypes.byref(res), ctypes.sizeof(res))
                dt = time.perf_counter() - t
                if st != 0:
                    raise _lib.error(st)
                out.append((res.n_scheduled_seqs, res.n_scheduled_tokens, dt))
        return out

    def submit(ids, max_tokens):
        eng.add_request(None, {"prompt_token_ids": ids},
                        pagellm.SamplingParams(max_tokens=max_tokens, temperature=0.0,
                                               ignore_eos=True))

    # warm-up: kernels loaded, cuBLAS's heuristics cached, pages touched
    submit(prompt(min(64, limit - 2)), 4)
    run_steps()
    for b in batches:
        if 32 + a.decode_steps + 2 > limit:
            emit(kind="error", message=f"batch {b}: context {limit} too short")
            continue
        for _ in range(b):
            submit(prompt(32), a.decode_steps + 2)
        steps = run_steps()
        dec = [dt for s, t, dt in steps if s == b and t == b][2:]
        if not dec:
            emit(kind="error", message=f"batch {b}: no pure decode step ({steps[:4]}...)")
            continue
        med = statistics.median(dec)
        emit(kind="decode", batch=b, step_ms=round(med * 1e3, 4), tok_s=round(b / med, 2),
             steps=len(dec), weight_gbs=round(wbytes / med * 1e-9, 2))
    for want in prefills:
        n = min(want, limit - 1)
        times = []
        for _ in range(a.reps):
            submit(prompt(n), 1)
            steps = run_steps()
            times += [dt for s, t, dt in steps if t == n]
        if not times:
            emit(kind="error", message=f"prefill {n}: not one step (max_total_tokens?)")
            continue
        med = statistics.median(times)
        emit(kind="prefill", tokens=n, asked=want, ms=round(med * 1e3, 3),
             tok_s=round(n / med, 1), reps=len(times))
    eng.close()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as ex:  # the report says what broke, the run goes on
        emit(kind="error", message=f"{type(ex).__name__}: {ex}")
        sys.exit(1)
