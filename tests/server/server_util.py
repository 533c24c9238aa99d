"""Starting and talking to `pagellm serve` from tests, with the standard library only.

A server is started on 127.0.0.1 with --port 0 (the kernel picks a free port; the server logs
it), stopped with SIGTERM, and must exit 0 with no sanitizer report in its log.
"""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def models_dir():
    d = os.environ.get("PAGELLM_TEST_MODELS")
    return d if d and os.path.isfile(os.path.join(d, "stories260K.bin")) else None


class Server:
    def __init__(self, pagellm, args, env=None, ready_timeout=120, launcher=()):
        self.log = tempfile.NamedTemporaryFile(prefix="pagellm-serve-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        full_env.pop("PAGELLM_API_KEY", None)
        if env:
            full_env.update(env)
        # launcher: words before the command (["mpirun", "-n", "2"]: tests/dist)
        self.proc = subprocess.Popen(list(launcher) +
                                     [pagellm, "serve", "--port", "0", "--host", "127.0.0.1"] + args,
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=full_env)
        self.port = None
        deadline = time.time() + ready_timeout
        while time.time() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.text())
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise Failure(f"pagellm serve exited {self.proc.returncode}:\n{self.text()}")
            time.sleep(0.05)
        self.proc.kill()
        raise Failure(f"pagellm serve did not start in {ready_timeout} s:\n{self.text()}")

    def text(self):
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout=120, expect_rc=0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failure(f"pagellm serve did not stop in {timeout} s after SIGTERM:\n"
                          f"{self.text()[-4000:]}")
        log = self.text()
        check("Sanitizer" not in log and "runtime error:" not in log,
              f"sanitizer report in the server's log:\n{log[-8000:]}")
        check(rc == expect_rc, f"pagellm serve exited {rc}, expected {expect_rc}:\n{log[-4000:]}")
        os.unlink(self.log.name)
        return log

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    # ---- requests ---------------------------------------------------------------------------

    def conn(self, timeout=120):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=120, conn=None):
        """(status, headers dict (lower-case names), parsed JSON or text)."""
        c = conn or self.conn(timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        hdrs = {"Content-Type": "application/json"} if data is not None else {}
        hdrs.update(headers or {})
        c.request(method, path, body=data, headers=hdrs)
        r = c.getresponse()
        raw = r.read()
        h = {k.lower(): v for k, v in r.getheaders()}
        if conn is None:
            c.close()
        if h.get("content-type", "").startswith("application/json"):
            return r.status, h, json.loads(raw)
        return r.status, h, raw.decode("utf-8", errors="replace")

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def stream(self, path, body, headers=None, timeout=120):
        """(status, [parsed data objects], done_count) of an SSE response."""
        c = self.conn(timeout)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        c.request("POST", path, body=json.dumps(body), headers=hdrs)
        r = c.getresponse()
        if r.status != 200:
            raw = r.read()
            c.close()
            return r.status, [json.loads(raw)], 0
        check(r.getheader("Content-Type", "").startswith("text/event-stream"),
              f"stream content type {r.getheader('Content-Type')}")
        events, done = [], 0
        buf = b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                check(ev.startswith(b"data: "), f"not an SSE data event: {ev[:200]!r}")
                payload = ev[6:]
                if payload == b"[DONE]":
                    done += 1
                else:
                    check(done == 0, "an event after [DONE]")
                    events.append(json.loads(payload))
        check(buf == b"", f"trailing bytes after the last event: {buf[:200]!r}")
        c.close()
        return 200, events, done

    def metrics(self):
        status, _, text = self.get("/metrics")
        check(status == 200, f"/metrics: {status} {text}")
        values = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.fullmatch(r"(pagellm:[a-z0-9_]+)(\{[^}]*\})? (\S+)", line)
            check(m, f"not a Prometheus sample line: {line!r}")
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            labels.pop("model_name", None)
            key = m.group(1) + ("{" + ",".join(f"{k}={v}" for k, v in sorted(labels.items())) + "}"
                                if labels else "")
            values[key] = float(m.group(3))
        return values


def stream_text(events, kind="completion"):
    """{choice index: joined text}, {choice index: finish reasons}, usage (or None)."""
    texts, finishes, usage = {}, {}, None
    for e in events:
        check("error" not in e, f"error event: {e}")
        if e.get("usage"):
            check(e["choices"] == [], "the usage chunk has no choices")
            check(usage is None, "two usage chunks")
            usage = e["usage"]
            continue
        for c in e["choices"]:
            i = c["index"]
            piece = c["delta"].get("content") if kind == "chat" else c["text"]
            texts[i] = texts.get(i, "") + (piece or "")
            if c.get("finish_reason"):
                finishes.setdefault(i, []).append(c["finish_reason"])
    return texts, finishes, usage


def raw_http(port, data, timeout=10, read=True):
    """Sends bytes on a fresh socket; returns what came back before the server closed (or the
    timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(data)
    out = b""
    if read:
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
    s.close()
    return out


def wait_for(cond, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise Failure(f"timed out after {timeout} s waiting for {what}")
