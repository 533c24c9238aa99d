#!/usr/bin/env python3
"""Tests of `pagellm serve` over real HTTP on 127.0.0.1 (the standard library's http.client and
raw sockets as the clients).

usage: test_server.py PAGELLM CASE

Each CASE starts its own server on a free port, talks to it, stops it with SIGTERM (exit 0
expected, no sanitizer report in its log) and checks what a client relies on: status codes,
OpenAI's shapes, greedy text equal to `pagellm generate`, streams whose deltas join to the
whole response's text and end exactly once, counters in /metrics that add up, the KV cache
free again afterwards. Cases on stories260K skip (exit 77) without PAGELLM_TEST_MODELS; the
slow-engine cases use dummy:stories15m on the reference backend (no files), where one token
takes tens of milliseconds, so a request is still running when the test acts on it.
Exit 0 pass, 1 fail, 77 skip.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import (Failure, Server, check, models_dir, raw_http, stream_text,  # noqa: E402
                         wait_for)

PAGELLM = None
HERE = os.path.dirname(os.path.abspath(__file__))
SLOW = ["--model", "dummy:stories15m", "--backend", "ref", "--threads", "1"]


class Skip(Exception):
    pass


def stories_args(extra=(), serve=True):
    d = models_dir()
    if not d:
        raise Skip("PAGELLM_TEST_MODELS unset: no stories260K")
    return (["--model", os.path.join(d, "stories260K.bin"), "--kv-dtype", "f32", "--threads", "1"]
            + (["--log-interval", "0"] if serve else []) + list(extra))


def completion(srv, body, **kw):
    status, h, v = srv.post("/v1/completions", body, **kw)
    check(status == 200, f"/v1/completions {body}: {status} {v}")
    return v


def idle_and_free(srv, timeout=20):
    """Waits until the engine holds nothing; returns the metrics then."""
    def quiet():
        m = srv.metrics()
        ok = (m["pagellm:num_requests_running"] == 0 and m["pagellm:num_requests_waiting"] == 0
              and m["pagellm:kv_cache_blocks_free"] == m["pagellm:kv_cache_blocks_total"])
        return m if ok else None
    return wait_for(quiet, timeout, "0 running, 0 waiting and every KV block free")


def successes(m):
    return {k.split("finished_reason=")[1].rstrip("}"): v for k, v in m.items()
            if k.startswith("pagellm:request_success_total")}


# ------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------

def case_api():
    srv = Server(PAGELLM, stories_args())
    try:
        model = stories_args()[1]
        st, _, v = srv.get("/v1/models")
        check(st == 200 and v["object"] == "list" and len(v["data"]) == 1, f"{st} {v}")
        check(v["data"][0]["id"] == model and v["data"][0]["max_model_len"] == 512, v)
        check(v["data"][0]["vocab_size"] == 512, f"the vocabulary size is reported: {v}")
        version = subprocess.run([PAGELLM, "version"], capture_output=True, text=True).stdout
        st, _, v = srv.get("/version")
        check(st == 200 and "pagellm " + v["version"] == version.splitlines()[0],
              f"{v} vs {version}")
        st, _, v = srv.get("/health")
        check(st == 200 and v["status"] == "ok" and v["running"] == 0, v)

        prompt = "Once upon a time"
        st, _, tok = srv.post("/tokenize", {"prompt": prompt, "return_token_strs": True})
        check(st == 200 and tok["count"] == len(tok["tokens"]) and tok["max_model_len"] == 512, tok)
        check("".join(tok["token_strs"]).replace("\u2581", " ") == "<s> " + prompt, tok)
        st, _, de = srv.post("/detokenize", {"tokens": tok["tokens"]})
        check(st == 200 and de["prompt"] == prompt, de)

        whole = completion(srv, {"prompt": prompt, "max_tokens": 20, "temperature": 0})
        check(whole["object"] == "text_completion" and whole["id"].startswith("cmpl-"), whole)
        check(whole["model"] == model and len(whole["choices"]) == 1, whole)
        c = whole["choices"][0]
        check(c["index"] == 0 and c["finish_reason"] == "length" and c["logprobs"] is None, c)
        check(whole["usage"] == {"prompt_tokens": tok["count"], "completion_tokens": 20,
                                 "total_tokens": tok["count"] + 20,
                                 "prompt_tokens_details": {"cached_tokens": 0}}, whole["usage"])

        st, events, done = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": 20,
                                      "temperature": 0, "stream": True,
                                      "stream_options": {"include_usage": True}})
        texts, fins, usage = stream_text(events)
        check(done == 1, f"{done} [DONE]")
        check(texts == {0: c["text"]}, f"stream {texts!r} vs whole {c['text']!r}")
        check(fins == {0: ["length"]}, fins)
        check(usage["completion_tokens"] == 20 and usage["prompt_tokens"] == tok["count"], usage)
        check(all(e["usage"] is None for e in events[:-1]), "usage: null in every other chunk")
        check(all(e["id"] == events[0]["id"] for e in events), "one id per stream")
        st, events, done = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": 5,
                                      "stream": True})
        check(done == 1 and all("usage" not in e for e in events), "no usage unless asked")

        # a stop string: cut from the text, never streamed, finish "stop"
        whole = completion(srv, {"prompt": prompt, "max_tokens": 60, "temperature": 0, "stop": ["."]})
        c = whole["choices"][0]
        check(c["finish_reason"] == "stop" and "." not in c["text"] and c["text"], c)
        st, events, done = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": 60,
                                      "temperature": 0, "stop": ".", "stream": True})
        texts, fins, _ = stream_text(events)
        check(texts == {0: c["text"]} and fins == {0: ["stop"]}, f"{texts} {fins}")

        # n > 1 with a seed: the same answer twice; a batch of prompts: prompt-major choices
        body = {"prompt": prompt, "max_tokens": 12, "temperature": 0.9, "seed": 7, "n": 3}
        a, b = completion(srv, body), completion(srv, body)
        check([x["index"] for x in a["choices"]] == [0, 1, 2], a)
        check([x["text"] for x in a["choices"]] == [x["text"] for x in b["choices"]], "seeded")
        check(a["usage"]["prompt_tokens"] == tok["count"], "the prompt counts once whatever n")
        check(a["usage"]["completion_tokens"] == 36, a["usage"])
        prompts = ["Lily", "Tom had a"]
        batch = completion(srv, {"prompt": prompts, "max_tokens": 8, "temperature": 0, "n": 2})
        check(len(batch["choices"]) == 4, batch)
        for i, p in enumerate(prompts):
            one = completion(srv, {"prompt": p, "max_tokens": 8, "temperature": 0})
            for k in range(2):
                check(batch["choices"][2 * i + k]["text"] == one["choices"][0]["text"],
                      f"choice {2 * i + k} answers prompt {i}")
        ids = completion(srv, {"prompt": tok["tokens"], "max_tokens": 20, "temperature": 0})
        greedy20 = completion(srv, {"prompt": prompt, "max_tokens": 20, "temperature": 0})
        check(ids["choices"][0]["text"] == greedy20["choices"][0]["text"], "ids = their text")

        # logprobs: the legacy shape; greedy picks the most likely
        lp = completion(srv, {"prompt": prompt, "max_tokens": 10, "temperature": 0, "logprobs": 3})
        l = lp["choices"][0]["logprobs"]
        check(len(l["tokens"]) == 10 == len(l["token_logprobs"]) == len(l["top_logprobs"]) ==
              len(l["text_offset"]), l)
        check("".join(l["tokens"]) == lp["choices"][0]["text"], f"{l['tokens']} vs text")
        for t, x, top in zip(l["tokens"], l["token_logprobs"], l["top_logprobs"]):
            check(x <= 0 and len(top) <= 3 and abs(max(top.values()) - x) < 1e-6 and t in top,
                  f"{t} {x} {top}")
        check(l["text_offset"] == sorted(l["text_offset"]), l["text_offset"])
        st, events, _ = srv.stream("/v1/completions", {"prompt": prompt, "max_tokens": 10,
                                   "temperature": 0, "logprobs": 3, "stream": True})
        streamed = [t for e in events for c in e["choices"] if c["logprobs"]
                    for t in c["logprobs"]["tokens"]]
        check(streamed == l["tokens"], f"streamed logprob tokens {streamed}")
        echo = completion(srv, {"prompt": prompt, "max_tokens": 4, "temperature": 0, "echo": True,
                                "logprobs": 1})
        e = echo["choices"][0]
        check(e["text"].startswith(prompt), e["text"])
        check(len(e["logprobs"]["tokens"]) == tok["count"] + 4, e["logprobs"])
        check(e["logprobs"]["token_logprobs"][0] is None, "the first prompt token has none")

        # chat without a template: a clear 400
        st, _, v = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
        check(st == 400 and "--chat-template" in v["error"]["message"], f"{st} {v}")

        m = idle_and_free(srv)
        check(m["pagellm:time_to_first_token_seconds_count"] ==
              sum(successes(m).values()), f"{m}")
    finally:
        srv.stop()


CHAT_TEMPLATE = ("{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
                 "{% if tools %}TOOLS{{ tools|length }}\n{% endif %}"
                 "{% if flavor %}FLAVOR {{ flavor }}\n{% endif %}"
                 "{% if add_generation_prompt %}<assistant>{% endif %}")


def case_chat():
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(CHAT_TEMPLATE)
    srv = Server(PAGELLM, stories_args(["--chat-template", f.name]))
    try:
        msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Once"}]
        st, _, tok = srv.post("/tokenize", {"messages": msgs})
        check(st == 200, tok)
        st, _, text = srv.post("/detokenize", {"tokens": tok["tokens"]})
        check(text["prompt"] == "<system>Be brief.\n<user>Once\n<assistant>", text)
        tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
        st, _, tok2 = srv.post("/tokenize", {"messages": msgs, "tools": tools,
                                             "chat_template_kwargs": {"flavor": "mint"}})
        st, _, text2 = srv.post("/detokenize", {"tokens": tok2["tokens"]})
        check("TOOLS1\nFLAVOR mint\n" in text2["prompt"], text2)

        body = {"messages": msgs, "max_completion_tokens": 12, "temperature": 0,
                "logprobs": True, "top_logprobs": 2}
        st, _, v = srv.post("/v1/chat/completions", body)
        check(st == 200 and v["object"] == "chat.completion" and v["id"].startswith("chatcmpl-"), v)
        c = v["choices"][0]
        check(c["message"]["role"] == "assistant" and c["finish_reason"] == "length", c)
        check(v["usage"]["completion_tokens"] == 12 and v["usage"]["prompt_tokens"] == tok["count"],
              v["usage"])
        content = c["logprobs"]["content"]
        check(len(content) == 12 and "".join(x["token"] for x in content) == c["message"]["content"],
              content)
        for x in content:
            check(list(x["token"].encode()) == x["bytes"] and len(x["top_logprobs"]) == 2 and
                  x["top_logprobs"][0]["logprob"] >= x["top_logprobs"][1]["logprob"], x)
        st, events, done = srv.stream("/v1/chat/completions", dict(body, stream=True,
                                      stream_options={"include_usage": True}))
        check(done == 1 and events[0]["object"] == "chat.completion.chunk", events[:1])
        check(events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}, events[0])
        texts, fins, usage = stream_text(events, "chat")
        check(texts == {0: c["message"]["content"]} and fins == {0: ["length"]}, f"{texts} {fins}")
        check(usage["completion_tokens"] == 12, usage)
        check(events[-2]["choices"][0]["delta"] == {}, "the finish chunk's delta is empty")
        # max_tokens is taken too; max_completion_tokens wins
        st, _, v = srv.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 3,
                                                     "max_completion_tokens": 5})
        check(v["usage"]["completion_tokens"] <= 5 and
              (v["usage"]["completion_tokens"] == 5 or v["choices"][0]["finish_reason"] == "stop"), v)
        for bad, param in [({"messages": []}, "messages"), ({"messages": [{"content": "x"}]}, "messages"),
                           ({"messages": msgs, "top_logprobs": 2}, "top_logprobs"),
                           ({"messages": msgs, "tool_choice": "required"}, "tool_choice"),
                           ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
                            "messages[0].content")]:
            st, _, v = srv.post("/v1/chat/completions", bad)
            check(st == 400 and v["error"]["param"] == param, f"{bad}: {st} {v}")
        st, _, v = srv.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}], "max_tokens": 1})
        check(st == 200, v)
        own = {"messages": msgs, "chat_template": "{{ messages[1].content }} and"}
        for path in ["/v1/chat/completions", "/tokenize"]:
            st, _, v = srv.post(path, own)
            check(st == 400 and v["error"]["param"] == "chat_template", f"{path}: {st} {v}")
    finally:
        srv.stop()
        os.unlink(f.name)
    # a request's own template, when the server trusts them
    srv = Server(PAGELLM, stories_args(["--trust-request-chat-template"]))
    try:
        st, _, tok = srv.post("/tokenize", own)
        st, _, text = srv.post("/detokenize", {"tokens": tok["tokens"]})
        check(text["prompt"] == "Once and", text)
        st, _, v = srv.post("/v1/chat/completions", dict(own, max_tokens=3))
        check(st == 200 and v["usage"]["prompt_tokens"] == tok["count"], v)
    finally:
        srv.stop()


# A ChatML-like template that writes tools and tool calls as Hermes/Qwen do (so the server reads
# replies as "hermes"), and opens the reasoning when asked (think=true), as Qwen3 thinking
# templates do.
TOOLS_TEMPLATE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools> "
    "<tool_call>\n{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }} "
    "{{ c.function.arguments | tojson }}</tool_call>{% endfor %}"
    "{% if m.tool_call_id %}[{{ m.tool_call_id }}]{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% if think %}<think>\n{% endif %}{% endif %}")


def chat_stream_parts(events):
    """content, reasoning, {index: [id, name, arguments]} and finish reasons of a chat stream."""
    content, reasoning, calls, fins = "", "", {}, []
    for e in events:
        check("error" not in e, f"error event: {e}")
        for c in e["choices"]:
            d = c["delta"]
            content += d.get("content") or ""
            reasoning += d.get("reasoning_content") or ""
            for t in d.get("tool_calls") or []:
                if "id" in t:
                    check(t["index"] not in calls and t["type"] == "function" and
                          t["function"]["arguments"] == "", f"a call's first delta: {t}")
                    calls[t["index"]] = [t["id"], t["function"]["name"], ""]
                else:
                    check("name" not in t["function"], f"the name comes once: {t}")
                    calls[t["index"]][2] += t["function"]["arguments"]
            if c.get("finish_reason"):
                fins.append(c["finish_reason"])
    return content, reasoning, calls, fins


def case_replies():
    """Tool-call histories, reading replies (reasoning, tool calls), stop_reason,
    GET /v1/models/{id} and prompt_logprobs."""
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(TOOLS_TEMPLATE)
    srv = Server(PAGELLM, stories_args(["--chat-template", f.name, "--reasoning-parser", "qwen3",
                                        "--served-model-name", "org/stories"]))
    try:
        check("read for tool calls: hermes; reasoning: qwen3" in srv.text(), srv.text())
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}}}}]
        # a standard tool-call history: content null, arguments as JSON text, a tool result
        history = [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
                   {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
        st, _, tok = srv.post("/tokenize", {"messages": history, "tools": tools})
        check(st == 200, f"{st} {tok}")
        st, _, text = srv.post("/detokenize", {"tokens": tok["tokens"]})
        check('<assistant><tool_call>get_weather {"city": "Paris"}</tool_call>\n'
              '<tool>sunny[call_1]\n<assistant>' in text["prompt"], text)
        body = {"messages": history, "tools": tools, "max_tokens": 24, "temperature": 0}
        st, _, v = srv.post("/v1/chat/completions", body)
        check(st == 200, f"{st} {v}")
        c = v["choices"][0]
        # stories260K writes no calls: its text is the content, untouched
        check(c["finish_reason"] in ("stop", "length") and "tool_calls" not in c["message"] and
              isinstance(c["message"]["content"], str) and c["message"]["content"], c)
        check(c["message"]["reasoning_content"] is None, c)
        st, events, done = srv.stream("/v1/chat/completions", dict(body, stream=True))
        content, reasoning, calls, fins = chat_stream_parts(events)
        check(done == 1 and content == c["message"]["content"] and not reasoning and not calls and
              fins == [c["finish_reason"]], f"{content!r} {reasoning!r} {calls} {fins}")
        # tool_choice none: the template gets no tools
        st, _, tok_none = srv.post("/tokenize", {"messages": history, "tools": tools,
                                                 "chat_template_kwargs": {}})
        check("<tools>" in json.dumps(srv.post("/detokenize", {"tokens": tok_none["tokens"]})[2]),
              "tools rendered")
        st, _, v = srv.post("/v1/chat/completions", dict(body, tool_choice="none"))
        check(st == 200 and v["usage"]["prompt_tokens"] < tok["count"], v)

        # reasoning opened by the template: the whole reply is reasoning
        plain = {"messages": [{"role": "user", "content": "Once"}], "max_tokens": 30,
                 "temperature": 0}
        st, _, v0 = srv.post("/v1/chat/completions", dict(plain, chat_template_kwargs={"think": False}))
        check(v0["choices"][0]["message"]["reasoning_content"] is None, v0)
        thinking = dict(plain, chat_template_kwargs={"think": True})
        st, _, v = srv.post("/v1/chat/completions", thinking)
        m = v["choices"][0]["message"]
        check(st == 200 and m["reasoning_content"] and m["content"] == "", f"{st} {v}")
        st, events, done = srv.stream("/v1/chat/completions", dict(thinking, stream=True))
        content, reasoning, calls, fins = chat_stream_parts(events)
        check(reasoning == m["reasoning_content"] and content == "" and not calls,
              f"{reasoning!r} vs {m['reasoning_content']!r}")

        # GET /v1/models/{id}, with a slash in the name
        st, _, v = srv.get("/v1/models/org/stories")
        check(st == 200 and v["id"] == "org/stories" and v["object"] == "model", f"{st} {v}")
        st, _, v = srv.get("/v1/models/other")
        check(st == 404 and v["error"]["code"] == "model_not_found", f"{st} {v}")
        st, _, v = srv.get("/v1/models/")
        check(st == 404, f"{st} {v}")
        st, _, v = srv.post("/v1/models/org/stories", {})
        check(st == 405, f"{st} {v}")

        # stop_reason: the stop string or id that ended the text; null for the end or length
        prompt = "Once upon a time"
        base = {"prompt": prompt, "max_tokens": 60, "temperature": 0}
        full = completion(srv, base)["choices"][0]
        check(full["stop_reason"] is None, full)
        words = full["text"].split()
        stops = ["zzqq", " " + words[3], " " + words[5]]
        c = completion(srv, dict(base, stop=stops))["choices"][0]
        check(c["finish_reason"] == "stop" and c["stop_reason"] == " " + words[3], c)
        st, events, _ = srv.stream("/v1/completions", dict(base, stop=stops, stream=True))
        check(events[-1]["choices"][0]["stop_reason"] == " " + words[3], events[-1])
        st, _, ids = srv.post("/tokenize", {"prompt": full["text"], "add_special_tokens": False})
        c = completion(srv, dict(base, stop_token_ids=[ids["tokens"][2]]))["choices"][0]
        check(c["finish_reason"] == "stop" and c["stop_reason"] == ids["tokens"][2], c)
        st, _, v = srv.post("/v1/chat/completions", dict(plain, stop=[" " + words[1]]))
        check(v["choices"][0]["stop_reason"] in (None, " " + words[1]), v)

        # prompt_logprobs: vLLM's shape, equal to echo's logprobs of the prompt
        st, _, ptok = srv.post("/tokenize", {"prompt": prompt})
        v = completion(srv, dict(base, max_tokens=2, prompt_logprobs=2, echo=True, logprobs=1))
        pl = v["choices"][0]["prompt_logprobs"]
        echo = v["choices"][0]["logprobs"]
        check(len(pl) == ptok["count"] and pl[0] is None, pl)
        for i in range(1, len(pl)):
            tid = str(ptok["tokens"][i])
            check(tid in pl[i] and 1 <= len(pl[i]) <= 3, pl[i])
            check(abs(pl[i][tid]["logprob"] - echo["token_logprobs"][i]) < 1e-6, f"{pl[i]} {echo}")
            check(pl[i][tid]["decoded_token"] == echo["tokens"][i], pl[i])
            ranks = sorted(x["rank"] for x in pl[i].values())
            check(ranks[0] >= 1 and (len(pl[i]) == 3 or pl[i][tid]["rank"] <= 2), pl[i])
            check(len(echo["top_logprobs"][i]) == 1, "echo keeps its own k")
        st, _, v = srv.post("/v1/chat/completions", dict(plain, prompt_logprobs=0))
        check(st == 200 and len(v["prompt_logprobs"]) == v["usage"]["prompt_tokens"], v)
        st, _, v = srv.post("/v1/completions", dict(base, prompt_logprobs=1, stream=True))
        check(st == 400 and v["error"]["param"] == "prompt_logprobs", f"{st} {v}")
    finally:
        srv.stop()
        os.unlink(f.name)


def check_schema(schema, v, where="$"):
    """The subset of JSON Schema the structured-output cases use."""
    t = schema.get("type")
    types = {"object": dict, "string": str, "integer": int, "boolean": bool, "array": list}
    if t:
        check(isinstance(v, types[t]) and not (t == "integer" and isinstance(v, bool)),
              f"{where}: {v!r} is not {t}")
    if "enum" in schema:
        check(v in schema["enum"], f"{where}: {v!r} not in {schema['enum']}")
    if t == "string" and "maxLength" in schema:
        check(len(v) <= schema["maxLength"], f"{where}: {v!r} longer than {schema['maxLength']}")
    if t == "integer":
        check(schema.get("minimum", v) <= v <= schema.get("maximum", v), f"{where}: {v} out of range")
    if t == "object":
        props = schema.get("properties", {})
        check(set(schema.get("required", [])) <= set(v), f"{where}: missing keys of {v}")
        check(set(v) <= set(props), f"{where}: extra keys in {v}")
        for k, x in v.items():
            check_schema(props[k], x, f"{where}.{k}")


SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 99},
                                           "mood": {"enum": ["happy", "sad"]}},
          "required": ["name", "age", "mood"]}
FUNCS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
              "type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                               "days": {"type": "integer", "minimum": 1,
                                                        "maximum": 7}},
              "required": ["city", "days"]}}},
         {"type": "function", "function": {"name": "now"}}]
# the same chat in each family's tool syntax (auto picks the reader from the template)
SYNTAX_TEMPLATES = {
    "hermes": "{% for m in messages %}{{ m.content }}{% endfor %}<tool_call>",
    "llama3_json": "{% for m in messages %}{{ m.content }}{% endfor %}<|python_tag|>",
    "mistral": "{% for m in messages %}{{ m.content }}{% endfor %}[TOOL_CALLS]",
}


def case_structured():
    """Constrained outputs and forced tool calls on stories260K: every output valid; streams
    equal to whole responses; hostile constraints refused quickly, naming the field, while
    another request streams on."""
    srv = Server(PAGELLM, stories_args(["--trust-request-chat-template"]))
    try:
        chat = {"messages": [{"role": "user", "content": "Once"}], "max_tokens": 400,
                "temperature": 0.9, "seed": 5,
                "chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"}
        # choice, regex, schema: completions and chats, whole and streamed, n = 2
        for field, value, ok in [
                ("guided_choice", ["happy", "sad", "angry"], lambda t: t in ("happy", "sad", "angry")),
                ("guided_regex", "[a-c]{3}-[0-9]{2}", lambda t: re.fullmatch("[a-c]{3}-[0-9]{2}", t)),
                ("structured_outputs", {"json": SCHEMA},
                 lambda t: check_schema(SCHEMA, json.loads(t)) or True)]:
            body = {"prompt": "Once upon a time", "max_tokens": 400, "temperature": 0.9,
                    "seed": 3, "n": 2, field: value}
            v = completion(srv, body)
            for c in v["choices"]:
                check(c["finish_reason"] == "stop" and ok(c["text"]), f"{field}: {c}")
            st, events, _ = srv.stream("/v1/completions", dict(body, stream=True))
            texts, fins, _ = stream_text(events)
            check(texts == {i: c["text"] for i, c in enumerate(v["choices"])}, f"{field} streamed")
        body = dict(chat, response_format={"type": "json_schema", "json_schema": {
            "name": "person", "strict": True, "schema": SCHEMA}})
        st, _, v = srv.post("/v1/chat/completions", body)
        check(st == 200 and v["choices"][0]["finish_reason"] == "stop", f"{st} {v}")
        m = v["choices"][0]["message"]
        check_schema(SCHEMA, json.loads(m["content"]))
        st, events, _ = srv.stream("/v1/chat/completions", dict(body, stream=True))
        content, _, _, _ = chat_stream_parts(events)
        check(content == m["content"], f"{content!r} vs {m['content']!r}")

        # forced tool calls in each family's syntax, read back into tool_calls
        for syntax, tmpl in SYNTAX_TEMPLATES.items():
            for choice, parallel in [("required", True), ({"type": "function", "function":
                                                           {"name": "get_weather"}}, False)]:
                body = dict(chat, chat_template=tmpl, tools=FUNCS, tool_choice=choice,
                            parallel_tool_calls=parallel)
                st, _, v = srv.post("/v1/chat/completions", body)
                c = v["choices"][0] if st == 200 else v
                # parallel calls may go on until max_tokens (a random model); the finished
                # ones are read, the one cut short stays content
                check(st == 200 and (c["finish_reason"] == "tool_calls" and
                                     c["message"]["content"] is None or
                                     parallel and c["finish_reason"] == "length"),
                      f"{syntax} {choice}: {st} {c}")
                calls = c["message"]["tool_calls"]
                check(len(calls) >= 1 and (parallel or len(calls) == 1), f"{syntax}: {calls}")
                for t in calls:
                    f = next(x["function"] for x in FUNCS if x["function"]["name"] ==
                             t["function"]["name"])
                    check(isinstance(choice, str) or f["name"] == "get_weather", t)
                    check_schema(f.get("parameters", {"type": "object"}),
                                 json.loads(t["function"]["arguments"]))
                    check(len(t["id"]) == (9 if syntax == "mistral" else 29), t)
                st, events, done = srv.stream("/v1/chat/completions", dict(body, stream=True))
                content, _, scalls, fins = chat_stream_parts(events)
                streamed = [x[1:] for x in scalls.values()]
                whole = [[t["function"]["name"], t["function"]["arguments"]] for t in calls]
                check(done == 1 and fins == [c["finish_reason"]] and
                      (streamed == whole and content == "" or
                       fins == ["length"] and streamed[:len(whole)] == whole),
                      f"{syntax} streamed: {scalls} vs {calls}")

        # hostile constraints: refused fast, naming the field, while a stream goes on
        slow = srv.conn()
        slow.request("POST", "/v1/completions", body=json.dumps(
            {"prompt": "Once", "max_tokens": 300, "stream": True, "ignore_eos": True}),
            headers={"Content-Type": "application/json"})
        deep = '{"type": "array", "items": ' * 1000 + "{}" + "}" * 1000  # as text, as vLLM takes it
        for field, value, param in [
                ("guided_json", deep, "guided_json"),
                ("guided_json", {"enum": list(range(100000))}, "guided_json"),
                ("guided_json", {"type": "string", "maxLength": 10 ** 9}, "guided_json"),
                ("guided_grammar", "root ::= root \"a\" | \"b\"", "guided_grammar"),
                ("guided_regex", "(a)\\1", "guided_regex"),
                ("response_format", {"type": "json_schema", "json_schema": {
                    "name": "x", "schema": {"type": "object", "properties": {"a": {"not": {}}}}}},
                 "response_format")]:
            t0 = time.time()
            st, _, v = srv.post("/v1/completions", {"prompt": "Once", field: value})
            took = time.time() - t0
            check(st == 400 and v["error"]["param"] == param and took < 10,
                  f"{field}: {st} {v} in {took:.1f} s")
        # a regex that explodes a backtracking matcher: answered in bounded time either way
        t0 = time.time()
        st, _, v = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 8,
                                                "guided_regex": "((a{1000}){1000}){1000}"})
        check((st == 200 or st == 400 and v["error"]["param"] == "guided_regex") and
              time.time() - t0 < 10, f"{st} {v}")
        st, _, v = srv.post("/v1/chat/completions", dict(chat, tools=[{"type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {
                "not": {}}}}}}], tool_choice="required", chat_template=SYNTAX_TEMPLATES["hermes"]))
        check(st == 400 and v["error"]["param"] == "tools" and "/properties/a" in
              v["error"]["message"], f"{st} {v}")
        r = slow.getresponse()
        text = r.read().decode()
        check(r.status == 200 and text.rstrip().endswith("data: [DONE]") and '"error"' not in text,
              "the stream went on")
        slow.close()
        check(completion(srv, {"prompt": "Once", "max_tokens": 4})["choices"][0]["text"],
              "served after")
        idle_and_free(srv)
    finally:
        srv.stop()


def case_greedy_generate():
    """Greedy text over HTTP equals `pagellm generate`'s for the same prompts."""
    args = stories_args(serve=False)
    prompts = ["Once upon a time", "Lily and Tom went to the park", "The cat", "One day, a big",
               "She was sad because", "In a small town"]
    ids_prompts = [[1, 403, 407, 261, 378], [1, 306, 411]]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
        for p in ids_prompts:
            f.write(json.dumps({"prompt_token_ids": p}) + "\n")
    gen = subprocess.run([PAGELLM, "generate"] + args + ["--prompts", f.name, "--json",
                         "--temperature", "0", "--max-tokens", "48"],
                         capture_output=True, text=True, timeout=300)
    os.unlink(f.name)
    check(gen.returncode == 0, gen.stderr)
    want = {}
    for line in gen.stdout.splitlines():
        r = json.loads(line)
        want[r["index"]] = r
    check(len(want) == len(prompts) + len(ids_prompts), gen.stdout)
    srv = Server(PAGELLM, stories_args())
    try:
        for i, p in enumerate(prompts + ids_prompts):
            body = {"prompt": p, "max_tokens": 48, "temperature": 0}
            v = completion(srv, body)
            c = v["choices"][0]
            check(c["text"] == want[i]["text"], f"prompt {i}: {c['text']!r} vs generate "
                  f"{want[i]['text']!r}")
            check(v["usage"]["completion_tokens"] == len(want[i]["output_token_ids"]), v["usage"])
            check(v["usage"]["prompt_tokens"] == len(want[i]["prompt_token_ids"]), v["usage"])
            check(c["finish_reason"] == want[i]["finish_reason"], c)
            st, events, done = srv.stream("/v1/completions", dict(body, stream=True))
            texts, fins, _ = stream_text(events)
            check(done == 1 and texts.get(0, "") == want[i]["text"], f"stream {i}: {texts}")
        # all at once, as one batch request: the same
        v = completion(srv, {"prompt": prompts, "max_tokens": 48, "temperature": 0})
        for i in range(len(prompts)):
            check(v["choices"][i]["text"] == want[i]["text"], f"batched prompt {i}")
    finally:
        srv.stop()


