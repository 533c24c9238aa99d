#!/usr/bin/env python3
"""The families added by issue 30 through the command line and the server.

usage: test_family_cli.py PAGELLM CHAT_FAMILY_TOOL MODEL_TYPE

For one family (config.json's model_type: mixtral, qwen2_moe, qwen3_moe, gemma2, gemma3_text,
phi3), chat_family_tool writes the random model of tests/e2e/test_e2e_families.c in Hugging
Face form with a 512-token vocabulary and tok512's tokenizer.json beside it, and prints its
dense reference's greedy tokens (tests/e2e/dense_ref.c) for a few id prompts; Gemma and Phi-3
models get their own tokenizer.json forms and chat templates (tests/data/gemma_tok, phi3_tok:
tests/oracle/gen_family_tokenizers.mjs) instead of tok512's. Then:
  - `pagellm generate` (a prompts file of token ids, --json) gives those tokens, on cpu;
  - the same model written by `pagellm quantize ... f32` as GGUF gives the same tokens and
    text;
  - `pagellm serve` answers each prompt, alone and as one batch request, streamed and not,
    with generate's text and token counts;
  - Gemma and Phi-3: `generate --messages` queues the ids of the chat template's text as the
    jinja oracle renders it (tests/data/templates/*.expected.json) tokenized with special
    tokens parsed, and replies with the dense reference's tokens for them.
Exit 0 pass, 1 fail.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from server_util import Failure, Server, check, stream_text  # noqa: E402

PROMPTS = [[1, 5, 9, 44, 300, 17], [1, 200, 201], [1] + list(range(30, 70)), [7] * 5]
N_OUT = 40


def run(args, timeout=300):
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    check(p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    check("Sanitizer" not in p.stderr and "runtime error:" not in p.stderr, p.stderr)
    return p.stdout


def generate(pagellm, model, prompts_file, extra=()):
    out = run([pagellm, "generate", "--model", model, "--prompts", prompts_file, "--json",
               "--temperature", "0", "--max-tokens", str(N_OUT), "--ignore-eos",
               "--kv-dtype", "f32", "--backend", "cpu", "--threads", "2"] + list(extra))
    recs = {}
    for line in out.splitlines():
        r = json.loads(line)
        recs[r["index"]] = r
    check(len(recs) == len(PROMPTS), out)
    return recs


# the family's tokenizer form and a conversation of its template's fixture
CHAT = {"gemma2": ("gemma_tok", "gemma-2-2b-it"), "gemma3_text": ("gemma_tok", "gemma-3-1b-it"),
        "phi3": ("phi3_tok", "phi-3-mini-4k-instruct")}


def check_chat(pagellm, tool, family, model, tmp):
    """ generate --messages: the prompt is the template's render (the jinja oracle's) tokenized
    with special tokens parsed, and the reply the dense reference's greedy tokens."""
    fixture = os.path.join(HERE, "..", "data", "templates", CHAT[family][1] + ".expected.json")
    with open(fixture, encoding="utf-8") as f:
        case = next(c for c in json.load(f)["cases"] if c["name"] == "no_system_multi_turn")
    msgs = os.path.join(tmp, "messages.json")
    with open(msgs, "w", encoding="utf-8") as f:
        json.dump(case["messages"], f)
    text = os.path.join(tmp, "render.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write(case["expect"])
    want_prompt = [int(x) for x in run([pagellm, "tokenize", "--model", model, "--file", text,
                                        "--no-bos", "--parse-special"]).strip().split(",")]
    out = run([pagellm, "generate", "--model", model, "--messages", msgs, "--json",
               "--temperature", "0", "--max-tokens", str(N_OUT), "--ignore-eos", "--kv-dtype",
               "f32", "--backend", "cpu", "--threads", "2"])
    r = json.loads(out.splitlines()[-1])
    check(r["prompt_token_ids"] == want_prompt,
          f"{family}: chat prompt {r['prompt_token_ids']}\nthe template's render tokenized "
          f"{want_prompt}")
    want = [int(x) for x in run([tool, "greedy", model, str(N_OUT),
                                 ",".join(map(str, want_prompt))]).split(",")]
    check(r["output_token_ids"] == want, f"{family}: chat reply {r['output_token_ids']}\n"
          f"dense reference {want}")


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    pagellm, tool, family = sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="pagellm-family-cli-") as tmp:
        model = os.path.join(tmp, "model")
        tok = CHAT[family][0] if family in CHAT else "tok512_hf"
        vocab = {"tok512_hf": 512, "gemma_tok": 515, "phi3_tok": 517}[tok]
        run([tool, "family", family, model, "12", os.path.join(HERE, "..", "data", tok),
             str(vocab)])
        if family in CHAT:
            check_chat(pagellm, tool, family, model, tmp)
        want = [[int(x) for x in run([tool, "greedy", model, str(N_OUT),
                                      ",".join(map(str, p))]).split(",")] for p in PROMPTS]
        prompts_file = os.path.join(tmp, "prompts.jsonl")
        with open(prompts_file, "w", encoding="utf-8") as f:
            for p in PROMPTS:
                f.write(json.dumps({"prompt_token_ids": p}) + "\n")
        got = generate(pagellm, model, prompts_file)
        for i, w in enumerate(want):
            check(got[i]["output_token_ids"] == w,
                  f"{family} prompt {i}: generate {got[i]['output_token_ids']}\n"
                  f"dense reference {w}")
        distinct = {t for w in want for t in w}
        check(len(distinct) >= 8, f"{family}: only {len(distinct)} distinct tokens")
        # these tokenizer.json forms (SentencePiece's BPE) have no GGUF form: the file goes
        # without one and generate takes the directory's
        gguf = os.path.join(tmp, "model.gguf")
        run([pagellm, "quantize", model, gguf, "f32", "--no-tokenizer"])
        g = generate(pagellm, gguf, prompts_file,
                     ["--tokenizer", os.path.join(model, "tokenizer.json")])
        for i in range(len(PROMPTS)):
            check(g[i]["output_token_ids"] == want[i] and g[i]["text"] == got[i]["text"],
                  f"{family} prompt {i}: the GGUF gives {g[i]['output_token_ids']}")
        srv = Server(pagellm, ["--model", model, "--kv-dtype", "f32", "--backend", "cpu",
                               "--threads", "2", "--log-interval", "0"])
        try:
            body = {"max_tokens": N_OUT, "temperature": 0, "ignore_eos": True}
            for i, p in enumerate(PROMPTS):
                st, _, v = srv.post("/v1/completions", dict(body, prompt=p))
                check(st == 200, v)
                c = v["choices"][0]
                check(c["text"] == got[i]["text"] and v["usage"]["completion_tokens"] == N_OUT,
                      f"{family} prompt {i}: server {c['text']!r} {v['usage']}, generate "
                      f"{got[i]['text']!r}")
                st, events, done = srv.stream("/v1/completions", dict(body, prompt=p, stream=True))
                texts, _, _ = stream_text(events)
                check(done == 1 and texts.get(0, "") == got[i]["text"], f"stream {i}: {texts}")
            st, _, v = srv.post("/v1/completions", dict(body, prompt=PROMPTS))
            check(st == 200, v)
            for c in v["choices"]:
                check(c["text"] == got[c["index"]]["text"], f"{family} batched {c['index']}")
        finally:
            srv.stop()
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"FAIL: {e}")
        sys.exit(1)
