#!/usr/bin/env python3
"""What the Python binding costs per generate call, against the C API.

The same model, engine configuration and prompts run both ways, in alternating runs on two
warm engines: `c_api_run bench` (tests/python/c_api_run.c: submit every prompt through
pagellm.h, pl_engine_run, free) and `LLM.generate` in this process (use_tqdm=False). Each
run is timed where it happens (the C program times itself), and the figures are the medians
over the runs; the overhead is the median of the per-pair differences. On a shared machine
that difference carries the engine's own noise, so each side also times its call of
pl_engine_run, and "outside the run" compares what is left: submitting, and the binding's
copying of the completions into RequestOutputs. "Binding CPU" is that difference in the
calling thread's CPU time (with --threads 1 the engine computes on the calling thread), which
the other jobs on a shared machine disturb least.

    python3 python/bench/overhead.py [--build build] [--runs 30] [--max-tokens 64 1]
        [--logprobs 0 5] [--prompts 32] [--threads 1]

Needs ../shared/models (stories260K.bin, tok512.model) or --model/--tokenizer; the
package is taken from this checkout and the library from the build (PAGELLM_LIBRARY).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BASES = ["Once upon a time", "Lily and Tom went to the park", "The little dog",
         "One day, the sun", "Tim had a big red ball. He", "She was sad because",
         "The cat and the bird", "Ben and his mom"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    models = os.environ.get("PAGELLM_TEST_MODELS", os.path.join(ROOT, "..", "shared", "models"))
    ap.add_argument("--model", default=os.path.join(models, "stories260K.bin"))
    ap.add_argument("--tokenizer", default=os.path.join(models, "tok512.model"))
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-tokens", type=int, nargs="+", default=[64, 1])
    ap.add_argument("--logprobs", type=int, nargs="+", default=[-1, 5])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()

    os.environ.setdefault("PAGELLM_LIBRARY", os.path.join(args.build, "libpagellm.so"))
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import pagellm
    from pagellm import LLM, SamplingParams

    prompts = [f"{BASES[i % len(BASES)]}{' and' * (i // len(BASES))}"
               for i in range(args.prompts)]
    exe = os.path.join(args.build, "tests", "python", "c_api_run")
    print(f"library {pagellm.library_path()}, {args.prompts} prompts, {args.runs} alternating "
          f"runs each, threads {args.threads}, model {os.path.basename(args.model)}")
    print("| max_tokens | logprobs | C API (ms) | Python (ms) | overhead per call (ms) | "
          "outside the run: C, Python (ms) | binding CPU per call (ms) | per prompt (us) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(prompts) + "\n")
        f.flush()
        llm = LLM(args.model, tokenizer=args.tokenizer, threads=args.threads)
        L = pagellm._lib.lib()
        run_fn = L.pl_engine_run
        in_run = [0.0, 0.0]

        def timed_run(*a):  # the binding's one pl_engine_run per generate, timed
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return run_fn(*a)
            finally:
                in_run[0] = time.perf_counter() - t0
                in_run[1] = time.thread_time() - c0

        L.pl_engine_run = timed_run
        for max_tokens in args.max_tokens:
            for logprobs in args.logprobs:
                cmd = [exe, "bench", args.model, args.tokenizer, f.name, str(max_tokens),
                       str(args.threads), str(logprobs)]
                c = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
                sp = SamplingParams(temperature=0, max_tokens=max_tokens,
                                    logprobs=logprobs if logprobs >= 0 else None)

                def c_run():
                    c.stdin.write("go\n")
                    c.stdin.flush()
                    return tuple(map(float, c.stdout.readline().split()))

                def py_run():
                    t0, c0 = time.perf_counter(), time.thread_time()
                    out = llm.generate(prompts, sp, use_tqdm=False)
                    dt, dc = time.perf_counter() - t0, time.thread_time() - c0
                    assert len(out) == len(prompts)
                    return dt, in_run[0], dc, in_run[1]

                for _ in range(3):  # warm both
                    c_run()
                    py_run()
                cs, ps = [], []
                for r in range(args.runs):
                    if r % 2:
                        ps.append(py_run())
                        cs.append(c_run())
                    else:
                        cs.append(c_run())
                        ps.append(py_run())
                c.stdin.close()
                c.wait()
                med = statistics.median
                diff = med(p[0] - q[0] for p, q in zip(ps, cs))
                c_out, p_out = med(q[0] - q[1] for q in cs), med(p[0] - p[1] for p in ps)
                cpu = med((p[2] - p[3]) - (q[2] - q[3]) for p, q in zip(ps, cs))
                print(f"| {max_tokens} | {logprobs if logprobs >= 0 else 'off'} | "
                      f"{med(q[0] for q in cs) * 1e3:.2f} | {med(p[0] for p in ps) * 1e3:.2f} | "
                      f"{diff * 1e3:.2f} | {c_out * 1e3:.2f}, {p_out * 1e3:.2f} | "
                      f"{cpu * 1e3:.2f} | {cpu / len(prompts) * 1e6:.0f} |")
        llm.close()


if __name__ == "__main__":
    main()
