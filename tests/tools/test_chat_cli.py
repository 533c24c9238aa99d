#!/usr/bin/env python3
"""Tests of `pagellm tokenize`, `detokenize`, `chat` and `generate --messages`, run on the
built binary.

usage: test_chat_cli.py PAGELLM CHAT_FAMILY_TOOL CASE

tokenize_oracle  ids equal the npm oracle's (tests/data/tokenizer_oracle.json) for texts of
                 each tokenizer: BOS rule on and off, special-token text parsed and not, by
                 --text and --file; --json's pieces are the tokenizer.json vocabulary's
detokenize       the oracle's decodes back from the ids (--skip-special too), --ids and --file
                 forms, and tokenize -> detokenize giving the input back byte for byte
messages         a chat rendered with the tokenizer's templates (tools pick tool_use,
                 --no-generation-prompt), JSON values by file or text
errors           bad input names the file or flag: exit 2 (usage) or 1, never a signal
family_NAME      llama3, mistral, qwen2, qwen3 as downloaded (random weights, the real tokenizer
                 and template; tests/e2e/chat_families.h): generate --messages and chat give
                 the dense reference's greedy tokens (chat_family_tool greedy) on the ids
                 tokenize --messages gives, ending on the family's end-of-turn token; chat over
                 stdin gives what generate --messages gives for the same conversation, streamed
                 text included; a prompts-file line with messages the same (and bench's
                 dataset reader counts the same prompt ids)
chat_commands    blank lines, /reset (the same reply as the first turn again), /exit
chat_interrupt   SIGINT stops the reply being streamed; the chat goes on
chat_context     a history near the context's end: replies cut at what is left, said once
chat_terminal    on a pseudo-terminal: line editing (arrow keys), history (up arrow), Ctrl-C
                 while typing, a line ending in a backslash; --multiline-input over a pipe
Exit 0 pass, 1 fail, 77 skip.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

PAGELLM = TOOL = TMP = None
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
MODELS = os.environ.get("PAGELLM_TEST_MODELS")
SYSTEM = "You are a terse assistant."
USER_1 = "Name three colours."
USER_2 = "And three more, please?"
MAX_TOKENS = 24


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def run(args, expect_rc=0, stdin="", timeout=120):
    p = subprocess.run([PAGELLM] + args, capture_output=True, timeout=timeout,
                       input=stdin.encode())
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    check(p.returncode >= 0, f"pagellm {' '.join(args)} died of signal {-p.returncode}\n{err}")
    check("Sanitizer" not in err and "runtime error:" not in err,
          f"pagellm {' '.join(args)}: sanitizer report\n{err}")
    if expect_rc is not None:
        check(p.returncode == expect_rc, f"pagellm {' '.join(args)}: exit {p.returncode}, "
              f"expected {expect_rc}\nstdout:\n{out[:2000]}\nstderr:\n{err[-2000:]}")
    return out, err


def write(name, data):
    path = os.path.join(TMP, name)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(path, mode) as f:
        if isinstance(data, (bytes, str)):
            f.write(data)
        else:
            json.dump(data, f)
    return path


def csv(ids):
    return ",".join(str(i) for i in ids)


def tokenizers():
    """(name, path) of the oracle's tokenizers that are here."""
    out = [(n, os.path.join(DATA, n)) for n in ("tok512_hf", "tok512_meta")]
    if MODELS:
        out += [(n, os.path.join(MODELS, n)) for n in ("llama3", "qwen3")]
    else:
        print("# llama3 and qwen3 skipped: PAGELLM_TEST_MODELS is not set")
    return out


def oracle_cases(name, n_plain=3, n_special=2):
    """The first n_plain cases of a tokenizer, and n_special that differ with special tokens.
    Every case is checked through the C API (tests/tokenizer); here a few show that the
    command line forwards text, flags and ids unchanged (each call loads the tokenizer)."""
    with open(os.path.join(DATA, "tokenizer_oracle.json"), encoding="utf-8") as f:
        cases = [c for c in json.load(f)["cases"] if c["tokenizer"] == name]
    check(cases, f"no oracle cases for {name}")
    return cases[:n_plain] + [c for c in cases[n_plain:] if "ids_plain" in c][:n_special]


