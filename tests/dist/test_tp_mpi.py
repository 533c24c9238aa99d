#!/usr/bin/env python3
"""Tensor parallelism under mpirun: `mpirun -n 2 pagellm generate ... --tensor-parallel-size 2`
prints what one process prints.

    test_tp_mpi.py PAGELLM TP_MODELS MODEL
      MODEL  llama, mistral, qwen2, qwen3 (random weights written by TP_MODELS: GQA, one KV head
             replicated over the ranks, biases, q/k norms) or stories260K (needs
             PAGELLM_TEST_MODELS; exit 77, SKIP, without it)

The prompts file mixes greedy prompts with logprobs and seeded samples (n = 2) (and, on
stories260K, a regex and a choice constraint); the engine
runs with a tiny KV pool (preemption) and an 8-token budget (chunked prefill). Every record
of `generate --json` but its timings must be equal. With PAGELLM_LOG=info every rank logs its
counters when it ends: each must have sent 2 x layers x dim x 4 bytes of all-reduce per token
it computed, and every rank the same.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1", PAGELLM_LOG="info",
           # under ASan: Open MPI never frees what MPI_Init and its plugins allocate
           ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
ENGINE = ["--block-size", "4", "--max-total-tokens", "8", "--max-batch-size", "8",
          "--threads", "1"]


def fail(msg, p=None):
    print("FAIL:", msg)
    if p is not None:
        print("stdout:", p.stdout[-3000:], "\nstderr:", p.stderr[-3000:], sep="\n")
    sys.exit(1)


def records(p):
    out = []
    for line in p.stdout.splitlines():
        r = json.loads(line)
        r.pop("timings", None)
        out.append(r)
    return sorted(out, key=lambda r: (r["index"], r["sample"]))


def main():
    exe, writer, model = sys.argv[1:4]
    tmp = tempfile.mkdtemp(prefix="pagellm-tp-")
    vocab_ids = 80
    if model == "stories260K":
        root = os.environ.get("PAGELLM_TEST_MODELS")
        if not root:
            print("SKIP: PAGELLM_TEST_MODELS is not set")
            sys.exit(77)
        flags = ["-m", os.path.join(root, "stories260K.bin"), "--tokenizer",
                 os.path.join(root, "tok512.model")]
        dim, layers, blocks = 64, 5, 56
        prompts = [{"prompt": "Once upon a time", "max_tokens": 200, "logprobs": 2,
                    "ignore_eos": True},
                   {"prompt": "The little dog", "max_tokens": 100, "n": 2, "temperature": 0.8,
                    "seed": 5, "ignore_eos": True},
                   {"prompt": "Tom and Lily went to the park. They saw a big tree and",
                    "max_tokens": 30},
                   # structured decoding lives on rank 0 too
                   {"prompt": "Tom saw", "max_tokens": 24, "regex": "( [a-z]+)+\\."},
                   {"prompt": "Lily liked", "max_tokens": 10, "choice": [" cats", " dogs"]}]
    else:
        subprocess.run([writer, tmp], check=True)
        path = os.path.join(tmp, model)
        cfg = json.load(open(os.path.join(path, "config.json")))
        flags = ["-m", path, "--kv-dtype", "f32"]
        dim, layers, blocks = cfg["hidden_size"], cfg["num_hidden_layers"], 40
        ids = lambda n, k: [1] + [3 + (k * 7 + i * 13) % vocab_ids for i in range(n - 1)]
        prompts = [{"prompt_token_ids": ids(20, 1), "max_tokens": 40, "ignore_eos": True,
                    "logprobs": 2},
                   {"prompt_token_ids": ids(12, 2), "max_tokens": 30, "ignore_eos": True,
                    "n": 2, "temperature": 0.8, "seed": 5},
                   {"prompt_token_ids": ids(30, 3), "max_tokens": 30, "ignore_eos": True}]
    pfile = os.path.join(tmp, "prompts.jsonl")
    with open(pfile, "w") as f:
        for p in prompts:
            f.write(json.dumps(p) + "\n")
    common = [exe, "generate", *flags, *ENGINE, "--max-num-blocks", str(blocks), "--prompts",
              pfile, "--json", "--temperature", "0"]
    one = subprocess.run(common, env=ENV, capture_output=True, text=True, timeout=120)
    if one.returncode != 0:
        fail("one process", one)
    two = subprocess.run(["mpirun", "-n", "2", *common, "--tensor-parallel-size", "2"], env=ENV,
                         capture_output=True, text=True, timeout=120)
    if two.returncode != 0:
        fail("mpirun -n 2", two)
    a, b = records(one), records(two)
    if a != b:
        for x, y in zip(a, b):
            if x != y:
                fail(f"{model}: record differs:\n  one: {x}\n  two: {y}")
        fail(f"{model}: {len(a)} vs {len(b)} records")
    if not any(r["preemptions"] for r in a):
        fail(f"{model}: no preemption: the pool was meant to be too small", one)
    if "tensor parallel: mpi: 2 ranks, Open MPI" not in two.stderr:
        fail("no start-up line naming backend, transport and ranks", two)
    counters = re.findall(r"rank (\d) of 2: (\d+) steps, (\d+) tokens; all_reduce (\d+) calls "
                          r"(\d+) bytes", two.stderr)
    if sorted(c[0] for c in counters) != ["0", "1"]:
        fail("every rank's counters were expected in the log", two)
    tokens = {c[2] for c in counters}
    for rank, steps, toks, calls, nbytes in counters:
        want = 2 * layers * dim * 4 * int(toks)
        if int(nbytes) != want or int(calls) != 2 * layers * int(steps):
            fail(f"rank {rank}: {nbytes} all-reduce bytes in {calls} calls for {toks} tokens "
                 f"in {steps} steps; want {want} bytes, 2 x {layers} calls per step", two)
    if len(tokens) != 1:
        fail(f"ranks computed different token counts {tokens}", two)
    print(f"{model}: {len(a)} records equal; {counters[0][2]} tokens, "
          f"{2 * layers * dim * 4} all-reduce bytes per token on both ranks")


if __name__ == "__main__":
    main()
