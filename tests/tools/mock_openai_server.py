#!/usr/bin/env python3
"""A small OpenAI-compatible server for testing `pagellm bench serve` (no model behind it).

usage: mock_openai_server.py [--port N] [options]   (prints "PORT N" once it listens)

It streams deterministic completions: a request asking for N tokens (max_tokens, or
max_completion_tokens for chat) gets exactly N tokens, " t0 t1 ... t{N-1}", in chunks of
--tokens-per-chunk, the first after --ttft-ms and each later one --itl-ms after the previous;
then, when the request asked for it (stream_options.include_usage), a usage chunk whose
prompt_tokens is the length of a token-id prompt or the number of whitespace-separated words
of a text prompt; then "data: [DONE]". So every count and every delay a client measures is
known in advance.

--fail IDX:MODE,... makes the request whose X-Request-Id ends in "-IDX" fail:
  http    HTTP 500 with an OpenAI error object, no stream
  error   one chunk, then an error object in the stream, then [DONE]
  drop    one chunk, then the connection is closed in the middle of the chunked body
  nodone  the whole stream but no "data: [DONE]"
  garbage one chunk, then an event that is not JSON
  json    HTTP 200 with a whole completion as JSON (a server that ignores "stream")

GET /mock/stats returns what it saw: every completion request (index, path, body,
Authorization header, arrival and end times in seconds since the server started, whether it
was cut) and the peak number of completion requests open at once.
"""
import argparse
import json
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

T0 = time.monotonic()
LOCK = threading.Lock()
STATE = {"active": 0, "peak": 0, "requests": []}
ARGS = None


def now():
    return time.monotonic() - T0


