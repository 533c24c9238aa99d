#!/usr/bin/env python3
"""The command line refuses bad input: a non-zero exit and a message on stderr naming the
flag, file or line, never a crash (a signal) and never exit 0.

Usage: test_cli.py PATH/TO/pagellm   (run by meson in suite e2e)

Cases: truncated and hostile model files, a missing tokenizer, invalid JSONL lines, unknown
flags and bad flag values, missing files, out-of-vocabulary token ids, a memory limit the model
does not fit. One valid run makes sure the refusals are not the command failing for everyone.
Also the output that is not a refusal: `generate --json` (one object per completion as it
finishes, naming its prompt, with the fields asked for), a refused line among good ones (an
error record, the others run), text mode's ids without a tokenizer, `--prompts -`, SIGINT
mid-run, and, with PAGELLM_TEST_MODELS, the README's stories260K command.
Prints TAP-like lines and a closing "N passed, N failed".
"""
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile

EXE = sys.argv[1]
passed = failed = 0


def run(args, timeout=60, stdin=None):
    p = subprocess.run([EXE] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, input=stdin.encode() if stdin is not None else None)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def report(name, problems, args, err):
    global passed, failed
    if problems:
        failed += 1
        print(f"not ok - {name}: {'; '.join(problems)}\n  args: {args}\n  stderr: {err[-600:]}")
    else:
        passed += 1
        print(f"ok - {name}")


def check(name, args, want_rc, needles, more=None, stdin=None):
    """want_rc: an exit code, or None for 'any non-zero exit that is not a signal'.
    more: optional function (stdout, stderr) -> list of further problems.
    stdin: text for the command's standard input (default: none, an empty pipe)."""
    rc, out, err = run(args, stdin=stdin if stdin is not None else "")
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
    """generate --json: one JSON object per completion, one per line, in the order they finish,
    each naming its prompt by index (from 0) and line, with prompt_token_ids as given,
    output_token_ids of max_tokens ints (ignore_eos), finish_reason "length", the request id,
    usage that counts those ids and timings in order (queue <= TTFT <= total). A text prompt
    joins when the shared tokenizer is there."""
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
    records = {}
    for n, line in enumerate(lines):
        try:
            o = json.loads(line)
        except ValueError as e:
            problems.append(f"output line {n + 1} is not JSON ({e}): {line[:80]!r}")
            continue
        if not isinstance(o, dict) or not isinstance(o.get("index"), int):
            problems.append(f"output line {n + 1} is not a JSON object with an index")
            continue
        if o["index"] in records:
            problems.append(f"index {o['index']} printed twice")
        records[o["index"]] = o
    if sorted(records) != list(range(len(prompts))):
        problems.append(f"indices {sorted(records)}, want 0..{len(prompts) - 1}")
    ids = set()
    for i, q in enumerate(prompts):
        o = records.get(i)
        if o is None:
            continue
        if o.get("line") != i + 1 or o.get("sample") != 0:
            problems.append(f"prompt {i}: line {o.get('line')!r} sample {o.get('sample')!r}, "
                            f"want line {i + 1} sample 0")
        if not (isinstance(o.get("id"), int) and o["id"] > 0) or o["id"] in ids:
            problems.append(f"prompt {i}: request id {o.get('id')!r} missing or repeated")
        ids.add(o.get("id"))
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
        u, t = o.get("usage") or {}, o.get("timings") or {}
        n_p, n_o = len(got_p or []), len(out_ids or [])
        if (u.get("prompt_tokens"), u.get("completion_tokens"), u.get("total_tokens")) != \
                (n_p, n_o, n_p + n_o):
            problems.append(f"line {i + 1}: usage {u} does not count the ids ({n_p}, {n_o})")
        if not (isinstance(t.get("queue_s"), (int, float)) and
                0 <= t["queue_s"] <= t.get("ttft_s", -1) <= t.get("total_s", -1)):
            problems.append(f"line {i + 1}: timings {t} not 0 <= queue <= ttft <= total")
    report("generate --json: one object per completion, each naming its prompt", problems,
           args, err)


def json_records(out, problems):
    """The JSON objects of generate --json's output, by (index, sample)."""
    recs = {}
    for n, line in enumerate(out.splitlines()):
        try:
            o = json.loads(line)
        except ValueError as e:
            problems.append(f"output line {n + 1} is not JSON ({e}): {line[:80]!r}")
            continue
        recs[(o.get("index"), o.get("sample", 0))] = o
    return recs


MIXED = ('{"prompt_token_ids": [1, 5, 9], "max_tokens": 3, "ignore_eos": true}\n'
         '\n'
         '{"prompt_token_ids": [1, 2], "max_tokens": 100000}\n'
         '{"prompt_token_ids": [1, 7], "max_tokens": 2, "n": 2, "ignore_eos": true}\n')


