#!/usr/bin/env python3
"""The command line refuses bad input: a non-zero exit and a message on stderr naming the
flag, file or line, never a crash (a signal) and never exit 0.

Usage: test_cli.py PATH/TO/pagellm   (run by meson in suite e2e)

Cases: truncated and hostile model files, a missing tokenizer, invalid JSONL lines, unknown
flags and bad flag values, missing files, out-of-vocabulary token ids, a memory limit the model
does not fit. One valid run makes sure the refusals are not the command failing for everyone.
Also the output that is not a refusal: `generate --json` (one object per line, in input order,
with the fields asked for) and, with PAGELLM_TEST_MODELS, the README's stories260K command.
Prints TAP-like lines and a closing "N passed, N failed".
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

EXE = sys.argv[1]
passed = failed = 0


def run(args, timeout=60):
    p = subprocess.run([EXE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def report(name, problems, args, err):
    global passed, failed
    if problems:
        failed += 1
        print(f"not ok - {name}: {'; '.join(problems)}\n  args: {args}\n  stderr: {err[-600:]}")
    else:
        passed += 1
        print(f"ok - {name}")


def check(name, args, want_rc, needles, more=None):
    """want_rc: an exit code, or None for 'any non-zero exit that is not a signal'.
    more: optional function (stdout, stderr) -> list of further problems."""
    rc, out, err = run(args)
    problems = []
    if rc < 0:
        problems.append(f"killed by signal {-rc}")
    elif want_rc is None and rc == 0:
        problems.append("exit 0")
    elif want_rc is not None and rc != want_rc:
        problems.append(f"exit {rc}, want {want_rc}")
    for n in needles:
        if n not in err:
            problems.append(f"stderr lacks {n!r}")
    if rc != 0 and not err.strip():
        problems.append("no message on stderr")
    if "AddressSanitizer" in err or "runtime error" in err:
        problems.append("sanitizer report")
    if more:
        problems += more(out, err)
    report(name, problems, args, err)


def weights_over_limit(limit):
    """The refusal gives the model's weight bytes (above limit) and the limit itself."""
    def more(out, err):
        m = re.search(r"weights take (\d+) bytes", err)
        if not m:
            return ["stderr lacks 'weights take N bytes'"]
        if int(m.group(1)) <= limit:
            return [f"weights {m.group(1)} bytes reported, not above the limit {limit}"]
        return [] if str(limit) in err else [f"stderr lacks the limit {limit}"]
    return more