def prompt_tokens(body, chat):
    if chat:
        return sum(len(str(m.get("content", "")).split()) for m in body.get("messages", []))
    p = body.get("prompt")
    if isinstance(p, list):
        return len(p)
    return len(str(p).split())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def send_json(self, status, obj, extra=()):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def authorized(self):
        if not ARGS.api_key:
            return True
        if self.headers.get("Authorization") == f"Bearer {ARGS.api_key}":
            return True
        self.send_json(401, {"error": {"message": "invalid or missing API key",
                                       "type": "invalid_request_error", "param": None,
                                       "code": "invalid_api_key"}})
        return False

    def do_GET(self):
        if self.path == "/mock/stats":
            with LOCK:
                self.send_json(200, {"peak_concurrency": STATE["peak"],
                                     "requests": list(STATE["requests"])})
            return
        if self.path == "/v1/models":
            if not self.authorized():
                return
            model = {"id": ARGS.model, "object": "model", "created": 0, "owned_by": "mock"}
            if ARGS.vocab:
                model["meta"] = {"n_vocab": ARGS.vocab}
            if ARGS.max_model_len:
                model["max_model_len"] = ARGS.max_model_len
            self.send_json(200, {"object": "list", "data": [model]})
            return
        self.send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

    # -- streaming --------------------------------------------------------------------------

    def chunk(self, data: bytes):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, obj):
        text = obj if isinstance(obj, str) else json.dumps(obj)
        self.chunk(f"data: {text}\n\n".encode())

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        chat = self.path == "/v1/chat/completions"
        if self.path == "/tokenize" and ARGS.tokenize_max_id:
            # vLLM's /tokenize: an id per word, in [0, tokenize_max_id], the largest the last
            words = json.loads(raw).get("prompt", "").split()
            ids = [7 + len(w) for w in words[:-1]] + [ARGS.tokenize_max_id] if words else []
            with LOCK:
                STATE["requests"].append({"index": -1, "path": self.path, "body": json.loads(raw),
                                          "arrival": now(), "end": now(), "cut": False})
            self.send_json(200, {"count": len(ids), "max_model_len": 0, "tokens": ids,
                                 "token_strs": None})
            return
        if self.path not in ("/v1/completions", "/v1/chat/completions"):
            self.send_json(404, {"error": {"message": f"no route {self.path}"}})
            return
        if not self.authorized():
            return
        body = json.loads(raw)
        rid = self.headers.get("X-Request-Id", "")
        index = int(rid.rsplit("-", 1)[1]) if rid.rsplit("-", 1)[-1].isdigit() else -1
        rec = {"index": index, "path": self.path, "body": body,
               "auth": self.headers.get("Authorization"), "arrival": now(), "cut": False}
        with LOCK:
            STATE["active"] += 1
            STATE["peak"] = max(STATE["peak"], STATE["active"])
        try:
            self.stream(body, chat, index, rec)
        except (BrokenPipeError, ConnectionResetError):
            rec["cut"] = True
        finally:
            rec["end"] = now()
            with LOCK:
                STATE["active"] -= 1
                STATE["requests"].append(rec)

    def stream(self, body, chat, index, rec):
        mode = ARGS.fail.get(index)
        if mode == "http":
            self.send_json(500, {"error": {"message": f"mock failure of request {index}",
                                           "type": "server_error", "param": None,
                                           "code": 500}})
            return
        if mode == "json":
            choice = {"index": 0, "text": " t0", "finish_reason": "length"}
            self.send_json(200, {"object": "text_completion", "choices": [choice]})
            return
        n = int(body.get("max_completion_tokens" if chat else "max_tokens", 16))
        usage = (body.get("stream_options") or {}).get("include_usage") and not ARGS.no_usage
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        obj_kind = "chat.completion.chunk" if chat else "text_completion"
        base = {"id": f"cmpl-{index}", "object": obj_kind, "created": 0, "model": ARGS.model}
        if chat and ARGS.role_chunk:
            self.event(dict(base, choices=[{"index": 0, "delta": {"role": "assistant",
                                                                   "content": ""},
                                            "finish_reason": None}]))
        k = ARGS.tokens_per_chunk
        groups = [list(range(i, min(i + k, n))) for i in range(0, n, k)]
        time.sleep(ARGS.ttft_ms / 1000)
        for ci, g in enumerate(groups):
            if ci > 0:
                time.sleep(ARGS.itl_ms / 1000)
            if ci == 1 and mode == "error":
                self.event({"error": {"message": f"mock error object in request {index}",
                                      "type": "server_error", "code": 500}})
                self.event("[DONE]")
                self.chunk(b"")
                return
            if ci == 1 and mode == "garbage":
                self.event("this is not json")
                self.event("[DONE]")
                self.chunk(b"")
                return
            if ci == 1 and mode == "drop":
                rec["cut"] = True
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            text = "".join(f" t{j}" for j in g)
            last = ci == len(groups) - 1 and not ARGS.final_empty_chunk
            choice = {"index": 0, "finish_reason": "length" if last else None}
            if chat:
                choice["delta"] = {"content": text}
            else:
                choice["text"] = text
            if ARGS.token_ids:
                choice["token_ids"] = [100 + j for j in g]
            self.event(dict(base, choices=[choice]))
        if ARGS.final_empty_chunk:
            choice = {"index": 0, "finish_reason": "length"}
            choice.update({"delta": {}} if chat else {"text": ""})
            self.event(dict(base, choices=[choice]))
        if usage:
            p = prompt_tokens(body, chat)
            self.event(dict(base, choices=[], usage={"prompt_tokens": p, "completion_tokens": n,
                                                     "total_tokens": p + n}))
        if mode != "nodone":
            self.event("[DONE]")
        self.chunk(b"")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256

    def handle_error(self, request, client_address):
        # a client that closes a connection (after a failure it provoked) is not an error here
        if not isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError)):
            super().handle_error(request, client_address)


def parse_fail(spec):
    out = {}
    for item in filter(None, spec.split(",")):
        idx, mode = item.split(":")
        assert mode in ("http", "error", "drop", "nodone", "garbage", "json"), mode
        out[int(idx)] = mode
    return out


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="mock-model")
    ap.add_argument("--ttft-ms", type=float, default=50)
    ap.add_argument("--itl-ms", type=float, default=20)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--token-ids", action="store_true")
    ap.add_argument("--role-chunk", action="store_true")
    ap.add_argument("--final-empty-chunk", action="store_true")
    ap.add_argument("--fail", type=parse_fail, default={})
    ap.add_argument("--api-key")
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--tokenize-max-id", type=int, default=0,
                    help="answer POST /tokenize, the largest id being this one (0: no route)")
    ap.add_argument("--max-model-len", type=int, default=0)
    ARGS = ap.parse_args()
    srv = Server(("127.0.0.1", ARGS.port), Handler)
    print(f"PORT {srv.server_address[1]}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