def case_dummy():
    """A model without a tokenizer: token ids in, token counts out; text is refused."""
    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--log-interval", "0"])
    try:
        v = completion(srv, {"prompt": [1, 2, 3], "max_tokens": 7, "ignore_eos": True})
        check(v["usage"]["completion_tokens"] == 7 and v["choices"][0]["text"] == "", v)
        v = completion(srv, {"prompt": [[1, 2], [3]], "max_tokens": 2, "ignore_eos": True,
                             "logprobs": 2})
        check(len(v["choices"]) == 2 and len(v["choices"][1]["logprobs"]["token_logprobs"]) == 2, v)
        st, events, done = srv.stream("/v1/completions", {"prompt": [5, 6], "max_tokens": 4,
                                      "ignore_eos": True, "logprobs": 0, "stream": True})
        check(done == 1 and sum(1 for e in events if e["choices"] and e["choices"][0]["logprobs"]) == 4,
              events)
        for path, body in [("/v1/completions", {"prompt": "text"}), ("/tokenize", {"prompt": "x"}),
                           ("/detokenize", {"tokens": [1]}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})]:
            st, _, v = srv.post(path, body)
            check(st == 400 and "no tokenizer" in v["error"]["message"], f"{path}: {st} {v}")
        idle_and_free(srv)
    finally:
        srv.stop()