def check_json_output(tmp, models):
    """generate --json: one JSON object per completion, one per line, in input order, each with
    prompt_token_ids as given, output_token_ids of max_tokens ints (ignore_eos) and finish_reason
    "length". A text prompt joins when the shared tokenizer is there."""
    prompts = [{"prompt_token_ids": [1, 5, 9, 13], "max_tokens": 3},
               {"prompt_token_ids": [1, 400, 2, 77, 3, 8, 100], "max_tokens": 7},
               {"prompt_token_ids": [1], "max_tokens": 1}]
    args = ["generate", "--model", "dummy:tiny", "--json", "--temperature", "0"]
    tok = os.path.join(models, "tok512.model") if models else None
    if tok and os.path.exists(tok):
        prompts.append({"prompt": "Once upon a time", "max_tokens": 5})
        args += ["--tokenizer", tok]
    else:
        print("# skip: the text prompt of the --json case needs PAGELLM_TEST_MODELS "
              "(tok512.model); checking the token-id prompts only")
    path = os.path.join(tmp, "json_order.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for q in prompts:
            f.write(json.dumps(dict(q, ignore_eos=True)) + "\n")
    args += ["--prompts", path]
    rc, out, err = run(args)
    problems = [] if rc == 0 else [f"exit {rc}"]
    lines = out.splitlines()
    if len(lines) != len(prompts):
        problems.append(f"{len(lines)} lines of output for {len(prompts)} prompts")
    for i, (line, q) in enumerate(zip(lines, prompts)):
        try:
            o = json.loads(line)
        except ValueError as e:
            problems.append(f"line {i + 1} is not JSON ({e}): {line[:80]!r}")
            continue
        if not isinstance(o, dict):
            problems.append(f"line {i + 1} is not a JSON object")
            continue
        if o.get("index") != i:
            problems.append(f"line {i + 1}: index {o.get('index')!r}, want {i} (input order)")
        got_p = o.get("prompt_token_ids")
        if "prompt_token_ids" in q:
            if got_p != q["prompt_token_ids"]:
                problems.append(f"line {i + 1}: prompt_token_ids {got_p!r}, want "
                                f"{q['prompt_token_ids']!r}")
        elif not (isinstance(got_p, list) and len(got_p) >= 2 and got_p[0] == 1 and
                  all(type(t) is int for t in got_p)):
            problems.append(f"line {i + 1}: prompt_token_ids {got_p!r} is not BOS + the "
                            f"tokenized text")
        out_ids = o.get("output_token_ids")
        if not (isinstance(out_ids, list) and all(type(t) is int for t in out_ids)):
            problems.append(f"line {i + 1}: output_token_ids {out_ids!r} is not a list of ints")
        elif len(out_ids) != q["max_tokens"]:
            problems.append(f"line {i + 1}: {len(out_ids)} output ids, want max_tokens = "
                            f"{q['max_tokens']}")
        if o.get("finish_reason") != "length":
            problems.append(f"line {i + 1}: finish_reason {o.get('finish_reason')!r}")
        if not isinstance(o.get("text"), str):
            problems.append(f"line {i + 1}: text is not a string")
    report("generate --json: one object per line, in input order", problems, args, err)


def check_stories(models):
    """The README's command prints a TinyStories-like story: several common English words."""
    args = ["generate", "--model", os.path.join(models, "stories260K.bin"), "--tokenizer",
            os.path.join(models, "tok512.model"), "--prompt", "Once upon a time",
            "--temperature", "0"]
    rc, out, err = run(args)
    problems = [] if rc == 0 else [f"exit {rc}"]
    common = {"the", "a", "and", "was", "she", "he", "to", "her", "his", "they", "there",
              "little", "girl", "boy", "day", "play", "with", "it", "in", "said", "happy",
              "one", "saw", "big", "mom", "friend", "had", "named", "very", "of", "is"}
    generated = out[len("Once upon a time"):] if out.startswith("Once upon a time") else out
    words = set(re.findall(r"[a-z]+", generated.lower()))
    found = sorted(words & common)
    if len(found) < 5:
        problems.append(f"only {len(found)} common English words ({found}) in {out[:200]!r}")
    report("README stories260K command tells a story", problems, args, err)


def llama2c_header(dim=8, hidden=12, layers=1, heads=2, kv=2, vocab=16, seq=8):
    return struct.pack("<7i", dim, hidden, layers, heads, kv, vocab, seq)


def main():
    tmp = tempfile.mkdtemp(prefix="pl_cli_")
    p = lambda name: os.path.join(tmp, name)
    ids = ["--prompt-ids", "1,5,9"]

    # a working run first: what follows must fail for its own reason
    check("valid run", ["generate", "--model", "dummy:tiny", "--max-tokens", "3",
                        "--temperature", "0", "--json"] + ids, 0, [])

    # model files
    with open(p("trunc.bin"), "wb") as f:
        f.write(llama2c_header() + b"\0" * 100)  # claims far more weights than it holds
    check("truncated llama2.c model", ["generate", "--model", p("trunc.bin")] + ids, 1,
          ["trunc.bin"])
    with open(p("short.bin"), "wb") as f:
        f.write(b"\x08\x00")  # not even a header
    check("file shorter than a header", ["generate", "--model", p("short.bin")] + ids, 1,
          ["short.bin"])
    with open(p("huge.bin"), "wb") as f:
        f.write(llama2c_header(dim=1 << 30, layers=1000000000, vocab=1 << 30) + b"\0" * 64)
    check("absurd dimensions", ["generate", "--model", p("huge.bin")] + ids, 1, ["huge.bin"])
    with open(p("neg.bin"), "wb") as f:
        f.write(llama2c_header(dim=-8, layers=-1) + b"\0" * 64)
    check("negative dimensions", ["generate", "--model", p("neg.bin")] + ids, 1, ["neg.bin"])
    with open(p("empty.bin"), "wb") as f:
        pass
    check("empty model file", ["generate", "--model", p("empty.bin")] + ids, 1, ["empty.bin"])
    os.mkdir(p("hf"))
    with open(p("hf/config.json"), "w") as f:
        f.write('{"architectures": ["LlamaForCausalLM"], "hidden_size": 8,')  # cut short
    check("truncated config.json", ["generate", "--model", p("hf")] + ids, 1, ["config.json"])
    with open(p("hf/config.json"), "w") as f:
        f.write('{"architectures": ["LlamaForCausalLM"], "hidden_size": 8, '
                '"intermediate_size": 12, "num_hidden_layers": 1, "num_attention_heads": 2, '
                '"vocab_size": 16, "max_position_embeddings": 8, "rms_norm_eps": 1e-5}')
    with open(p("hf/model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", 1 << 40) + b"{}")  # header length past the end
    check("safetensors header past the end", ["generate", "--model", p("hf")] + ids, 1,
          ["model.safetensors"])
    check("missing model", ["generate", "--model", p("nope.bin")] + ids, 1, ["nope.bin"])
    check("unknown dummy preset", ["generate", "--model", "dummy:nope"] + ids, 1, ["nope"])

    # tokenizer
    check("missing tokenizer", ["generate", "--model", "dummy:tiny", "--tokenizer",
                                p("missing.model"), "--prompt", "hi"], 1, ["missing.model"])
    with open(p("bad.model"), "wb") as f:
        f.write(b"\x0a\xff\xff\xff\xff\x0f garbage")
    check("corrupt tokenizer", ["generate", "--model", "dummy:tiny", "--tokenizer",
                                p("bad.model"), "--prompt", "hi"], 1, ["bad.model"])
    check("text prompt without a tokenizer", ["generate", "--model", "dummy:tiny",
                                              "--prompt", "hello"], 1, ["tokenizer"])

    # prompts files
    def jsonl(name, text):
        with open(p(name), "w", encoding="utf-8", newline="") as f:
            f.write(text)
        return p(name)
    cases = [
        ("invalid JSON on line 2", "ok2.jsonl",
         '{"prompt_token_ids": [1, 2]}\n{"prompt_token_ids": [1, 2\n', ":2:"),
        ("not an object", "arr.jsonl", "[1, 2]\n", ":1:"),
        ("both prompt forms", "both.jsonl", '{"prompt": "a", "prompt_token_ids": [1]}\n',
         "prompt"),
        ("wrong type", "type.jsonl", '{"prompt_token_ids": [1], "max_tokens": "9"}\n',
         "max_tokens"),
        ("negative id", "negid.jsonl", '{"prompt_token_ids": [1, -3]}\n', "prompt_token_ids"),
        ("NUL in prompt", "nul.jsonl", '{"prompt": "a\\u0000b"}\n', "NUL"),
        ("empty stop", "stop.jsonl", '{"prompt_token_ids": [1], "stop": [""]}\n', "stop"),
        ("too many stops", "stops.jsonl",
         '{"prompt_token_ids": [1], "stop": [%s]}\n' % ",".join('"s%d"' % i for i in range(65)),
         "stop"),
        ("duplicate key", "dup.jsonl", '{"prompt_token_ids": [1], "n": 1, "n": 2}\n', ":1:"),
        ("blank file", "blank.jsonl", "\n   \n", "no prompts"),
        ("n out of range", "n.jsonl", '{"prompt_token_ids": [1], "n": 1000}\n', "n"),
    ]
    for name, fname, text, needle in cases:
        check("prompts file: " + name, ["generate", "--model", "dummy:tiny", "--prompts",
                                        jsonl(fname, text)], 2, [fname, needle])
    with open(p("latin1.jsonl"), "wb") as f:
        f.write(b'{"prompt": "caf\xe9"}\n')  # not UTF-8
    check("prompts file: invalid UTF-8", ["generate", "--model", "dummy:tiny", "--prompts",
                                          p("latin1.jsonl")], 2, ["latin1.jsonl:1:"])
    check("prompts file: missing", ["generate", "--model", "dummy:tiny", "--prompts",
                                    p("none.jsonl")], 2, ["none.jsonl"])
    check("prompts file: a directory", ["generate", "--model", "dummy:tiny", "--prompts", tmp],
          None, [tmp])
    # valid JSON, values the engine refuses: named with the prompt's number
    check("prompts file: id outside the vocabulary", ["generate", "--model", "dummy:tiny",
          "--prompts", jsonl("oov.jsonl", '{"prompt_token_ids": [1]}\n'
                                          '{"prompt_token_ids": [1, 99999]}\n')],
          1, ["prompt 2", "vocabulary"])
    check("prompts file: sampling value refused", ["generate", "--model", "dummy:tiny",
          "--prompts", jsonl("topp.jsonl", '{"prompt_token_ids": [1], "top_p": 0}\n')],
          1, ["top_p"])

    # flags
    flag_cases = [
        ("unknown flag", ["--frobnicate"], "--frobnicate"),
        ("flag without value", ["--max-tokens"], "--max-tokens"),
        ("non-numeric value", ["--max-tokens", "abc"], "--max-tokens"),
        ("trailing junk", ["--max-tokens", "12x"], "--max-tokens"),
        ("overflowing value", ["--max-tokens", "99999999999999999999"], "--max-tokens"),
        ("negative value", ["--block-size", "-16"], "--block-size"),
        ("NaN temperature", ["--temperature", "nan"], "--temperature"),
        ("infinite top-p", ["--top-p", "inf"], "--top-p"),
        ("unknown backend", ["--backend", "tpu"], "--backend"),
        ("unknown dtype", ["--dtype", "int3"], "--dtype"),
        ("bad prompt ids", ["--prompt-ids", "1,x,3"], "--prompt-ids"),
        ("memory limit with an unknown suffix", ["--memory-limit", "12X"], "--memory-limit"),
        ("negative memory limit", ["--memory-limit", "-1"], "--memory-limit"),
        ("fractional memory limit", ["--memory-limit", "1.5G"], "--memory-limit"),
        ("overflowing memory limit", ["--memory-limit", "99999999999999999999"],
         "--memory-limit"),
        ("memory limit overflowing with its suffix", ["--memory-limit", "99999999999GiB"],
         "--memory-limit"),
        ("memory limit followed by another flag", ["--memory-limit"], "--memory-limit"),
        ("empty prompt ids", ["--prompt-ids", ","], "--prompt-ids"),
        ("top-p 0 (the range is (0, 1])", ["--top-p", "0"], "(0, 1]"),
        ("a misspelt enum value", ["--kv-dtype=f8"], "one of auto, f32, f16, bf16"),
    ]
    for name, extra, needle in flag_cases:
        args = ["generate", "--model", "dummy:tiny"] + extra
        if "--prompt-ids" not in extra:
            args += ids
        check("flag: " + name, args, 2, [needle])
    check("no --model", ["generate"] + ids, 2, ["--model"])
    check("no prompt", ["generate", "--model", "dummy:tiny"], 2, ["--prompt"])
    check("two prompt forms", ["generate", "--model", "dummy:tiny", "--prompt", "a"] + ids, 2,
          ["--prompt"])
    check("unknown command", ["frobnicate"], 2, ["frobnicate"])
    check("long-prefill-threshold without chunked prefill", ["generate", "--model", "dummy:tiny",
          "--no-chunked-prefill", "--long-prefill-threshold", "10"] + ids, None,
          ["long_prefill_threshold", "chunked prefill"])
    check("max-num-seqs alone lowers the batch", ["generate", "-m", "dummy:tiny", "-n", "2",
          "--max-num-seqs", "4", "--temperature", "0"] + ids, 0, [])
    check("block size not a power of two", ["generate", "--model", "dummy:tiny",
                                            "--block-size", "24"] + ids, None, ["block"])
    check("max-model-len beyond the model", ["generate", "--model", "dummy:tiny",
                                             "--max-model-len", "100000"] + ids, None,
          ["max_model_len"])
    check("prompt id outside the vocabulary", ["generate", "--model", "dummy:tiny",
                                               "--prompt-ids", "1,512"], 1, ["vocabulary"])
    check("request longer than max_model_len", ["generate", "--model", "dummy:tiny",
                                                "--max-tokens", "1000"] + ids, 1, ["max_model_len"])

    # the memory limit: weights that do not fit are refused with both numbers (64K = 65536)
    check("memory limit below the weights", ["generate", "--model", "dummy:tiny",
                                             "--memory-limit", "64K"] + ids, 1, ["dummy:tiny"],
          weights_over_limit(65536))
    check("explicit KV pool beyond the memory limit", ["generate", "--model", "dummy:tiny",
          "--memory-limit", "16MiB", "--max-num-blocks", "100000"] + ids, 1,
          ["memory_limit_bytes = 16777216", "max_num_blocks = 100000", "weights", "workspace"])
    check("memory limit the model fits", ["generate", "--model", "dummy:tiny", "--memory-limit",
                                          "256M", "--max-tokens", "3", "--temperature", "0",
                                          "--json"] + ids, 0, [])

    models = os.environ.get("PAGELLM_TEST_MODELS")
    check_json_output(tmp, models)

    # the shared models, when present: invalid UTF-8 text through a real tokenizer
    if not models:
        print("# skip: PAGELLM_TEST_MODELS is not set: no stories260K or tok512 cases")
    if models and os.path.exists(os.path.join(models, "tok512.model")):
        check("invalid UTF-8 prompt", ["generate", "--model", "dummy:tiny", "--tokenizer",
                                       os.path.join(models, "tok512.model"), "--prompt",
                                       b"caf\xe9".decode("latin-1").encode("latin-1")
                                       .decode("utf-8", "surrogateescape")], 1, ["UTF-8"])
        with open(os.path.join(models, "stories260K.bin"), "rb") as f:
            head = f.read(4096)
        with open(p("stories_cut.bin"), "wb") as f:
            f.write(head)
        check("truncated stories260K", ["generate", "--model", p("stories_cut.bin")] + ids, 1,
              ["stories_cut.bin"])
        check_stories(models)

    for f in sorted(os.listdir(tmp), reverse=True):
        path = p(f)
        if os.path.isdir(path):
            for g in os.listdir(path):
                os.remove(os.path.join(path, g))
            os.rmdir(path)
        else:
            os.remove(path)
    os.rmdir(tmp)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
