#!/usr/bin/env python3
"""The command line as a newcomer from vLLM or llama.cpp types it (issue 26): help per
command, vLLM's flag names and underscore spellings, a positional model, "did you mean",
-n against --n, errors that name what was typed, and what `generate` prints.

usage: test_cli_flags.py PAGELLM CASE   (exit 0 pass, 1 fail, 77 skip)

Every case runs the built `pagellm` on dummy:tiny (random weights, no files) unless it says
otherwise; expected values come from the flags, never from the tool's own output.
"""
import json
import os
import re
import subprocess
import sys
import tempfile

PAGELLM = None
TMP = None
TINY = ["--model", "dummy:tiny"]


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(args, expect_rc=0, stdin=None, timeout=120, env=None):
    p = subprocess.run([PAGELLM] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout, input=stdin, env=env)
    check(p.returncode >= 0, f"pagellm {' '.join(map(str, args))} died of signal "
          f"{-p.returncode}\n{p.stderr}")
    check("Sanitizer" not in p.stderr and "runtime error:" not in p.stderr,
          f"sanitizer report:\n{p.stderr}")
    if expect_rc is not None:
        check(p.returncode == expect_rc,
              f"pagellm {' '.join(map(str, args))}: exit {p.returncode}, expected {expect_rc}"
              f"\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def records(stdout):
    return [json.loads(l) for l in stdout.splitlines() if l.startswith("{")]


# ------------------------------------------------------------------------------------------


def case_help_command():
    """`pagellm help CMD` is `pagellm CMD --help` (it printed the top-level help)."""
    for cmd in (["generate"], ["chat"], ["serve"], ["bench", "throughput"], ["tokenize"]):
        want = run(cmd + ["--help"]).stdout
        got = run(["help"] + cmd).stdout
        check(got == want, f"help {' '.join(cmd)} differs from {' '.join(cmd)} --help")
        check(got.startswith(f"usage: pagellm {' '.join(cmd)}"), f"help {cmd}: {got[:80]!r}")
    top = run(["help"]).stdout
    check("commands:" in top, "pagellm help lost the top-level help")
    p = run(["genrate"], expect_rc=2)
    check("did you mean 'generate'" in p.stderr, f"no suggestion for a command: {p.stderr}")


def case_did_you_mean():
    """An unknown flag gets the closest one the command takes; a known one without its value
    says so; a flag of another command or nothing near gets no guess."""
    cases = [
        (["generate"] + TINY + ["--max-tokns", "3"], "--max-tokens"),
        (["generate"] + TINY + ["--temprature", "0"], "--temperature"),
        (["generate"] + TINY + ["--promt", "hi"], "--prompt"),
        (["chat"] + TINY + ["--sytem", "x"], "--system"),
        (["serve"] + TINY + ["--prot", "0"], "--port"),
        (["bench", "throughput", "--num-prompt", "3"], "--num-prompts"),
        (["bench", "serve", "--request-rat", "3"], "--request-rate"),
        (["tokenize", "--tokenizr", "x"], "--tokenizer"),
        (["generate"] + TINY + ["--gpu-memory-utilisation", "0.5"], "--gpu-memory-utilization"),
    ]
    for args, want in cases:
        p = run(args, expect_rc=2)
        check(f"(did you mean {want}?)" in p.stderr, f"{args}: no '{want}' suggested: {p.stderr}")
    p = run(["generate"] + TINY + ["--prompt"], expect_rc=2)
    check("--prompt: missing value" in p.stderr, f"a flag without its value: {p.stderr}")
    p = run(["generate"] + TINY + ["--zzzzzz", "1"], expect_rc=2)
    check("unknown flag '--zzzzzz'" in p.stderr and "did you mean" not in p.stderr,
          f"a guess for nothing near: {p.stderr}")


def case_vllm_names():
    """vLLM's engine argument names and underscore spellings set the same fields as pagellm's
    flags: the same run gives the same records; a refused value under an alias still names
    what was typed."""
    base = ["generate"] + TINY + ["--prompt-ids", "1,2,3", "--json", "--temperature", "0",
                                  "--max-tokens", "4"]
    ours = run(base + ["--kv-dtype", "f32", "--max-total-tokens", "64", "--max-num-blocks",
                       "40", "--no-prefix-caching"])
    theirs = run(base + ["--kv-cache-dtype", "f32", "--max-num-batched-tokens", "64",
                         "--num_gpu_blocks_override", "40", "--no-enable-prefix-caching"])
    strip = lambda recs: [{k: v for k, v in r.items() if k not in ("timings", "id")}
                          for r in recs]
    check(strip(records(ours.stdout)) == strip(records(theirs.stdout)),
          f"aliases gave other outputs:\n{ours.stdout}\n{theirs.stdout}")
    under = run(["generate", "--model=dummy:tiny", "--prompt_ids", "1,2,3", "--json",
                 "--temperature=0", "--max_tokens", "4", "--kv_dtype=f32",
                 "--max_total_tokens", "64", "--max_num_blocks", "40",
                 "--enable_prefix_caching=false"])
    check(strip(records(under.stdout)) == strip(records(ours.stdout)), "underscores differ")
    # the alias takes effect: a budget below the batch is refused naming the flag typed
    p = run(["generate"] + TINY + ["--prompt-ids", "1", "--max-num-batched-tokens", "2",
                                   "--max-batch-size", "4"], expect_rc=1)
    check("--max-num-batched-tokens" in p.stderr or "--max-total-tokens" in p.stderr,
          f"the budget error does not name a flag: {p.stderr}")
    p = run(["generate"] + TINY + ["--prompt-ids", "1", "--gpu-memory-utilization", "2"],
            expect_rc=2)
    check("--gpu-memory-utilization" in p.stderr and "(0, 1]" in p.stderr,
          f"an alias's bad value: {p.stderr}")


def case_positional_model():
    """`pagellm serve MODEL` / `generate MODEL`, as `vllm serve MODEL`."""
    p = run(["generate", "dummy:tiny", "--prompt-ids", "1,2", "--max-tokens", "3", "--json"])
    check(len(records(p.stdout)) == 1 and len(records(p.stdout)[0]["output_token_ids"]) == 3,
          f"generate MODEL: {p.stdout}")
    missing = os.path.join(TMP, "no-such-model.bin")
    p = run(["serve", missing, "--port", "0"], expect_rc=1)
    check(missing in p.stderr, f"serve MODEL did not take MODEL as the model: {p.stderr}")
    p = run(["generate", "dummy:tiny", "dummy:tiny", "--prompt-ids", "1"], expect_rc=2)
    check("unexpected argument 'dummy:tiny'" in p.stderr, f"a second positional: {p.stderr}")


def case_n_flags():
    """-n is refused with both meanings spelt out; --n is the number of samples; help says
    which is which."""
    p = run(["generate"] + TINY + ["--prompt-ids", "1,2", "-n", "5"], expect_rc=2)
    check("--max-tokens" in p.stderr and "--n" in p.stderr, f"-n: {p.stderr}")
    p = run(["generate"] + TINY + ["--prompt-ids", "1,2", "--n", "3", "--max-tokens", "2",
                                   "--json"])
    recs = records(p.stdout)
    check(sorted(r["sample"] for r in recs) == [0, 1, 2] and
          all(len(r["output_token_ids"]) == 2 for r in recs), f"--n 3: {p.stdout}")
    h = run(["generate", "--help"]).stdout
    check(not re.search(r"^\s*-n, ", h, re.M), "help still lists -n")
    line = next(l for l in h.splitlines() if l.strip().startswith("--n N"))
    check("samples" in line, f"--n's help: {line}")


def case_bench_n():
    """`bench throughput --n N` (vLLM's): every prompt sampled N times, output tokens counted
    per sample, prompt tokens and requests per prompt."""
    out = os.path.join(TMP, "t.json")
    run(["bench", "throughput", "--model", "dummy:tiny", "--num-prompts", "3", "--input-len",
         "5", "--output-len", "4", "--n", "2", "--output-json", out])
    with open(out, encoding="utf-8") as f:
        js = json.load(f)
    check(js["num_requests"] == 3, f"num_requests {js['num_requests']} != 3 prompts")
    check(js["total_num_prompt_tokens"] == 3 * 5, f"prompt tokens {js['total_num_prompt_tokens']}")
    check(js["total_num_output_tokens"] == 3 * 2 * 4,
          f"output tokens {js['total_num_output_tokens']} != 3 prompts x 2 samples x 4")
    check(js["workload"]["n"] == 2, "the JSON does not say n")


def case_prompt_twice():
    """A prompt flag given twice is refused (it kept the last, silently)."""
    for flag, a, b in (("--prompt", "a", "b"), ("--prompt-ids", "1", "2"),
                       ("--messages", "x.json", "y.json"), ("--prompts", "x", "y")):
        p = run(["generate"] + TINY + [flag, a, flag, b], expect_rc=2)
        check(f"{flag} given twice" in p.stderr and "--prompts" in p.stderr,
              f"{flag} twice: {p.stderr}")


TOK512 = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                      "tok512_hf")