def vocab_pieces(path):
    """id -> piece from tokenizer.json: the model's vocabulary and the added tokens."""
    with open(os.path.join(path, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    pieces = {i: p for p, i in tj["model"]["vocab"].items()}
    for t in tj.get("added_tokens", []):
        pieces[t["id"]] = t["content"]
    return pieces


# ------------------------------------------------------------------------------------------
# Tokenizers
# ------------------------------------------------------------------------------------------

def tokenize(tok, case, parse_special, by_file, json_out=False):
    args = ["tokenize", "--tokenizer", tok]
    if by_file:
        args += ["--file", write("text.txt", case["text"].encode("utf-8"))]
    else:
        args += ["--text", case["text"]]
    if not case["add_special"]:
        args.append("--no-bos")
    if parse_special:
        args.append("--parse-special")
    if json_out:
        args.append("--json")
    out, _ = run(args)
    return json.loads(out) if json_out else out


def case_tokenize_oracle():
    n = 0
    for name, tok in tokenizers():
        pieces = vocab_pieces(tok)
        for k, c in enumerate(oracle_cases(name)):
            want_parsed, want_plain = c["ids"], c.get("ids_plain", c["ids"])
            by_file = k % 2 == 1
            out = tokenize(tok, c, False, by_file)
            check(out.endswith("\n") and out.count("\n") == 1, f"{name}: one line: {out!r}")
            got = [int(x) for x in out.strip().split(",")] if out.strip() else []
            check(got == want_plain, f"{name}: {c['text']!r}: ids {got}, oracle {want_plain}")
            js = tokenize(tok, c, True, not by_file, json_out=True)
            check(set(js) == {"ids", "pieces", "text"}, f"{name}: --json keys {sorted(js)}")
            check(js["ids"] == want_parsed,
                  f"{name}: {c['text']!r} --parse-special: {js['ids']}, oracle {want_parsed}")
            check(js["text"] == c["text"], f"{name}: --json text {js['text']!r}")
            check(js["pieces"] == [pieces[i] for i in js["ids"]],
                  f"{name}: pieces {js['pieces']} are not the vocabulary's")
            n += 1
    print(f"# {n} texts")


def case_detokenize():
    for name, tok in tokenizers():
        for c in oracle_cases(name, 2, 1):
            ids = c["ids"]
            if not ids:
                continue
            dec = c.get("decoded", c["text"])
            skip = c.get("decoded_skip", dec)
            out, _ = run(["detokenize", "--tokenizer", tok, "--ids", csv(ids), "--json"])
            js = json.loads(out)
            check(js["text"] == dec and js["ids"] == ids,
                  f"{name}: {ids} decode to {js['text']!r}, oracle {dec!r}")
            out, _ = run(["detokenize", "--tokenizer", tok, "--ids", csv(ids), "--skip-special"])
            check(out == skip + "\n", f"{name}: --skip-special {out!r}, oracle {skip!r}")
        # the --file forms: a JSON array, and ids over several lines
        ids = oracle_cases(name, 1)[0]["ids"]
        for text in (json.dumps(ids), "\n".join(str(i) for i in ids) + "\n"):
            out, _ = run(["detokenize", "--tokenizer", tok, "--file", write("ids.txt", text),
                          "--json"])
            check(json.loads(out)["ids"] == ids, f"{name}: --file {text!r}")
    # a round trip: the text of a file comes back byte for byte
    tok = os.path.join(DATA, "tok512_meta")
    text = "Tom said:\r\n  \"hi!\"\tthen 12345 -- caf\u00e9 \u732b\n\n"
    out, _ = run(["tokenize", "--tokenizer", tok, "--file", write("rt.txt", text.encode()),
                  "--no-bos"])
    out, _ = run(["detokenize", "--tokenizer", os.path.join(tok, "tokenizer.json"),
                  "--ids", out.strip(), "--json"])
    check(json.loads(out)["text"] == text, f"round trip gave {json.loads(out)['text']!r}")


def case_messages():
    # tok512_hf's tokenizer_config.json names two templates: default (the contents joined)
    # and tool_use (the tools as JSON)
    tok = os.path.join(DATA, "tok512_hf")
    msgs = write("m.json", [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Once upon a time <s>"}])
    out, _ = run(["tokenize", "--tokenizer", tok, "--messages", msgs, "--json"])
    js = json.loads(out)
    check(js["text"] == "Be brief.Once upon a time <s>", f"rendered {js['text']!r}")
    want, _ = run(["tokenize", "--tokenizer", tok, "--text", js["text"], "--no-bos",
                   "--parse-special"])
    check(js["ids"] == [int(x) for x in want.strip().split(",")],
          "a chat's ids are not its text's with special tokens parsed and no BOS")
    check(js["ids"][-1] == 1, f"<s> in a chat is not parsed: {js['ids']}")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    for value in (write("tools.json", tools), json.dumps(tools)):
        out, _ = run(["tokenize", "--tokenizer", tok, "--messages", msgs, "--tools", value,
                      "--json"])
        check(json.loads(json.loads(out)["text"]) == tools,
              f"--tools {value[:20]}: rendered {json.loads(out)['text']!r}")
    # the generation prompt: the real Qwen3 template's assistant header
    if MODELS:
        qwen = os.path.join(MODELS, "qwen3")
        out, _ = run(["tokenize", "--tokenizer", qwen, "--messages", msgs, "--json"])
        on = json.loads(out)["text"]
        out, _ = run(["tokenize", "--tokenizer", qwen, "--messages", msgs,
                      "--no-generation-prompt", "--json"])
        off = json.loads(out)["text"]
        check(on == off + "<|im_start|>assistant\n", f"generation prompt: {on!r} vs {off!r}")
        out, _ = run(["tokenize", "--tokenizer", qwen, "--messages", msgs, "--json",
                      "--chat-template-kwargs", '{"enable_thinking": false}'])
        check(json.loads(out)["text"] == on + "<think>\n\n</think>\n\n",
              f"enable_thinking false: {json.loads(out)['text']!r}")
    # --chat-template: a file or the text
    tmpl = write("t.jinja", "{% for m in messages %}<{{ m.role }}>{% endfor %}")
    for value in (tmpl, "{% for m in messages %}<{{ m.role }}>{% endfor %}"):
        out, _ = run(["tokenize", "--tokenizer", tok, "--messages", msgs, "--chat-template",
                      value, "--json"])
        check(json.loads(out)["text"] == "<system><user>", f"--chat-template: {out}")


def case_errors():
    tok = os.path.join(DATA, "tok512_hf")
    msgs = write("m.json", [{"role": "user", "content": "hi"}])
    bad_json = write("bad.json", '[{"role": "user",\n  "content": }]')
    not_list = write("obj.json", {"role": "user"})
    no_role = write("norole.json", [{"content": "x"}])
    cases = [
        (["tokenize", "--tokenizer", "/nonexistent/tok", "--text", "x"], 1,
         ["--tokenizer", "/nonexistent/tok"]),
        (["tokenize", "--tokenizer", tok, "--file", "/nonexistent/in.txt"], 2,
         ["--file", "/nonexistent/in.txt"]),
        (["tokenize", "--tokenizer", tok, "--messages", bad_json], 2,
         [bad_json, "line 2", "column"]),
        (["tokenize", "--tokenizer", tok, "--messages", not_list], 2, [not_list, "array"]),
        (["tokenize", "--tokenizer", tok, "--messages", no_role], 2, [no_role, "message 1", "role"]),
        (["tokenize", "--tokenizer", tok, "--messages", msgs, "--tools", bad_json], 2,
         ["--tools", bad_json, "line 2"]),
        (["tokenize", "--tokenizer", tok, "--messages", msgs, "--tools", "nofile.json"], 2,
         ["--tools", "nofile.json", "no such file"]),
        (["tokenize", "--tokenizer", tok, "--messages", msgs, "--chat-template", "nofile.j2"], 2,
         ["--chat-template", "nofile.j2"]),
        (["tokenize", "--tokenizer", tok, "--messages", msgs, "--chat-template",
          "{% include 'x' %}"], 1, ["include", "line 1"]),
        (["tokenize", "--tokenizer", tok, "--text", "x", "--file", msgs], 2, ["--text", "--file"]),
        (["tokenize", "--tokenizer", tok, "--model", tok, "--text", "x"], 2, ["--tokenizer", "--model"]),
        (["tokenize", "--tokenizer", tok, "--messages", msgs, "--no-bos"], 2, ["--no-bos"]),
        (["tokenize", "--tokenizer", tok, "--text", "x", "--tools", "[]"], 2, ["--messages"]),
        (["tokenize", "--model", "dummy:tiny", "--text", "x"], 1, ["dummy:tiny", "no tokenizer"]),
        (["tokenize", "--tokenizer", tok, "--txt", "x"], 2, ["--txt"]),
        (["detokenize", "--tokenizer", tok, "--ids", "1,2,x"], 2, ["--ids", "id 3", "'x'"]),
        (["detokenize", "--tokenizer", tok, "--ids", "1,99999"], 1, ["99999", "vocabulary"]),
        (["detokenize", "--tokenizer", tok, "--file", "/nonexistent/ids"], 2, ["/nonexistent/ids"]),
        (["detokenize", "--tokenizer", tok, "--ids", " , "], 2, ["--ids", "no ids"]),
        (["generate", "--model", "dummy:tiny", "--messages", bad_json], 2, [bad_json, "line 2"]),
        (["generate", "--model", "dummy:tiny", "--messages", msgs, "--prompt", "x"], 2,
         ["--messages", "--prompt"]),
        (["generate", "--model", "dummy:tiny", "--prompts", write("p.jsonl",
          '{"prompt": "x"}\n{"messages": [{"role": "user", "content": "x"}], "tools": 3}\n')],
         2, ["p.jsonl:2", "tools"]),
        (["generate", "--model", "dummy:tiny", "--prompts", write("q.jsonl",
          '{"prompt": "x", "tools": []}\n')], 2, ["q.jsonl:1", "tools", "messages"]),
        (["chat", "--model", "dummy:tiny"], 1, ["no tokenizer"]),
        (["chat", "--model", "dummy:tiny", "--n", "2"], 2, ["--n"]),
        (["chat"], 2, ["--model"]),
    ]
    if MODELS:
        cases.append((["chat", "--model", os.path.join(MODELS, "stories260K.bin")], 1,
                      ["chat template", "--chat-template"]))
    for args, rc, needles in cases:
        _, err = run(args, expect_rc=rc)
        for n in needles:
            check(n in err, f"pagellm {' '.join(args)}: stderr lacks {n!r}:\n{err}")
    # a refused chat line among good ones: an error record, the others run (exit 1)
    tok512 = os.path.join(MODELS, "tok512.model") if MODELS else None
    if tok512:
        lines = [{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                 {"prompt_token_ids": [1, 5], "max_tokens": 2}]
        path = write("mixed.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
        out, err = run(["generate", "--model", "dummy:tiny", "--tokenizer", tok512, "--prompts",
                        path, "--json"], expect_rc=1)
        recs = sorted((json.loads(l) for l in out.splitlines()), key=lambda r: r["index"])
        check(len(recs) == 2 and "error" in recs[0] and "chat template" in
              recs[0]["error"]["message"] and recs[1]["finish_reason"] == "length",
              f"a chat without a template among good lines: {out}")


# ------------------------------------------------------------------------------------------
# The families
# ------------------------------------------------------------------------------------------

def engine_flags(d):
    return ["--model", d, "--temperature", "0", "--max-tokens", str(MAX_TOKENS), "--kv-dtype",
            "f32", "--block-size", "4", "--max-num-blocks", "256"]


def write_family(name, messages):
    d = os.path.join(TMP, name)
    p = subprocess.run([TOOL, "write", name, d, "21", write("plant.json", messages)],
                       capture_output=True, text=True, timeout=300)
    if p.returncode == 77:
        raise Skip(p.stderr.strip())
    check(p.returncode == 0, f"chat_family_tool write {name}: exit {p.returncode}\n{p.stderr}")
    return d, json.loads(p.stdout)


def dense_reply(d, info, prompt):
    """The reply the engine must give: the dense reference's greedy tokens, cut after the
    first stop id; and whether a stop id ended it."""
    p = subprocess.run([TOOL, "greedy", d, str(MAX_TOKENS), csv(prompt)], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0, f"chat_family_tool greedy: {p.stderr}")
    dense = [int(x) for x in p.stdout.strip().split(",")]
    for i, t in enumerate(dense):
        if t in info["stop_ids"]:
            return dense[:i + 1], True
    return dense, False


def check_record(what, d, info, rec):
    want, stopped = dense_reply(d, info, rec["prompt_token_ids"])
    check(rec["output_token_ids"] == want,
          f"{what}: output {rec['output_token_ids']}, the dense reference {want}")
    check(rec["finish_reason"] == ("stop" if stopped else "length"),
          f"{what}: finish reason {rec['finish_reason']} (stopped: {stopped})")


def tokenize_chat(d, path):
    out, _ = run(["tokenize", "--model", d, "--messages", path, "--json"])
    return json.loads(out)["ids"]


def case_family(name):
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER_1}]
    d, info = write_family(name, first)
    flags = engine_flags(d)
    a = write("a.json", first)
    # the ids of the chat: tokenize --model, the tool's (the C API's), generate's, the same
    check(tokenize_chat(d, a) == info["prompt_ids"], "tokenize --messages differs from the C API")
    out, _ = run(["generate"] + flags + ["--messages", a, "--json"])
    rec = json.loads(out)
    check(rec["prompt_token_ids"] == info["prompt_ids"], f"generate's prompt ids differ")
    check_record("generate --messages", d, info, rec)
    out_ids = rec["output_token_ids"]
    check(rec["finish_reason"] == "stop" and out_ids[-1] == info["eot"] and
          len(out_ids) == info["plant_step"] + 1,
          f"the reply does not end on the end of turn {info['eot']} at step "
          f"{info['plant_step']}: {out_ids}")
    # text mode streams the reply alone
    out, _ = run(["generate"] + flags + ["--messages", a])
    check(out == rec["text"] + "\n", f"generate --messages text mode: {out!r} vs {rec['text']!r}")

    # chat over stdin: turn 1 is that reply; turn 2 is generate's reply to the conversation
    stdin = USER_1 + "\n" + USER_2 + "\n"
    out, _ = run(["chat"] + flags + ["--system", SYSTEM, "--json"], stdin=stdin)
    recs = [json.loads(l) for l in out.splitlines()]
    check(len(recs) == 2 and [r["turn"] for r in recs] == [0, 1], f"chat --json: {out}")
    for k in ("prompt_token_ids", "output_token_ids", "text", "finish_reason"):
        check(recs[0][k] == rec[k], f"chat turn 1 {k}: {recs[0][k]!r} vs generate {rec[k]!r}")
    second = first + [{"role": "assistant", "content": recs[0]["text"]},
                      {"role": "user", "content": USER_2}]
    b = write("b.json", second)
    check(tokenize_chat(d, b) == recs[1]["prompt_token_ids"], "chat turn 2's prompt ids")
    out, _ = run(["generate"] + flags + ["--messages", b, "--json"])
    rec2 = json.loads(out)
    for k in ("prompt_token_ids", "output_token_ids", "text", "finish_reason"):
        check(recs[1][k] == rec2[k], f"chat turn 2 {k}: {recs[1][k]!r} vs generate {rec2[k]!r}")
    check_record("chat turn 2", d, info, recs[1])
    # the same chat in text mode: each reply streamed, then a newline
    out, _ = run(["chat"] + flags + ["--system", SYSTEM], stdin=stdin)
    check(out == recs[0]["text"] + "\n" + recs[1]["text"] + "\n",
          f"chat text mode printed {out!r}")
    # a prompts file with chat lines (and tools, which these templates take or ignore)
    tools = [{"type": "function", "function": {"name": "get_colour", "description": "a colour",
                                               "parameters": {"type": "object", "properties": {}}}}]
    lines = [{"messages": first}, {"messages": second, "max_tokens": 5},
             {"messages": first, "tools": tools}]
    out, _ = run(["generate"] + flags + ["--prompts", write("chats.jsonl", "\n".join(
        json.dumps(x) for x in lines) + "\n"), "--json"])
    by_index = {r["index"]: r for r in map(json.loads, out.splitlines())}
    check(by_index[0]["output_token_ids"] == rec["output_token_ids"], "prompts file line 1")
    check(by_index[1]["output_token_ids"] == rec2["output_token_ids"][:5], "prompts file line 2")
    out, _ = run(["generate"] + flags + ["--messages", a, "--tools", write("tools.json", tools),
                                         "--json"])
    with_tools = json.loads(out)
    check(by_index[2]["prompt_token_ids"] == with_tools["prompt_token_ids"] and
          by_index[2]["output_token_ids"] == with_tools["output_token_ids"],
          "a prompts-file line's tools differ from --tools")
    check_record("--tools", d, info, with_tools)
    # bench takes the same file: its chats are the prompts generate submitted
    out, _ = run(["bench", "throughput", "--model", d, "--dataset",
                  os.path.join(TMP, "chats.jsonl"), "--output-len", "2"])
    n_prompt = sum(len(by_index[i]["prompt_token_ids"]) for i in range(3))
    check(f"Total num prompt tokens: {n_prompt}\n" in out,
          f"bench on the chats: {n_prompt} prompt tokens expected:\n{out}")
    print(f"# {name}: turn 1 {len(rec['output_token_ids'])} tokens (end of turn), turn 2 "
          f"{len(rec2['output_token_ids'])} ({rec2['finish_reason']}), tools prompt "
          f"{len(with_tools['prompt_token_ids'])} ids vs {len(rec['prompt_token_ids'])}")


def case_chat_commands():
    d, info = write_family("mistral", [{"role": "user", "content": USER_1}])
    flags = engine_flags(d)
    stdin = f"{USER_1}\n\n   \n{USER_2}\n/reset\n{USER_1}\n/exit\n{USER_2}\n"
    out, _ = run(["chat"] + flags + ["--json"], stdin=stdin)
    recs = [json.loads(l) for l in out.splitlines()]
    check(len(recs) == 3, f"3 replies expected (blank lines skipped, nothing after /exit): {out}")
    check(recs[2]["prompt_token_ids"] == recs[0]["prompt_token_ids"] and
          recs[2]["output_token_ids"] == recs[0]["output_token_ids"],
          "after /reset the same message did not give the first reply")
    check(len(recs[1]["prompt_token_ids"]) > len(recs[0]["prompt_token_ids"]),
          "turn 2 does not hold turn 1")
    # a conversation too long for the model: the turn is refused, the chat goes on (exit 1)
    out, err = run(["chat", "--model", d, "--max-model-len", "40", "--max-tokens", "4",
                    "--temperature", "0", "--json"], stdin="x " * 30 + "\nhi\n", expect_rc=1)
    check("PL_ERR_TOO_LONG" in err and "/reset" in err, f"too long: {err}")
    check(len(out.splitlines()) == 1, f"the short message after a refused one: {out}")


def case_chat_interrupt():
    d, info = write_family("qwen3", [{"role": "user", "content": USER_1}])
    args = [PAGELLM, "chat", "--model", d, "--backend", "ref", "--temperature", "0",
            "--max-tokens", "400", "--ignore-eos"]
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdin.write((USER_1 + "\n").encode())
    p.stdin.flush()
    ready, _, _ = select.select([p.stdout], [], [], 60)
    check(ready, "no reply streamed within 60 s")
    first = os.read(p.stdout.fileno(), 4096)
    p.send_signal(signal.SIGINT)
    time.sleep(0.2)
    out, err = p.communicate(input=b"/exit\n", timeout=120)
    out, err = (first + out).decode("utf-8", "replace"), err.decode("utf-8", "replace")
    check(p.returncode == 0, f"exit {p.returncode} after Ctrl-C\n{err}")
    check("reply stopped" in err, f"stderr lacks 'reply stopped':\n{err}")
    # the whole reply (400 tokens) would be several times longer
    full, _ = run(["generate", "--model", d, "--temperature", "0", "--max-tokens", "400",
                   "--ignore-eos", "--messages", write("u.json", [{"role": "user",
                                                                  "content": USER_1}])])
    check(out.endswith("\n") and full.startswith(out[:-1]) and len(out) < len(full),
          f"the stopped reply is not a cut of the whole one ({len(out)} vs {len(full)} chars)")


def prompt_ids_of(flags, content):
    """The prompt ids of a one-message chat, from `generate --messages` (the path the chat's
    line reading does not touch)."""
    out, _ = run(["generate"] + flags + ["--json", "--max-tokens", "1", "--messages",
                                         write("one.json", [{"role": "user",
                                                             "content": content}])])
    return json.loads(out.splitlines()[0])["prompt_token_ids"]


class Pty:
    """`pagellm chat` on a pseudo-terminal: keys in, what the terminal shows out."""

    def __init__(self, args):
        import pty
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.environ["HOME"] = TMP  # no ~/.editrc of the user's
            os.execv(PAGELLM, [PAGELLM] + args)
        self.seen = b""

    def read_until(self, pred, timeout=60):
        end = time.time() + timeout
        while not pred(self.seen.decode("utf-8", "replace")):
            r, _, _ = select.select([self.fd], [], [], max(0.0, end - time.time()))
            check(r, f"the terminal showed, within {timeout} s:\n{self.seen[-2000:]!r}")
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                chunk = b""
            check(chunk, f"the chat ended early; the terminal showed:\n{self.seen[-2000:]!r}")
            self.seen += chunk
        return self.seen.decode("utf-8", "replace")

    def records(self):
        return [json.loads(l.strip("\r").lstrip("> ")) for l in
                self.seen.decode("utf-8", "replace").split("\n") if "{" in l and "turn" in l]

    def prompts(self):
        return self.seen.count(b"> ")

    def send(self, keys, wait_prompt=True):
        n = self.prompts()
        os.write(self.fd, keys)
        if wait_prompt:
            self.read_until(lambda t: t.count("> ") > n)

    def finish(self):
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        return os.waitstatus_to_exitcode(status)


def case_chat_context():
    """Once the history leaves less than --max-tokens of the context the reply is cut at what
    is left, said once, instead of every turn failing; without --max-tokens a reply may use
    all that is left."""
    d, info = write_family("mistral", [{"role": "user", "content": USER_1}])
    flags = ["--model", d, "--temperature", "0", "--kv-dtype", "f32", "--ignore-eos",
             "--max-model-len", "96", "--json"]
    out, err = run(["chat"] + flags + ["--max-tokens", "24"], stdin=f"{USER_1}\n" * 4,
                   expect_rc=None)
    recs = [json.loads(l) for l in out.splitlines()]
    check(len(recs) >= 2, f"replies stopped before the context was full: {out}\n{err}")
    for r in recs:
        n = len(r["prompt_token_ids"]) + len(r["output_token_ids"])
        check(n <= 96, f"turn {r['turn']}: {n} tokens in a 96-token context")
    check(len(recs[0]["output_token_ids"]) == 24, "the first reply was cut")
    cut = [r for r in recs if len(r["output_token_ids"]) < 24]
    check(cut and len(cut[0]["prompt_token_ids"]) + len(cut[0]["output_token_ids"]) == 96,
          f"no reply was cut at the context's end: {[len(r['output_token_ids']) for r in recs]}")
    check(err.count("replies are cut at what is left") == 1, f"said {err.count('cut')}x:\n{err}")
    check("leaves no room for output in --max-model-len (96" in err or len(recs) == 4,
          f"a prompt filling the context: {err}")
    # no --max-tokens: the first reply fills what the context leaves (EOS is ignored)
    out, _ = run(["chat"] + flags, stdin=f"{USER_1}\n")
    r = json.loads(out.splitlines()[0])
    check(len(r["prompt_token_ids"]) + len(r["output_token_ids"]) == 96,
          f"without --max-tokens the reply got {len(r['output_token_ids'])} tokens")


def case_chat_terminal():
    """Line editing, history, Ctrl-C while typing and continued lines on a terminal (libedit);
    --multiline-input over a pipe."""
    d, info = write_family("mistral", [{"role": "user", "content": USER_1}])
    flags = engine_flags(d)
    want = prompt_ids_of(flags, USER_1)
    t = Pty(["chat"] + flags + ["--json"])
    t.read_until(lambda s: "> " in s)
    # "Name three colurs.", the cursor moved back four (left arrow) and "o" typed
    typo = USER_1.replace("colours", "colurs")
    t.send(typo.encode() + b"\x1b[D" * 4 + b"o\r")
    t.send(b"garbage, then Ctrl-C", wait_prompt=False)
    time.sleep(0.3)
    t.send(b"\x03")
    t.send(b"/reset\r")
    t.send(b"\x1b[A\r")  # the up arrow: the last message sent, again
    t.send(b"/reset\r")
    t.send(b"first line\\\rsecond line\r")
    os.write(t.fd, b"/exit\r")
    try:
        t.read_until(lambda s: False, timeout=30)
    except Failure:
        pass  # the terminal closes when the chat exits
    rc = t.finish()
    recs = t.records()
    check(rc == 0, f"exit {rc}; the terminal showed:\n{t.seen[-2000:]!r}")
    check(len(recs) == 3, f"3 replies expected (Ctrl-C drops the line typed): {recs}")
    check(recs[0]["prompt_token_ids"] == want, "the edited line is not the message intended")
    check(recs[1]["prompt_token_ids"] == want, "the up arrow did not give the last message")
    check(recs[2]["prompt_token_ids"] == prompt_ids_of(flags, "first line\nsecond line"),
          "a line ending in \\ did not go on to the next")
    # --multiline-input over a pipe: lines until an empty one are one message
    out, _ = run(["chat"] + flags + ["--json", "--multiline-input"],
                 stdin="first line\nsecond line\n\n/exit\n")
    recs = [json.loads(l) for l in out.splitlines()]
    check(len(recs) == 1 and recs[0]["prompt_token_ids"] ==
          prompt_ids_of(flags, "first line\nsecond line"), f"--multiline-input: {out}")


def main():
    global PAGELLM, TOOL, TMP
    if len(sys.argv) != 4:
        sys.exit("usage: test_chat_cli.py PAGELLM CHAT_FAMILY_TOOL CASE")
    PAGELLM, TOOL, case = sys.argv[1:]
    cases = {"tokenize_oracle": case_tokenize_oracle, "detokenize": case_detokenize,
             "messages": case_messages, "errors": case_errors,
             "chat_commands": case_chat_commands, "chat_interrupt": case_chat_interrupt,
             "chat_terminal": case_chat_terminal, "chat_context": case_chat_context}
    for fam in ("llama3", "mistral", "qwen2", "qwen3"):
        cases["family_" + fam] = lambda fam=fam: case_family(fam)
    if case not in cases:
        sys.exit(f"unknown case {case}")
    with tempfile.TemporaryDirectory(prefix="pagellm-chat-cli-") as tmp:
        TMP = tmp
        try:
            cases[case]()
        except Skip as e:
            print(f"SKIP: {e}")
            return 77
        except Failure as e:
            print(f"FAIL {case}: {e}")
            return 1
    print(f"PASS {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