def check_refused_line(tmp):
    """One prompt the engine refuses (too long) gets a record with its error; the others run
    and are printed; the exit status is 1. Text and JSON number prompts the same way."""
    path = os.path.join(tmp, "mixed.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write(MIXED)
    args = ["generate", "--model", "dummy:tiny", "--temperature", "0", "--prompts", path]
    rc, out, err = run(args + ["--json"])
    problems = [] if rc == 1 else [f"exit {rc}, want 1"]
    recs = json_records(out, problems)
    want = {(0, 0): 3, (2, 0): 2, (2, 1): 2}
    if sorted(recs) != sorted(list(want) + [(1, 0)]):
        problems.append(f"records {sorted(recs)}, want {sorted(list(want) + [(1, 0)])}")
    bad = recs.get((1, 0), {})
    if bad.get("line") != 3 or (bad.get("error") or {}).get("status") != "PL_ERR_TOO_LONG" \
            or "max_model_len" not in (bad.get("error") or {}).get("message", ""):
        problems.append(f"the refused prompt's record: {bad}")
    for key, n in want.items():
        o = recs.get(key, {})
        if len(o.get("output_token_ids", [])) != n or o.get("finish_reason") != "length":
            problems.append(f"prompt {key}: {o.get('output_token_ids')} "
                            f"{o.get('finish_reason')}, want {n} ids, length")
    if "prompt 1 (line 3)" not in err or "1 of 3 prompts refused" not in err:
        problems.append("stderr does not name the refused prompt and count it")
    report("prompts file: a refused line gets an error record, the others run", problems,
           args + ["--json"], err)

    # text mode, no tokenizer: ids instead of blank text, under the same numbers
    rc, out, err = run(args)
    problems = [] if rc == 1 else [f"exit {rc}, want 1"]
    blocks = re.split(r"^--- ", out, flags=re.M)[1:]
    got = {}
    for b in blocks:
        m = re.match(r"prompt (\d+)(?: sample (\d+))? \(line (\d+)\) \[(\w+)\]\n", b)
        if not m:
            problems.append(f"bad record header: {b[:60]!r}")
            continue
        key = (int(m.group(1)), int(m.group(2) or 0))
        got[key] = (int(m.group(3)), m.group(4), b[m.end():])
    for key, o in recs.items():
        if key not in got:
            problems.append(f"JSON has {key}, text mode does not")
            continue
        line, what, body = got[key]
        if line != o.get("line"):
            problems.append(f"{key}: text says line {line}, JSON {o.get('line')}")
        if "error" in o:
            if what != "refused" or o["error"]["message"] not in body:
                problems.append(f"{key}: text record {what} {body!r} lacks the error")
            continue
        ids = re.search(r"^output ids:((?: \d+)*)$", body, re.M)
        pids = re.search(r"^prompt ids:((?: \d+)*)$", body, re.M)
        if what != o["finish_reason"] or not ids or not pids or \
                [int(x) for x in ids.group(1).split()] != o["output_token_ids"] or \
                [int(x) for x in pids.group(1).split()] != o["prompt_token_ids"]:
            problems.append(f"{key}: text record {what} {body!r} does not show the ids "
                            f"{o['prompt_token_ids']} -> {o['output_token_ids']}")
    if len(got) != len(recs):
        problems.append(f"text mode printed {len(got)} records, JSON {len(recs)}")
    report("text mode without a tokenizer prints ids, numbered as in JSON", problems, args, err)

    # the same file on standard input
    rc, out2, err = run(args[:-2] + ["--json", "--prompts", "-"], stdin=MIXED)
    problems = [] if rc == 1 else [f"exit {rc}, want 1"]
    recs2 = json_records(out2, problems)
    strip = lambda r: {k: (v.get("output_token_ids"), v.get("error")) for k, v in r.items()}
    if strip(recs2) != strip(recs):
        problems.append("--prompts - gave other records than the file")
    report("--prompts - reads standard input", problems, args, err)


def check_interrupt(tmp):
    """Records are printed as requests finish, and SIGINT stops cleanly: the requests still
    running or waiting are aborted and printed with finish reason abort, the exit status is
    130. One short request finishes early; eleven long ones (4 at a time) outlast it."""
    path = os.path.join(tmp, "long.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i in range(12):
            f.write(json.dumps({"prompt_token_ids": [1, 5 + i], "ignore_eos": True,
                                "max_tokens": 8 if i == 0 else 200}) + "\n")
    args = ["generate", "--model", "dummy:stories15m", "--threads", "1", "--max-batch-size",
            "4", "--json", "--prompts", path]
    proc = subprocess.Popen([EXE] + args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    problems = []
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    first = proc.stdout.readline() if ready else b""
    if not first:
        problems.append("no record within 120 s")
    elif proc.poll() is not None:
        problems.append("the first record came only when the command had ended")
    proc.send_signal(signal.SIGINT)
    try:
        rest, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, err = proc.communicate()
        problems.append("did not stop within 120 s of SIGINT")
    err = err.decode("utf-8", "replace")
    if proc.returncode != 130:
        problems.append(f"exit {proc.returncode}, want 130")
    recs = json_records((first + rest).decode("utf-8", "replace"), problems)
    if sorted(i for i, _ in recs) != list(range(12)):
        problems.append(f"records for {sorted(i for i, _ in recs)}, want one for each of 12")
    if recs.get((0, 0), {}).get("finish_reason") != "length" or \
            len(recs.get((0, 0), {}).get("output_token_ids", [])) != 8:
        problems.append(f"the short request did not finish whole: {recs.get((0, 0))}")
    aborted = [o for o in recs.values() if o.get("finish_reason") == "abort"]
    if not aborted or any(len(o["output_token_ids"]) >= 200 for o in aborted):
        problems.append(f"{len(aborted)} aborted records, or one with all 200 tokens")
    if "interrupted" not in err:
        problems.append("stderr does not say it was interrupted")
    report("SIGINT aborts what runs, prints everything, exits 130", problems, args, err)



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
        ("blank file", "blank.jsonl", "\n   \n", "blank.jsonl: no prompts (2 blank lines)"),
        ("empty file", "empty.jsonl", "", "empty.jsonl: no prompts (the file is empty)"),
        ("unknown key", "typo.jsonl",
         '{"prompt_token_ids": [1]}\n{"prompt_token_ids": [1], "temprature": 0}\n',
         'typo.jsonl:2: unknown key "temprature" (did you mean \'temperature\'?)'),
        ("unknown key, nothing near", "key.jsonl", '\n{"prompt": "a", "colour": "red"}\n',
         'key.jsonl:2: unknown key "colour" (not prompt, prompt_token_ids,'),
        ("min_tokens above max_tokens", "minmax.jsonl",
         '{"prompt_token_ids": [1], "max_tokens": 2, "min_tokens": 5}\n', "minmax.jsonl:1: "),
        ("a sampling field beyond the old list", "lp.jsonl",
         '{"prompt_token_ids": [1], "logprobs": 99}\n', "lp.jsonl:1: logprobs = 99"),
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
                                    p("none.jsonl")], 2,
          [p("none.jsonl") + ": cannot open: No such file or directory"])
    check("prompts file: a directory", ["generate", "--model", "dummy:tiny", "--prompts", tmp],
          None, [tmp + ": cannot read: Is a directory"])
    check("prompts file: on standard input, refused", ["generate", "--model", "dummy:tiny",
          "--prompts", "-"], 2, ["<stdin>:1: prompt_token_ids: is empty"],
          stdin='{"prompt_token_ids": []}\n')
    # valid JSON, values the engine refuses: named with the prompt's number
    check("prompts file: id outside the vocabulary", ["generate", "--model", "dummy:tiny",
          "--prompts", jsonl("oov.jsonl", '{"prompt_token_ids": [1]}\n'
                                          '{"prompt_token_ids": [1, 99999]}\n')],
          1, ["prompt 1 (line 2)", "vocabulary"])
    # a sampling value out of range is the file's fault: refused while reading, with its line
    check("prompts file: sampling value refused", ["generate", "--model", "dummy:tiny",
          "--prompts", jsonl("topp.jsonl", '{"prompt_token_ids": [1], "top_p": 0}\n')],
          2, ["topp.jsonl:1: top_p = 0: must be in (0, 1]"])

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
          ["--long-prefill-threshold = 10", "chunked prefill", "--enable-chunked-prefill"])
    check("max-num-seqs alone lowers the batch", ["generate", "-m", "dummy:tiny", "--max-tokens", "2",
          "--max-num-seqs", "4", "--temperature", "0"] + ids, 0, [])
    check("block size not a power of two", ["generate", "--model", "dummy:tiny",
                                            "--block-size", "24"] + ids, None, ["block"])
    check("max-model-len beyond the model", ["generate", "--model", "dummy:tiny",
                                             "--max-model-len", "100000"] + ids, None,
          ["--max-model-len = 100000"])
    check("prompt id outside the vocabulary", ["generate", "--model", "dummy:tiny",
                                               "--prompt-ids", "1,512"], 1, ["vocabulary"])
    check("request longer than max_model_len", ["generate", "--model", "dummy:tiny",
                                                "--max-tokens", "1000"] + ids, 1,
          ["--max-tokens (1000) exceeds --max-model-len"])

    # the memory limit: weights that do not fit are refused with both numbers (64K = 65536)
    check("memory limit below the weights", ["generate", "--model", "dummy:tiny",
                                             "--memory-limit", "64K"] + ids, 1, ["dummy:tiny"],
          weights_over_limit(65536))
    check("explicit KV pool beyond the memory limit", ["generate", "--model", "dummy:tiny",
          "--memory-limit", "16MiB", "--max-num-blocks", "100000"] + ids, 1,
          ["--memory-limit = 16777216", "--max-num-blocks = 100000", "weights", "workspace"])
    check("memory limit the model fits", ["generate", "--model", "dummy:tiny", "--memory-limit",
                                          "256M", "--max-tokens", "3", "--temperature", "0",
                                          "--json"] + ids, 0, [])

    models = os.environ.get("PAGELLM_TEST_MODELS")
    check_json_output(tmp, models)
    check_refused_line(tmp)
    check_interrupt(tmp)

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