def case_ids_echo():
    """Text mode shows a token-id prompt as its text, as it shows a text prompt: streamed
    alone, and in a batch's records."""
    tok = ["--tokenizer", TOK512, "--max-tokens", "6", "--temperature", "0"]
    text = "Once upon a time"
    ids = json.loads(run(["tokenize", "--tokenizer", TOK512, "--text", text,
                          "--json"]).stdout)["ids"]
    by_text = run(["generate"] + TINY + tok + ["--prompt", text]).stdout
    by_ids = run(["generate"] + TINY + tok + ["--prompt-ids", ",".join(map(str, ids))]).stdout
    check(by_text.startswith(text) and by_ids == by_text,
          f"ids prompt shown as {by_ids!r}, text prompt as {by_text!r}")
    f = os.path.join(TMP, "p.jsonl")
    with open(f, "w") as fh:
        fh.write(json.dumps({"prompt_token_ids": ids}) + "\n" + json.dumps({"prompt": text}))
    out = run(["generate"] + TINY + tok + ["--prompts", f]).stdout
    bodies = [l for l in out.splitlines() if not l.startswith("--- prompt")]
    check(len(bodies) == 2 and bodies[0] == bodies[1] == by_text.rstrip("\n"),
          f"batch records: {out!r}")


def case_sampling_fields():
    """skip_special_tokens, include_stop_str_in_output and logit_bias (vLLM's SamplingParams)
    as flags and as prompts-file keys, each doing what it says."""
    base = ["generate"] + TINY + ["--tokenizer", TOK512, "--temperature", "0", "--json"]
    text = "Once upon a time"

    def one(extra, prompt=("--prompt", text)):
        recs = records(run(base + list(prompt) + extra).stdout)
        check(len(recs) == 1, f"{extra}: {recs}")
        return recs[0]

    free = one(["--max-tokens", "8"])
    # logit_bias: +100 makes a token the greedy choice every step, -100 bans it
    forced = one(["--max-tokens", "4", "--logit-bias", "300:100"])
    check(forced["output_token_ids"] == [300] * 4, f"+100: {forced['output_token_ids']}")
    first = free["output_token_ids"][0]
    banned = one(["--max-tokens", "8", "--logit-bias", f"{first}:-100,300:-100"])
    check(first not in banned["output_token_ids"] and 300 not in banned["output_token_ids"],
          f"-100 did not ban {first}: {banned['output_token_ids']}")
    p = run(base + ["--prompt", text, "--logit-bias", "5000:1"], expect_rc=1)
    check("--logit-bias" in p.stderr and "vocabulary" in p.stderr, f"id past vocab: {p.stderr}")
    p = run(base + ["--prompt", text, "--logit-bias", "5:200"], expect_rc=2)
    check("--logit-bias" in p.stderr and "[-100, 100]" in p.stderr, f"bias 200: {p.stderr}")
    # skip_special_tokens: BOS (id 1) forced into the output gives text only when kept
    skipped = one(["--max-tokens", "3", "--logit-bias", "1:100"])
    kept = one(["--max-tokens", "3", "--logit-bias", "1:100", "--no-skip-special-tokens"])
    check(skipped["output_token_ids"] == kept["output_token_ids"] == [1, 1, 1],
          f"forced BOS: {skipped['output_token_ids']}")
    check(skipped["text"] == "" and kept["text"] == "<s><s><s>",
          f"special tokens: skipped {skipped['text']!r}, kept {kept['text']!r}")
    # include_stop_str_in_output: the stop string stays at the end of the text
    whole = free["text"]
    stop = whole[3:5]
    cut = one(["--max-tokens", "8", "--stop", stop])
    kept = one(["--max-tokens", "8", "--stop", stop, "--include-stop-str-in-output"])
    at = whole.find(stop)
    check(cut["text"] == whole[:at] and kept["text"] == whole[:at + len(stop)],
          f"stop {stop!r} in {whole!r}: cut {cut['text']!r}, kept {kept['text']!r}")
    check(cut["finish_reason"] == kept["finish_reason"] == "stop", "finish reasons")
    # the same through a prompts file's keys (OpenAI's logit_bias object)
    f = os.path.join(TMP, "s.jsonl")
    with open(f, "w") as fh:
        fh.write(json.dumps({"prompt": text, "max_tokens": 3, "logit_bias": {"1": 100},
                             "skip_special_tokens": False}) + "\n")
    recs = records(run(base + ["--prompts", f]).stdout)
    check(recs[0]["text"] == "<s><s><s>", f"prompts file: {recs}")