def histogram_count(m, name):
    return m[f"pagellm:{name}_count"]


def case_bench_metrics():
    """`pagellm bench serve` against the server: its counts equal the server's /metrics over
    the same run (requests, prompt and generation tokens, one histogram observation per
    request or token), on a fresh server (so /metrics holds that run alone). Timings cannot
    agree exactly; one order holds per request: the client's TTFT (send -> first chunk) is
    never shorter than the server's (submit -> first token), so neither is its sum."""
    tok = os.path.join(HERE, "..", "data", "tok512_hf")
    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--tokenizer", tok, "--log-interval", "0",
                           "--disable-access-log", "--threads", "1"])
    out = tempfile.NamedTemporaryFile(suffix=".json", delete=False).name
    try:
        n = 24
        # no --vocab-size and no --tokenizer: the server's model list says the vocabulary
        p = subprocess.run([PAGELLM, "bench", "serve", "--port", str(srv.port),
                            "--num-prompts", str(n), "--input-len", "12", "--output-len", "10",
                            "--random-range-ratio", "0.5", "--max-concurrency", "8", "--seed", "3",
                            "--no-progress", "--output-json", out],
                           capture_output=True, text=True, timeout=120)
        check(p.returncode == 0, f"bench serve exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        with open(out) as f:
            j = json.load(f)
        m = idle_and_free(srv)
        ok = successes(m)
        check(j["completed"] == n and j["failed"] == 0, f"client: {j['completed']} / {j['failed']}")
        # every request ran to its max_tokens (EOS ignored): finished by length
        check(ok["length"] == n and sum(ok.values()) == n, f"server's successes {ok}")
        check(m["pagellm:prompt_tokens_total"] == j["total_input_tokens"],
              f"prompt tokens: server {m['pagellm:prompt_tokens_total']}, client "
              f"{j['total_input_tokens']}")
        check(m["pagellm:generation_tokens_total"] == j["total_output_tokens"],
              f"generation tokens: server {m['pagellm:generation_tokens_total']}, client "
              f"{j['total_output_tokens']}")
        check(j["total_output_tokens"] == sum(j["output_lens"]) and
              sum(j["input_lens"]) == j["total_input_tokens"], "the client's own sums")
        multi = sum(1 for k in j["output_lens"] if k > 1)
        for name, want in [("time_to_first_token_seconds", n), ("e2e_request_latency_seconds", n),
                           ("request_queue_time_seconds", n),
                           ("request_time_per_output_token_seconds", multi),
                           ("inter_token_latency_seconds", j["total_output_tokens"] - n)]:
            got = histogram_count(m, name)
            check(got == want, f"{name}_count: server {got}, from the client's counts {want}")
        # the client's inter-token gaps are between chunks: one per token unless a token added
        # no text of its own (bytes of one character come in one chunk)
        gaps = sum(len(g) for g in j["itls"])
        check(0 < gaps <= histogram_count(m, "inter_token_latency_seconds"),
              f"{gaps} gaps between chunks")
        check(m["pagellm:time_to_first_token_seconds_sum"] <= sum(j["ttfts"]),
              f"server TTFT sum {m['pagellm:time_to_first_token_seconds_sum']} > client's "
              f"{sum(j['ttfts'])}")
    finally:
        os.unlink(out)
        srv.stop()


def case_backend_error():
    """A backend failure (injected with the engine's PAGELLM_FAULT_FORWARD hook: a forward pass
    holding a prompt that begins with token 7 fails) answers 500 in OpenAI's error object, or
    an error event and [DONE] in a stream; the server goes on serving the next requests."""
    tok = os.path.join(HERE, "..", "data", "tok512_hf")
    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--tokenizer", tok, "--log-interval", "0",
                           "--threads", "1"], env={"PAGELLM_FAULT_FORWARD": "7"})
    try:
        st, _, v = srv.post("/v1/completions", {"prompt": [7, 20, 30], "max_tokens": 8,
                                                "ignore_eos": True})
        check(st == 500, f"whole response: {st} {v}")
        e = v["error"]
        check(e["type"] == "server_error" and "backend failed" in e["message"] and
              e["code"] is None and e["param"] is None, e)
        st, events, done = srv.stream("/v1/completions", {"prompt": [7, 21], "max_tokens": 8,
                                                          "ignore_eos": True, "stream": True})
        check(st == 200 and done == 1, f"stream: {st}, {done} [DONE]")
        errs = [ev["error"] for ev in events if "error" in ev]
        check(len(errs) == 1 and events[-1].get("error") and "backend failed" in errs[0]["message"]
              and errs[0]["type"] == "server_error", f"stream events {events}")
        check(not any(ev.get("choices") and ev["choices"][0].get("finish_reason")
                      for ev in events), f"a failed choice has no finish_reason: {events}")
        for stream in [False, True, False]:  # the next requests are served
            body = {"prompt": [1, 2, 3], "max_tokens": 6, "ignore_eos": True}
            if stream:
                st, events, done = srv.stream("/v1/completions", dict(body, stream=True,
                                              stream_options={"include_usage": True}))
                _, fins, usage = stream_text(events)
                check(st == 200 and done == 1 and fins == {0: ["length"]} and
                      usage["completion_tokens"] == 6, f"stream after the failure: {events}")
            else:
                v = completion(srv, body)
                check(v["usage"]["completion_tokens"] == 6, v)
        st, _, v = srv.get("/health")
        check(st == 200 and v["status"] == "ok", f"/health {st} {v}")
        m = idle_and_free(srv)
        ok = successes(m)
        check(ok["error"] == 2 and ok["length"] == 3, ok)
    finally:
        log = srv.stop()
    check("fault injected (PAGELLM_FAULT_FORWARD)" in log, "the step's error is logged")


def emu_case_backend_lost():
    """A device fault (the CUDA emulation's CUEMU_FAULT_AFTER_LAUNCHES: an illegal address,
    sticky for the process) while serving on --backend cuda: the request in flight gets 500 in
    OpenAI's error object naming the lost backend, /health answers 503 "failed" (no
    Retry-After: it will not come back), and the server drains and exits 3 by itself, logging
    why. Run with pagellm_cuda_emu (tests/tools/meson.build), not in the case list."""
    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--backend", "cuda", "--log-interval", "0",
                           "--max-num-seqs", "4"], env={"CUEMU_FAULT_AFTER_LAUNCHES": "400"})
    try:
        st, _, v = srv.get("/health")
        check(st == 200 and v["status"] == "ok", f"/health before the fault: {st} {v}")
        failed = None
        for i in range(40):  # until the fault lands in a step
            st, _, v = srv.post("/v1/completions", {"prompt": [1, 5 + i, 9], "max_tokens": 16,
                                                    "ignore_eos": True})
            if st != 200:
                failed = (st, v)
                break
        check(failed is not None, "no request failed: the injected fault never came")
        st, v = failed
        check(st == 500 and v["error"]["type"] == "server_error" and
              "lost" in v["error"]["message"], f"the faulting request: {st} {v}")
        try:
            st, hdrs, v = srv.get("/health")
            check(st == 503 and v["status"] == "failed" and
                  "cudaErrorIllegalAddress" in v["error"], f"/health after the fault: {st} {v}")
        except ConnectionError:  # already gone: then it must have exited on its own
            check(srv.proc.poll() == 3, "the server closed without exiting 3")
        rc = srv.proc.wait(timeout=60)
        check(rc == 3, f"serve exited {rc} after losing its backend, expected 3")
    finally:
        log = srv.stop(expect_rc=3)
    check("the backend is lost" in log and "cudaErrorIllegalAddress" in log, log[-3000:])