def case_context_default():
    """Without --max-tokens generate runs to what the context leaves (it stopped at 100, and
    a longer context was refused); a --max-tokens past it is refused naming the flags."""
    base = ["generate"] + TINY + ["--prompt-ids", "1,2,3", "--temperature", "0", "--json",
                                  "--ignore-eos"]
    r = records(run(base + ["--max-model-len", "150"]).stdout)[0]
    check(len(r["output_token_ids"]) == 147 and r["finish_reason"] == "length",
          f"without --max-tokens: {len(r['output_token_ids'])} tokens, {r['finish_reason']}")
    p = run(base + ["--max-model-len", "40", "--max-tokens", "100"], expect_rc=1)
    check("--max-tokens (100) exceeds --max-model-len (40)" in p.stderr, p.stderr)
    p = run(["generate"] + TINY + ["--prompt-ids", ",".join(["5"] * 40), "--max-model-len",
                                   "40"], expect_rc=1)
    check("leaves no room for output in --max-model-len (40" in p.stderr, p.stderr)


def case_errors_name_flags():
    """What the engine refuses is named as the flag typed, not the library's field."""
    ids = ["--prompt-ids", "1,2"]
    cases = [
        (["--kv-dtype", "bf16"], 1, "--kv-dtype = bf16: backend cpu stores KV entries as f32, f16"),
        (["--max-model-len", "100000"], 1, "--max-model-len = 100000: the model dummy:tiny"),
        (["--max-num-seqs", "4", "--max-batch-size", "8"], 1,
         "--max-num-seqs = 4: must be >= --max-batch-size (8)"),
        (["--no-chunked-prefill", "--max-total-tokens", "64"], 1,
         "--max-total-tokens = 64: with chunked prefill off it must be >= --max-model-len"),
        (["--n", "8", "--max-num-seqs", "4"], 1, "--n = 8: more than --max-num-seqs (4)"),
        (["--memory-limit", "16MiB", "--max-num-blocks", "100000"], 1,
         "--memory-limit = 16777216"),
        (["--top-p", "0"], 2, "--top-p = 0: must be in (0, 1]"),
    ]
    for extra, rc, want in cases:
        p = run(["generate"] + TINY + ids + extra, expect_rc=rc)
        check(want in p.stderr, f"{extra}: {p.stderr!r} lacks {want!r}")
        check("config." not in p.stderr and "sampling." not in p.stderr,
              f"{extra}: a library field name: {p.stderr}")
    p = run(["generate"] + TINY + ["--prompt", "hi"], expect_rc=1)
    check("--tokenizer is unset" in p.stderr, f"no tokenizer: {p.stderr}")
    check(run(["generate"] + TINY + ids + ["--kv-dtype", "bf16", "--backend", "ref",
                                           "--max-tokens", "2"]).returncode == 0, "ref bf16")
    h = run(["generate", "--help"]).stdout
    check("By backend: cpu f32, f16; ref and cuda also bf16" in " ".join(h.split()),
          "--kv-dtype's help does not list what each backend takes")