def case_load():
    """64 streaming clients, 2,000 requests: every stream's deltas join to the whole response's
    text for the same request, every request ends exactly once, and the engine is empty
    afterwards with counters that add up."""
    srv = Server(PAGELLM, stories_args(["--disable-access-log"]))
    try:
        prompts = ["Once upon a time", "Lily", "The dog ran", "Tom and Sue", "A little bird",
                   "The sun was", "Mom said", "One day", "There was a big", "The girl"]
        combos = []
        for i, p in enumerate(prompts):
            for j, mt in enumerate([8, 16, 24, 32]):
                b = {"prompt": p, "max_tokens": mt}
                if (i + j) % 2:
                    b.update(temperature=0.9, seed=100 * i + j)
                else:
                    b["temperature"] = 0
                if j == 3:
                    b["stop"] = ["."]
                combos.append(b)
        refs = [completion(srv, b) for b in combos]
        n_requests, n_clients = 2000, 64
        results = [None] * n_requests
        next_i = [0]
        lock = threading.Lock()
        errors = []

        def client():
            try:
                while True:
                    with lock:
                        i = next_i[0]
                        next_i[0] += 1
                    if i >= n_requests:
                        return
                    body = dict(combos[i % len(combos)], stream=True,
                                stream_options={"include_usage": True})
                    results[i] = srv.stream("/v1/completions", body)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))

        t0 = time.time()
        threads = [threading.Thread(target=client) for _ in range(n_clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.time() - t0
        check(not errors, f"client errors: {errors[:5]}")
        out_tokens = 0
        for i, (st, events, done) in enumerate(results):
            ref = refs[i % len(combos)]
            texts, fins, usage = stream_text(events)
            check(st == 200 and done == 1, f"request {i}: status {st}, {done} [DONE]")
            check(fins == {0: [ref["choices"][0]["finish_reason"]]}, f"request {i}: finishes {fins}")
            check(texts.get(0, "") == ref["choices"][0]["text"],
                  f"request {i}: deltas join to {texts.get(0)!r}, whole text "
                  f"{ref['choices'][0]['text']!r}")
            check(usage == ref["usage"] or (usage["completion_tokens"] ==
                  ref["usage"]["completion_tokens"]), f"request {i}: usage {usage} vs {ref['usage']}")
            out_tokens += usage["completion_tokens"]
        m = idle_and_free(srv)
        total = n_requests + len(combos)
        ok = successes(m)
        check(ok["stop"] + ok["length"] == total and ok["abort"] == 0 and ok["error"] == 0, ok)
        check(m["pagellm:generation_tokens_total"] == out_tokens +
              sum(r["usage"]["completion_tokens"] for r in refs), "generation tokens add up")
        check(m["pagellm:e2e_request_latency_seconds_count"] == total, "one e2e per request")
        print(f"load: {n_requests} streams from {n_clients} clients in {elapsed:.1f} s, "
              f"{out_tokens} tokens")
    finally:
        srv.stop()


def case_disconnect():
    """Clients that hang up mid-stream, or while waiting for a whole response, have their
    requests aborted at once and the KV blocks freed."""
    srv = Server(PAGELLM, SLOW + ["--log-interval", "0"])
    try:
        socks = []
        for k in range(4):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            body = json.dumps({"prompt": [1, 2, 3 + k], "max_tokens": 200, "ignore_eos": True,
                               "logprobs": 0, "stream": k < 2}).encode()
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                      b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                      b"\r\n\r\n" + body)
            socks.append(s)
        for s in socks[:2]:  # the streams have begun
            got = b""
            while got.count(b"data: ") < 2:
                got += s.recv(65536)
        m = srv.metrics()
        check(m["pagellm:num_requests_running"] == 4, f"running {m['pagellm:num_requests_running']}")
        t0 = time.time()
        for s in socks:
            s.close()
        m = idle_and_free(srv, timeout=10)
        took = time.time() - t0
        check(successes(m)["abort"] == 4, successes(m))
        check(m["pagellm:server_aborted_disconnect_total"] == 4, m)
        check(m["pagellm:generation_tokens_total"] < 4 * 200, "they did not run to the end")
        print(f"disconnect: 4 requests aborted and their blocks freed {took * 1e3:.0f} ms after "
              f"the clients hung up")
        completion(srv, {"prompt": [1, 2], "max_tokens": 2})  # still serving
    finally:
        log = srv.stop()
    # the access log has what was sent before the hang-up; a hang-up is no warning
    lines = [l for l in log.splitlines() if "POST /v1/completions" in l and "went away" in l]
    check(len(lines) == 4, f"{len(lines)} access-log lines of aborted requests:\n{log}")
    streamed = [l for l in lines if "completion_tokens=0" not in l and "ttft_ms=0.0 " not in l]
    check(len(streamed) >= 2 and all("prompt_tokens=3 " in l for l in lines),
          f"the counts of the streams that sent tokens are missing:\n" + "\n".join(lines))
    check("WARN" not in log, f"a client hanging up is logged as a warning:\n{log}")


def case_auth():
    for how in ["flag", "env"]:
        args = ["--model", "dummy:tiny", "--log-interval", "0"]
        env = None
        if how == "flag":
            args += ["--api-key", "s3cret-key"]
        else:
            env = {"PAGELLM_API_KEY": "s3cret-key"}
        srv = Server(PAGELLM, args, env=env)
        try:
            body = {"prompt": [1, 2], "max_tokens": 2}
            for hdr in [None, {"Authorization": "Bearer s3cret-kez"},
                        {"Authorization": "Bearer s3cret-key2"}, {"Authorization": "s3cret-key"},
                        {"Authorization": "Bearer "}]:
                for path, method in [("/v1/completions", "POST"), ("/v1/models", "GET"),
                                     ("/tokenize", "POST")]:
                    st, h, v = srv.request(method, path, body if method == "POST" else None,
                                           headers=hdr)
                    check(st == 401 and v["error"]["code"] == "invalid_api_key" and
                          h.get("www-authenticate") == "Bearer", f"{how} {hdr} {path}: {st} {v}")
            ok = {"Authorization": "Bearer s3cret-key"}
            st, _, v = srv.post("/v1/completions", body, headers=ok)
            check(st == 200, v)
            for path in ["/health", "/metrics", "/version"]:
                st, _, _ = srv.get(path)
                check(st == 200, f"{path} needs no key: {st}")
            # a refused request leaves the connection usable
            c = srv.conn()
            st, _, _ = srv.request("POST", "/v1/completions", body, conn=c)
            st2, _, _ = srv.request("POST", "/v1/completions", body, headers=ok, conn=c)
            check((st, st2) == (401, 200), f"keep-alive after 401: {st} {st2}")
            c.close()
        finally:
            srv.stop()


def case_errors():
    srv = Server(PAGELLM, stories_args(["--max-body-size", "64K", "--max-n", "4",
                                        "--max-prompt-tokens", "100"]))
    try:
        def bad(body, status, param=None, contains=None, path="/v1/completions"):
            st, h, v = srv.post(path, body)
            check(st == status, f"{body!r}: {st}, expected {status}: {v}")
            e = v["error"]
            check(set(e) == {"message", "type", "param", "code"}, e)
            if param is not None:
                check(e["param"] == param, f"{body!r}: param {e['param']!r}, expected {param!r}")
            if contains:
                check(contains in e["message"], f"{body!r}: {e['message']!r} lacks {contains!r}")
            return v
        bad(b"{\"prompt\": ", 400, contains="not valid JSON")
        bad(b"[1, 2]", 400, contains="JSON object")
        bad(b"{\"prompt\": \"a\\u0000b\"}", 400, contains="not valid JSON")
        bad({"prompt": "a", "temperature": "hot"}, 400, "temperature")
        bad({"prompt": "a", "top_p": 0}, 400, "top_p", "(0, 1]")
        bad({"prompt": "a", "max_tokens": -1}, 400, "max_tokens")
        bad({"prompt": "a", "n": 5}, 400, "n", "--max-n")
        bad({"prompt": "a", "stream": "yes"}, 400, "stream")
        bad({"prompt": 5}, 400, "prompt")
        bad({"prompt": []}, 400, "prompt")
        bad({"prompt": [1, "a"]}, 400, "prompt")
        bad({"prompt": [-1]}, 400, "prompt")
        bad({"prompt": [100000]}, 400, contains="outside the vocabulary")
        bad({"prompt": "", "add_special_tokens": False}, 400, "prompt", "no tokens")
        bad({"prompt": [1] * 101}, 400, "prompt", "--max-prompt-tokens")
        bad({"prompt": "a", "stream_options": {"include_usage": True}}, 400, "stream_options")
        bad({"prompt": "a", "logit_bias": {"1": 500}}, 400, "logit_bias", "[-100, 100]")
        bad({"prompt": "a", "logit_bias": {"99999": 5}}, 400, "logit_bias", "vocabulary")
        bad({"prompt": "a", "min_tokens": 9, "max_tokens": 3}, 400, "min_tokens")
        bad({"prompt": "a", "max_tokens": 600}, 400, contains="max_model_len")
        bad({"max_tokens": 3}, 400, "prompt", "required")
        v = bad({"prompt": "a", "model": "gpt-4"}, 404, "model")
        check(v["error"]["code"] == "model_not_found", v)
        st, _, v = srv.post("/v1/completions", {"prompt": "a", "max_tokens": 2, "whatever": 1,
                                                 "user": "u", "top_k": None})
        check(st == 200, f"unknown and null fields are ignored: {st} {v}")
        bad({"tokens": "x"}, 400, "tokens", path="/detokenize")
        bad({"tokens": [9999]}, 400, path="/detokenize")
        bad({"prompt": "a", "messages": []}, 400, path="/tokenize")

        st, _, v = srv.get("/v1/nothing")
        check(st == 404 and v["error"]["code"] == "not_found", f"{st} {v}")
        st, h, v = srv.get("/v1/completions")
        check(st == 405 and h.get("allow") == "POST", f"{st} {h}")
        st, h, v = srv.post("/health", {})
        check(st == 405 and h.get("allow") == "GET", f"{st} {h}")
        big = b"{\"prompt\": \"" + b"a" * 70000 + b"\"}"
        st, h, v = srv.post("/v1/completions", big)
        check(st == 413 and v["error"]["code"] == "request_too_large", f"{st} {v}")
        # no Content-Length (chunked) past the limit: the connection is closed, no answer
        chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" +
                   b"".join(b"%x\r\n" % 4096 + b"a" * 4096 + b"\r\n" for _ in range(20)) + b"0\r\n\r\n")
        got = raw_http(srv.port, chunked)
        check(not got.startswith(b"HTTP/1.1 200"), got[:200])
        # a small chunked body is fine
        small = json.dumps({"prompt": "Once", "max_tokens": 2}).encode()
        got = raw_http(srv.port, b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(small) + small +
                       b"\r\n0\r\n\r\n")
        check(got.startswith(b"HTTP/1.1 200"), got[:300])
        # keep-alive across an error
        c = srv.conn()
        st1, _, _ = srv.request("POST", "/v1/completions", b"{", conn=c)
        st2, _, v = srv.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2}, conn=c)
        check((st1, st2) == (400, 200), f"{st1} {st2} {v}")
        c.close()
        idle_and_free(srv)
    finally:
        srv.stop()


def case_queue_full():
    """One sequence runs, 5 may wait: the rest get 429 with Retry-After, /health says 503 while
    the queue is 80% full, and everything accepted is answered."""
    srv = Server(PAGELLM, SLOW + ["--max-num-seqs", "1", "--max-batch-size", "1",
                                  "--max-waiting", "5", "--log-interval", "0"])
    try:
        results = [None] * 10
        def one(i):
            results[i] = srv.post("/v1/completions", {"prompt": [1, 2, i + 3], "max_tokens": 24,
                                                      "ignore_eos": True})
        threads = [threading.Thread(target=one, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        health = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(srv.get("/health")), 60,
                          "/health to say 503 while the queue is full")
        check(health[2]["status"] == "overloaded" and health[1].get("retry-after") == "1", health)
        for t in threads:
            t.join()
        codes = sorted(r[0] for r in results)
        check(codes.count(200) >= 5 and set(codes) <= {200, 429} and 429 in codes, codes)
        for st, h, v in results:
            if st == 429:
                check(h.get("retry-after") == "1" and v["error"]["code"] == "queue_full", v)
            else:
                check(v["usage"]["completion_tokens"] == 24, v)
        st, _, v = srv.get("/health")
        check(st == 200 and v["status"] == "ok", v)
        idle_and_free(srv)
    finally:
        srv.stop()


def case_drain():
    """SIGTERM: new requests get 503, the running ones finish, the server exits 0."""
    srv = Server(PAGELLM, SLOW + ["--log-interval", "0", "--drain-timeout", "120"])
    try:
        results = {}
        def whole():
            results["whole"] = srv.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 30,
                                                            "ignore_eos": True})
        def streamed():
            results["stream"] = srv.stream("/v1/completions", {"prompt": [4, 5], "max_tokens": 30,
                                           "ignore_eos": True, "stream": True, "logprobs": 0})
        threads = [threading.Thread(target=whole), threading.Thread(target=streamed)]
        for t in threads:
            t.start()
        wait_for(lambda: srv.metrics()["pagellm:num_requests_running"] == 2, 60, "both running")
        keep = srv.conn()
        srv.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "draining" in srv.text(), 10, "the drain to begin")
        st, h, v = srv.post("/v1/completions", {"prompt": [1], "max_tokens": 2}, conn=keep)
        check(st == 503 and v["error"]["code"] == "draining", f"{st} {v}")
        st, _, v = srv.get("/health")
        check(st == 503 and v["status"] == "draining", v)
        for t in threads:
            t.join()
        st, _, v = results["whole"]
        check(st == 200 and v["usage"]["completion_tokens"] == 30, f"{st} {v}")
        st, events, done = results["stream"]
        texts, fins, _ = stream_text(events)
        check(done == 1 and fins == {0: ["length"]}, fins)
        srv.stop()
    finally:
        srv.kill()

    # with a short drain timeout the unfinished are aborted, and still answered
    srv = Server(PAGELLM, SLOW + ["--log-interval", "0", "--drain-timeout", "0.5"])
    try:
        results = {}
        def whole():
            results["whole"] = srv.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 250,
                                                            "ignore_eos": True})
        def streamed():
            results["stream"] = srv.stream("/v1/completions", {"prompt": [4, 5], "max_tokens": 250,
                                           "ignore_eos": True, "stream": True, "logprobs": 0})
        threads = [threading.Thread(target=whole), threading.Thread(target=streamed)]
        for t in threads:
            t.start()
        wait_for(lambda: srv.metrics()["pagellm:num_requests_running"] == 2, 60, "both running")
        srv.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(timeout=60)
        st, _, v = results["whole"]
        check(st == 503 and v["error"]["code"] == "aborted", f"{st} {v}")
        st, events, done = results["stream"]
        check(done == 1 and events[-1].get("error", {}).get("code") == "aborted", events[-2:])
        log = srv.stop()
        check("aborting 2 request(s)" in log, log[-2000:])
    finally:
        srv.kill()