MODELS = os.environ.get("PAGELLM_TEST_MODELS")


def case_info():
    """`pagellm info`: stories260K's facts computed here from its published shape; a summary
    line at generate's start; a file that is no model refused by name."""
    if not MODELS:
        raise Skip("PAGELLM_TEST_MODELS is not set: no stories260K")
    model = os.path.join(MODELS, "stories260K.bin")
    tok = os.path.join(MODELS, "tok512.model")
    js = json.loads(run(["info", model, "--tokenizer", tok, "--json"]).stdout)
    d, hidden, layers, heads, kv_heads, vocab = 64, 172, 5, 8, 4, 512
    kv_dim = d // heads * kv_heads
    per_layer = 2 * d + 2 * d * d + 2 * d * kv_dim + 3 * d * hidden
    want = {"format": "llama2.c", "architecture": "llama", "n_layers": layers, "dim": d,
            "hidden_dim": hidden, "n_heads": heads, "n_kv_heads": kv_heads, "vocab_size": vocab,
            "context_length": 512, "tied_embeddings": True, "weight_type": "f32",
            "n_params": layers * per_layer + vocab * d + d, "kv_dtype": "f16",
            "kv_bytes_per_token": 2 * layers * kv_dim * 2, "tokenizer_kind": "sentencepiece",
            "tokenizer_path": tok, "n_chat_templates": 0, "bos_id": 1, "eos_id": 2}
    for k, v in want.items():
        check(js[k] == v, f"info {k}: {js[k]!r}, want {v!r}")
    text = run(["info", model, "--tokenizer", tok, "--kv-dtype", "f32",
                "--chat-template", "{{ messages[0].content }}"]).stdout
    for line in ("format          llama2.c", "parameters      260.0K (260032)",
                 "KV cache        f32: 1.28 KB per token", "tokenizer       tok512.model "
                 "(sentencepiece)", "chat template   1 (--chat-template)"):
        check(line in text, f"info lacks {line!r}:\n{text}")
    p = run(["generate", model, "--tokenizer", tok, "--prompt", "Once", "--max-tokens", "2"])
    first = p.stderr.splitlines()[0]
    check(first.startswith("pagellm generate: " + model + " (llama2.c llama): 260.0K params (f32)")
          and "tokenizer sentencepiece" in first, f"generate's summary line: {first}")
    p = run(["info", tok], expect_rc=1)
    check("not a GGUF, safetensors or llama2.c file" in p.stderr and "--tokenizer" in p.stderr,
          f"info on a tokenizer: {p.stderr}")


CASES = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("case_")}


def main():
    global PAGELLM, TMP
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(f"usage: {sys.argv[0]} PAGELLM CASE ({', '.join(CASES)})", file=sys.stderr)
        return 2
    PAGELLM = os.path.abspath(sys.argv[1])
    case = sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="pagellm-cli-") as d:
        TMP = d
        try:
            CASES[case]()
        except Skip as e:
            print(f"SKIP {case}: {e}")
            return 77
        except Failure as e:
            print(f"FAIL {case}: {e}")
            return 1
    print(f"PASS {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