def case_slow_reader():
    """A client that reads nothing: its stream is aborted once --max-pending-deltas events
    wait, the blocks are freed, and the stream ends with an error saying why."""
    srv = Server(PAGELLM, stories_args(["--max-pending-deltas", "16", "--send-buffer", "4K"]))
    try:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.connect(("127.0.0.1", srv.port))
        body = json.dumps({"prompt": "Once upon a time", "max_tokens": 500, "ignore_eos": True,
                           "logprobs": 5, "stream": True}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                  b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        wait_for(lambda: srv.metrics()["pagellm:server_aborted_slow_reader_total"] == 1, 30,
                 "the slow reader's abort")
        m = idle_and_free(srv)
        check(successes(m)["abort"] == 1, successes(m))
        s.settimeout(30)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        s.close()
        check(b"slow_reader" in got and got.rstrip().endswith(b"0"), got[-400:])
        check(b"data: [DONE]" in got, "the stream still ends with [DONE]")
    finally:
        srv.stop()


def case_slow_client():
    """A request trickled a byte at a time is dropped after --request-timeout; an idle
    connection after --timeout-keep-alive; other clients are served meanwhile."""
    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--log-interval", "0", "--request-timeout",
                           "2", "--timeout-keep-alive", "2"])
    try:
        def trickle():
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\n")
            t0 = time.time()
            try:
                for ch in b"Content-Type: application/json\r\nX-Slow: " + b"a" * 100:
                    s.sendall(bytes([ch]))
                    time.sleep(0.25)
                    if time.time() - t0 > 20:
                        break
                s.recv(10)
            except (BrokenPipeError, ConnectionResetError):
                pass
            took = time.time() - t0
            s.close()
            return took
        result = {}
        t = threading.Thread(target=lambda: result.setdefault("took", trickle()))
        t.start()
        for _ in range(5):  # others are served meanwhile
            v = completion(srv, {"prompt": [1, 2], "max_tokens": 2})
        idle = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
        t0 = time.time()
        check(idle.recv(10) == b"", "an idle connection is closed")
        idle_took = time.time() - t0
        idle.close()
        t.join()
        check(result["took"] < 8, f"the trickling client was dropped after {result['took']:.1f} s")
        check(1.5 < idle_took < 8, f"the idle connection was closed after {idle_took:.1f} s")
    finally:
        srv.stop()




# ---- issue 26: token strings and offsets, and the small fields --------------------------------

def write_zero_hf(d, vocab, tokenizer_dir, eos):
    """A Llama Hugging Face directory whose weights are zero (norms one): every logit is 0, so
    sampling at temperature 1 draws uniformly from the whole vocabulary (byte pieces, parts of
    characters, special tokens). The tokenizer's files are linked beside it."""
    import struct
    dim, hidden, heads, kv, hd = 16, 32, 2, 1, 8
    shapes = [("model.embed_tokens.weight", [vocab, dim]),
              ("model.layers.0.input_layernorm.weight", [dim]),
              ("model.layers.0.self_attn.q_proj.weight", [heads * hd, dim]),
              ("model.layers.0.self_attn.k_proj.weight", [kv * hd, dim]),
              ("model.layers.0.self_attn.v_proj.weight", [kv * hd, dim]),
              ("model.layers.0.self_attn.o_proj.weight", [dim, heads * hd]),
              ("model.layers.0.post_attention_layernorm.weight", [dim]),
              ("model.layers.0.mlp.gate_proj.weight", [hidden, dim]),
              ("model.layers.0.mlp.up_proj.weight", [hidden, dim]),
              ("model.layers.0.mlp.down_proj.weight", [dim, hidden]),
              ("model.norm.weight", [dim])]
    header, blobs, off = {}, [], 0
    for name, shape in shapes:
        n = 1
        for x in shape:
            n *= x
        b = struct.pack(f"<{n}f", *([1.0] * n)) if len(shape) == 1 else bytes(4 * n)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h)
        for b in blobs:
            f.write(b)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": dim,
           "intermediate_size": hidden, "num_hidden_layers": 1, "num_attention_heads": heads,
           "num_key_value_heads": kv, "vocab_size": vocab, "max_position_embeddings": 256,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": True,
           "eos_token_id": eos, "torch_dtype": "float32"}
    with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        os.symlink(os.path.join(tokenizer_dir, name), os.path.join(d, name))


OFFSET_PROMPTS = ["Once upon a time", "  two leading spaces and  a double one", "",
                  "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "\u4f60\u597d\uff0c\u4e16\u754c",
                  "emoji \U0001F408 cat \U0001F600!", "line one\nline two\n\nend",
                  "digits 1234567890", "The quick brown fox."]


def check_indexed(what, text, lp):
    """Every token string is the text at its offset, and the strings join to the text."""
    toks, offs = lp["tokens"], lp["text_offset"]
    check(len(toks) == len(offs), f"{what}: {len(toks)} tokens, {len(offs)} offsets")
    for i, (t, o) in enumerate(zip(toks, offs)):
        check(text[o:o + len(t)] == t, f"{what}: token {i} {t!r} at {o}, the text there is "
              f"{text[o:o + len(t) + 8]!r} (text {text!r}, tokens {toks})")
    check("".join(toks) == text, f"{what}: the tokens join to {''.join(toks)!r}, not {text!r}")


def check_offsets_on(srv, what):
    """echo + logprobs, whole and streamed, n = 2, sampled (and with stop strings)."""
    for i, prompt in enumerate(OFFSET_PROMPTS):
        for stop in (None, ["e", "\n"]):
            body = {"prompt": prompt, "max_tokens": 12, "temperature": 1.0, "seed": i, "n": 2,
                    "echo": True, "logprobs": 2}
            if stop:
                body["stop"] = stop
            st, _, v = srv.post("/v1/completions", body)
            if st == 400 and prompt == "":
                continue  # a tokenizer that adds no BOS: "" has no token (case small_fields)
            check(st == 200, f"{what} {prompt!r}: {st} {v}")
            for c in v["choices"]:
                check_indexed(f"{what} {prompt!r} choice {c['index']}", c["text"], c["logprobs"])
            st, events, done = srv.stream("/v1/completions", dict(body, stream=True))
            check(st == 200 and done == 1, f"{what} {prompt!r} streamed: {st} {events}")
            texts, toks = {}, {}
            for e in events:
                for c in e["choices"]:
                    k = c["index"]
                    texts[k] = texts.get(k, "") + c["text"]
                    if c["logprobs"]:
                        t = toks.setdefault(k, {"tokens": [], "text_offset": []})
                        t["tokens"] += c["logprobs"]["tokens"]
                        t["text_offset"] += c["logprobs"]["text_offset"]
            for k in texts:
                check_indexed(f"{what} {prompt!r} streamed choice {k}", texts[k], toks[k])


def case_token_offsets():
    """Issue 26 item 1: echo + logprobs token strings and text_offset index the returned text
    exactly, for SentencePiece (tok512, the Llama 2 model), byte-level BPE (Llama 3, Qwen3)
    and a GGUF vocabulary."""
    d = models_dir()
    if not d:
        raise Skip("PAGELLM_TEST_MODELS unset")
    runs = [("stories260K", stories_args()),
            ("llama2-spm", ["--model", "dummy:stories15m", "--tokenizer",
                            os.path.join(d, "tokenizer.model"), "--threads", "1"])]
    tmp = tempfile.mkdtemp(prefix="pagellm-offsets-")
    q3 = os.path.join(tmp, "qwen3")
    write_zero_hf(q3, 151669, os.path.join(d, "qwen3"), [151645, 151643])
    l3 = os.path.join(tmp, "llama3")
    write_zero_hf(l3, 128256, os.path.join(d, "llama3"), 128009)
    gguf = os.path.join(tmp, "qwen3.gguf")
    p = subprocess.run([PAGELLM, "quantize", q3, gguf, "f16"], capture_output=True, text=True)
    check(p.returncode == 0, f"quantize: {p.stderr}")
    runs += [("qwen3", ["--model", q3, "--threads", "1"]),
             ("llama3", ["--model", l3, "--threads", "1"]),
             ("qwen3-gguf", ["--model", gguf, "--threads", "1"])]
    try:
        for what, args in runs:
            srv = Server(PAGELLM, args + ["--log-interval", "0"])
            try:
                check_offsets_on(srv, what)
            finally:
                srv.stop()
    finally:
        subprocess.run(["rm", "-rf", tmp])


def case_small_fields():
    """Issue 26 items 10 and 23: "" generates from BOS; max_tokens 3.0 is 3; stop [""] stops
    nothing; /tokenize's token_strs are the tokenizer's pieces, BOS's "<s>" included (vLLM's
    convert_ids_to_tokens)."""
    srv = Server(PAGELLM, stories_args())
    try:
        empty = completion(srv, {"prompt": "", "max_tokens": 30, "temperature": 0})
        bos = completion(srv, {"prompt": [1], "max_tokens": 30, "temperature": 0})
        check(empty["usage"]["prompt_tokens"] == 1, empty["usage"])
        text = empty["choices"][0]["text"]
        check(text == bos["choices"][0]["text"] and text.startswith("Once upon a time"), text)
        st, _, v = srv.post("/v1/completions", {"prompt": "", "add_special_tokens": False,
                                                "max_tokens": 4})
        check(st == 400 and v["error"]["param"] == "prompt" and "no tokens" in
              v["error"]["message"], f"{st} {v}")
        v = completion(srv, {"prompt": "Once", "max_tokens": 3.0, "temperature": 0})
        check(v["usage"]["completion_tokens"] == 3, v["usage"])
        st, _, v = srv.post("/v1/completions", {"prompt": "Once", "max_tokens": 2.5})
        check(st == 400 and v["error"]["param"] == "max_tokens", f"{st} {v}")
        a = completion(srv, {"prompt": "Once", "max_tokens": 20, "temperature": 0})
        for stop in ([""], "", ["", "zzz"]):
            b = completion(srv, {"prompt": "Once", "max_tokens": 20, "temperature": 0,
                                 "stop": stop})
            check(b["choices"][0]["text"] == a["choices"][0]["text"] and
                  b["choices"][0]["finish_reason"] == "length", f"stop {stop!r}: {b}")
        st, _, tok = srv.post("/tokenize", {"prompt": "Once upon a time",
                                            "return_token_strs": True})
        check(st == 200 and tok["token_strs"] == ["<s>", "\u2581Once", "\u2581upon", "\u2581a",
                                                  "\u2581time"], tok)
    finally:
        srv.stop()


def case_kv_sizing_logged():
    """Issue 26 item 17: the server says at start how big the KV cache is and why."""
    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--max-num-seqs", "4", "--max-model-len",
                           "64"])
    log = srv.stop()
    check("KV cache: " in log and "max_num_seqs 4 x max_model_len 64" in log, log)
    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--kv-cache-memory", "2M"])
    log = srv.stop()
    check("KV cache: 2.0 MiB" in log and "kv_cache_memory_bytes" in log, log)


def case_port_in_use():
    """Issue 26 item 23: a port in use is said so, with the port asked for (libmicrohttpd said
    "Failed to bind to port 0")."""
    srv = Server(PAGELLM, ["--model", "dummy:tiny"])
    try:
        p = subprocess.run([PAGELLM, "serve", "--model", "dummy:tiny", "--host", "127.0.0.1",
                            "--port", str(srv.port)], capture_output=True, text=True, timeout=60)
        check(p.returncode != 0, f"a second server on port {srv.port} started: {p.stderr}")
        want = f"127.0.0.1:{srv.port}"
        check(want in p.stderr and "in use" in p.stderr and "port 0" not in p.stderr,
              f"unclear: {p.stderr}")
    finally:
        srv.stop()


def case_metrics_per_step():
    """Issue 26 item 3: the token counters move while a request runs (vLLM counts per step),
    so a dashboard's tokens/s is not 0 until a burst at the end."""
    srv = Server(PAGELLM, SLOW + ["--log-interval", "0"])
    try:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
        body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 200, "ignore_eos": True,
                           "logprobs": 0, "stream": True}).encode()  # no tokenizer: no text
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                  b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                  b"\r\n\r\n" + body)
        got = b""
        while got.count(b"data: ") < 6:
            got += s.recv(65536)
        m = srv.metrics()
        check(m["pagellm:num_requests_running"] == 1, m)
        check(m["pagellm:prompt_tokens_total"] == 3, f"prompt tokens {m['pagellm:prompt_tokens_total']}")
        check(m["pagellm:generation_tokens_total"] >= 5,
              f"{m['pagellm:generation_tokens_total']} generation tokens counted after 6 chunks")
        s.close()
        idle_and_free(srv)
    finally:
        srv.stop()


def case_cors():
    """Issue 26 item 8: CORS as vLLM's server answers it (FastAPI's CORSMiddleware) with its
    flags and defaults: --allowed-origins, --allowed-methods, --allowed-headers (JSON lists,
    ["*"] by default) and --allow-credentials; preflights answered, refusals named."""
    def preflight(srv, origin, method, headers=None):
        h = {"Origin": origin, "Access-Control-Request-Method": method}
        if headers:
            h["Access-Control-Request-Headers"] = headers
        return srv.request("OPTIONS", "/v1/completions", headers=h)

    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--api-key", "k"])
    try:
        st, h, body = preflight(srv, "http://a.example", "POST", "content-type, authorization")
        check(st == 200 and body == "OK", f"preflight: {st} {body!r}")
        check(h.get("access-control-allow-origin") == "*", h)
        check("POST" in h.get("access-control-allow-methods", "") and
              "GET" in h["access-control-allow-methods"], h)
        check(h.get("access-control-allow-headers") == "content-type, authorization", h)
        check(h.get("access-control-max-age") == "600", h)
        check("access-control-allow-credentials" not in h, h)
        auth = {"Authorization": "Bearer k"}
        st, h, _ = srv.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2},
                            headers=dict(auth, Origin="http://a.example"))
        check(st == 200 and h.get("access-control-allow-origin") == "*", f"{st} {h}")
        st, h, _ = srv.get("/v1/models", headers={"Origin": "http://a.example"})
        check(st == 401 and h.get("access-control-allow-origin") == "*",
              f"an error answer carries them too: {st} {h}")
        st, h, _ = srv.post("/v1/completions", {"prompt": [1, 2], "max_tokens": 2}, headers=auth)
        check(st == 200 and "access-control-allow-origin" not in h, "no Origin, no CORS headers")
        st, h, _ = srv.request("OPTIONS", "/v1/completions")
        check(st == 405, f"an OPTIONS that is no preflight: {st}")
    finally:
        srv.stop()

    srv = Server(PAGELLM, ["--model", "dummy:tiny", "--allowed-origins", '["http://good.example"]',
                           "--allowed-methods", '["GET", "POST"]', "--allowed-headers",
                           '["Authorization"]', "--allow-credentials"])
    try:
        st, h, _ = preflight(srv, "http://good.example", "POST", "authorization, content-type")
        check(st == 200, f"{st} {h}")
        check(h.get("access-control-allow-origin") == "http://good.example" and
              h.get("vary") == "Origin" and h.get("access-control-allow-credentials") == "true", h)
        check(h.get("access-control-allow-methods") == "GET, POST", h)
        check(h.get("access-control-allow-headers") ==
              "Accept, Accept-Language, Authorization, Content-Language, Content-Type", h)
        for origin, method, hdrs, why in (("http://evil.example", "POST", None, "origin"),
                                          ("http://good.example", "PUT", None, "method"),
                                          ("http://good.example", "POST", "x-foo", "headers"),
                                          ("http://evil.example", "PUT", None, "origin, method")):
            st, h, body = preflight(srv, origin, method, hdrs)
            check(st == 400 and body == "Disallowed CORS " + why, f"{why}: {st} {body!r}")
        st, h, _ = srv.post("/v1/completions", {"prompt": [1], "max_tokens": 1},
                            headers={"Origin": "http://good.example"})
        check(st == 200 and h.get("access-control-allow-origin") == "http://good.example" and
              h.get("access-control-allow-credentials") == "true" and h.get("vary") == "Origin", h)
        st, h, _ = srv.post("/v1/completions", {"prompt": [1], "max_tokens": 1},
                            headers={"Origin": "http://evil.example"})
        check(st == 200 and "access-control-allow-origin" not in h, f"a foreign origin: {h}")
    finally:
        srv.stop()
    p = subprocess.run([PAGELLM, "serve", "--model", "dummy:tiny", "--allowed-origins", "*"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--allowed-origins" in p.stderr and "JSON" in p.stderr, p.stderr)


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}
# Cases that need pagellm linked with the CUDA emulation (pagellm_cuda_emu): not listed.
EMU_CASES = {name[9:]: fn for name, fn in globals().items() if name.startswith("emu_case_")}


def main():
    global PAGELLM
    if sys.argv[1:] == ["--list"]:  # tests/server/meson.build makes one test per case
        print("\n".join(CASES))
        return 0
    every = dict(CASES, **EMU_CASES)
    if len(sys.argv) != 3 or sys.argv[2] not in every:
        print(f"usage: {sys.argv[0]} PAGELLM CASE ({', '.join(every)})")
        return 2
    PAGELLM = sys.argv[1]
    try:
        every[sys.argv[2]]()
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
