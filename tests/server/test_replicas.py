#!/usr/bin/env python3
"""What routers and balancers read from `pagellm serve` (docs/server.md, "Behind a balancer").

usage: test_replicas.py PAGELLM CASE

- metrics_contract: /metrics parsed by the Prometheus client library's own text parser
  (Debian python3-prometheus-client, an independent reader): every family well formed, and
  the names, types and labels the Gateway API Inference Extension and llm-d read from vLLM
  (vllm:num_requests_waiting, vllm:num_requests_running, vllm:kv_cache_usage_perc,
  vllm:gpu_cache_usage_perc: gauges with model_name and engine; vllm:cache_config_info: a gauge
  of 1 whose block_size and num_gpu_blocks labels are the pool's) holding the engine's state
  while a request waits and while it runs.
- metrics_during_step: scrapes are answered while the stepping thread is inside a long step
  (PAGELLM_FAULT_SLOW_FORWARD holds one step for seconds): endpoint pickers scrape every 50 ms.
- agent: the HAProxy agent check (--agent-port): "up ready 100%" idle, the weight falling with
  a waiting request, "drain" after SIGTERM while a request finishes.
- kv_events: the ZeroMQ prefix-cache events (--kv-events-config) read by a subscriber written
  with Debian's python3-zmq and python3-msgpack: vLLM's batch layout and sequence numbers on
  the PUB socket and the replay socket (the same bytes), every BlockStored's hashes equal to
  vLLM's sha256_cbor chain computed here with python3-cbor2 and hashlib from the request's
  token ids, shared prefixes not stored twice, evicted blocks removed exactly once, for both
  hash forms (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, PYTHONHASHSEED); bad configurations refused
  with the key named.

The Debian modules live in /usr/bin/python3's path; under another interpreter the script
re-runs itself there. Exit 0 pass, 1 fail, 77 skip.
"""
import hashlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_util import Failure, Server, check, wait_for  # noqa: E402

PAGELLM = None
TINY = ["--model", "dummy:tiny", "--threads", "1", "--log-interval", "0"]
SLOW_ID = 7  # PAGELLM_FAULT_SLOW_FORWARD's token: prompts starting with it make slow steps


class Skip(Exception):
    pass


def need_modules(*names):
    """Imports the Debian modules, re-running the script under /usr/bin/python3 when this
    interpreter lacks them."""
    try:
        return [__import__(n) for n in names]
    except ImportError as e:
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
                and os.path.exists("/usr/bin/python3") and not os.environ.get("PL_REEXEC"):
            os.environ["PL_REEXEC"] = "1"
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        raise Failure(f"{e}: install {', '.join('python3-' + n for n in names)} "
                      "(scripts/install-deps.sh)")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def completion(srv, body):
    st, _, v = srv.post("/v1/completions", body)
    check(st == 200, f"/v1/completions {body}: {st} {v}")
    return v


def families(srv):
    """{name: family} from the Prometheus client's own parser."""
    need_modules("prometheus_client")
    from prometheus_client.parser import text_string_to_metric_families
    st, h, text = srv.get("/metrics")
    check(st == 200 and h.get("content-type", "").startswith("text/plain; version=0.0.4"),
          f"/metrics: {st} {h}")
    out = {}
    for f in text_string_to_metric_families(text):
        check(f.name not in out, f"family {f.name} declared twice")
        out[f.name] = f
    return out


def vllm_view(fams):
    def one(name, kind="gauge"):
        f = fams.get(name)
        check(f is not None, f"/metrics has no {name}")
        check(f.type == kind, f"{name} is a {f.type}, not a {kind}")
        check(len(f.samples) == 1, f"{name}: {f.samples}")
        return f.samples[0]
    view = {}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"):
        s = one(name)
        check(s.name == name and set(s.labels) == {"model_name", "engine"}
              and s.labels["engine"] == "0", f"{name}'s labels: {s.labels}")
        view[name] = s.value
    info = one("vllm:cache_config_info")
    check(info.value == 1, f"cache_config_info = {info.value}")
    view["info"] = info.labels
    check(view["vllm:gpu_cache_usage_perc"] == view["vllm:kv_cache_usage_perc"], view)
    check(0 <= view["vllm:kv_cache_usage_perc"] <= 1, view)
    return view


def slow_request(srv, out, n_prompt=20, max_tokens=1):
    """A completion whose every step takes PAGELLM_FAULT_SLOW_FORWARD's seconds; records when it
    ended in out["done"]."""
    def run():
        try:
            out["v"] = completion(srv, {"prompt": [SLOW_ID] + [11] * (n_prompt - 1),
                                        "max_tokens": max_tokens, "temperature": 0,
                                        "ignore_eos": True})
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            out["error"] = e
        out["done"] = time.monotonic()
    t = threading.Thread(target=run)
    t.start()
    return t


# ------------------------------------------------------------------------------------------
# cases
# ------------------------------------------------------------------------------------------

def case_metrics_contract():
    srv = Server(PAGELLM, TINY + ["--max-num-blocks", "64", "--block-size", "16"],
                 env={"PAGELLM_FAULT_SLOW_FORWARD": f"{SLOW_ID}:0.6"})
    try:
        fams = families(srv)
        for name, f in fams.items():
            check(f.type in ("gauge", "counter", "histogram"), f"{name}: type {f.type}")
            check(name.startswith(("pagellm:", "vllm:")) and f.documentation, name)
        v = vllm_view(fams)
        check(v["vllm:num_requests_running"] == 0 and v["vllm:num_requests_waiting"] == 0
              and v["vllm:kv_cache_usage_perc"] == 0, v)
        info = v["info"]
        check(info["block_size"] == "16" and info["num_gpu_blocks"] == "64"
              and info["enable_prefix_caching"] == "True" and info["engine"] == "0", info)
        st, _, health = srv.get("/health")
        check(int(info["num_gpu_blocks"]) == health["kv_blocks_total"], health)

        # one request of 20 prompt tokens (2 blocks of 16 with its first output token), three
        # slow steps: seen waiting (until its first step ends), then running with 2 of 64 blocks
        out = {}
        t = slow_request(srv, out, n_prompt=20, max_tokens=3)
        seen = set()
        while "done" not in out:
            v = vllm_view(families(srv))
            seen.add((v["vllm:num_requests_waiting"], v["vllm:num_requests_running"],
                      v["vllm:kv_cache_usage_perc"]))
            time.sleep(0.05)
        t.join()
        check("error" not in out, out.get("error"))
        check((1, 0, 0) in seen, f"never seen waiting: {seen}")
        check((0, 1, 2 / 64) in seen, f"never seen running with 2 of 64 blocks: {seen}")
        v = wait_for(lambda: (lambda x: x if x["vllm:num_requests_running"] == 0 else None)(
            vllm_view(families(srv))), 10, "the request to leave")
        check(v["vllm:num_requests_waiting"] == 0 and v["vllm:kv_cache_usage_perc"] == 0, v)
    finally:
        srv.stop()


def case_metrics_during_step():
    srv = Server(PAGELLM, TINY, env={"PAGELLM_FAULT_SLOW_FORWARD": f"{SLOW_ID}:2.5"})
    try:
        srv.metrics()  # warm: the connection path and the first snapshot
        out = {}
        t = slow_request(srv, out)  # one step of 2.5 s
        wait_for(lambda: srv.metrics()["vllm:num_requests_waiting{engine=0}"] == 1 or
                 "done" in out, 10, "the request to reach the engine")
        answered = []
        while "done" not in out:
            srv.metrics()
            answered.append(time.monotonic())
        t.join()
        check("error" not in out, out.get("error"))
        # A scrape that waited for the step would end with it: one at most before the end.
        during = [a for a in answered if a < out["done"]]
        check(len(during) >= 5, f"{len(during)} scrapes answered during a 2.5 s step")
    finally:
        srv.stop()


def case_metrics_stale_snapshot():
    """A scrape during a step with no snapshot taken since the previous step must not get an
    older one (the start's, where nothing ran): it waits for the step's end instead. The agent
    port, which reads no snapshot, tells when the request runs without asking /metrics."""
    port = free_port()
    srv = Server(PAGELLM, TINY + ["--max-num-blocks", "64", "--block-size", "16",
                                  "--agent-port", str(port)],
                 env={"PAGELLM_FAULT_SLOW_FORWARD": f"{SLOW_ID}:1"})
    try:
        m = srv.metrics()  # the last snapshot before the request: nothing running
        check(m["pagellm:num_requests_running"] == 0, m)
        out = {}
        t = slow_request(srv, out, max_tokens=4)  # four steps of 1 s
        # running (drained into step 2, or retired from step 1): 2 of 64 blocks, none waiting
        wait_for(lambda: agent_line(port) not in ("up ready 100%\n", "up ready 50%\n"), 10,
                 "the request to run")
        time.sleep(0.3)  # inside step 2, no scrape since the one above
        m = srv.metrics()
        check(m["pagellm:num_requests_running"] == 1 and m["pagellm:num_requests_waiting"] == 0,
              f"running {m['pagellm:num_requests_running']}, waiting "
              f"{m['pagellm:num_requests_waiting']} during step 2")
        check(m["vllm:num_requests_running{engine=0}"] == 1, m)
        m = srv.metrics()  # the snapshot the first one asked for, from before step 3
        check(m["pagellm:num_requests_running"] == 1, m)
        t.join()
        check("error" not in out, out.get("error"))
    finally:
        srv.stop()


def agent_line(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        data = b""
        while True:
            chunk = s.recv(256)
            if not chunk:
                return data.decode()
            data += chunk


def case_agent():
    port = free_port()
    srv = Server(PAGELLM, TINY + ["--agent-port", str(port)],
                 env={"PAGELLM_FAULT_SLOW_FORWARD": f"{SLOW_ID}:1.5"})
    try:
        check(agent_line(port) == "up ready 100%\n", "idle")
        out = {}
        t = slow_request(srv, out)
        # while its one (slow) step runs it counts as waiting, the pool empty: 100 / (1 + 1)
        line = wait_for(lambda: (lambda x: x if x != "up ready 100%\n" else None)(
            agent_line(port)), 10, "the agent to see the request")
        check(line == "up ready 50%\n", line)
        t.join()
        check("error" not in out, out.get("error"))
        check(agent_line(port) == "up ready 100%\n", "idle again")

        out = {}
        t = slow_request(srv, out)
        wait_for(lambda: agent_line(port) != "up ready 100%\n", 10, "the request")
        srv.proc.send_signal(signal.SIGTERM)
        wait_for(lambda: agent_line(port) == "drain\n", 10, "\"drain\" after SIGTERM")
        st, _, h = srv.get("/health")
        check(st == 503 and h["status"] == "draining", f"{st} {h}")
        t.join()
        check("error" not in out and out["v"]["choices"][0]["finish_reason"] == "length",
              out.get("error"))
    finally:
        srv.stop()


# ---- KV events -----------------------------------------------------------------------------

class Subscriber:
    """vLLM's KV event stream, as llm-d's and Dynamo's subscribers read it."""

    def __init__(self, pub_ep, replay_ep, topic):
        self.zmq, self.msgpack = need_modules("zmq", "msgpack")
        self.ctx = self.zmq.Context()
        self.sub = self.ctx.socket(self.zmq.SUB)
        self.sub.setsockopt(self.zmq.SUBSCRIBE, topic.encode())
        self.sub.connect(pub_ep)
        self.replay_ep = replay_ep
        self.topic = topic
        self.live = {}

    def poll_live(self, timeout_ms=0):
        while self.sub.poll(timeout_ms):
            frames = self.sub.recv_multipart()
            check(len(frames) == 3 and frames[0] == self.topic.encode(), f"frames {frames[:2]}")
            check(len(frames[1]) == 8, "sequence frame")
            self.live[int.from_bytes(frames[1], "big")] = frames[2]
            timeout_ms = 0

    def replay(self, start):
        """[(seq, payload)] from the replay socket, up to its end marker."""
        req = self.ctx.socket(self.zmq.DEALER)
        req.connect(self.replay_ep)
        req.send_multipart([b"", start.to_bytes(8, "big")])
        got = []
        while True:
            check(req.poll(10000), "the replay socket did not answer")
            frames = req.recv_multipart()
            check(len(frames) == 3 and frames[0] == b"", f"replay frames {frames[:2]}")
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq == -1:
                check(frames[2] == b"", "end marker payload")
                break
            got.append((seq, frames[2]))
        req.close(0)
        return got

    def decode(self, payload):
        return self.msgpack.unpackb(payload, raw=False, strict_map_key=False)

    def close(self):
        self.sub.close(0)
        self.ctx.term()


def sha256_cbor(obj):
    """vLLM's sha256_cbor (vllm/utils/hashing.py), written from its definition."""
    (cbor2,) = need_modules("cbor2")
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def run_kv_events(seed, int_hashes):
    tag = f"{os.getpid()}-{int(int_hashes)}"
    pub_ep, replay_ep = f"ipc:///tmp/pagellm-kvev-{tag}", f"ipc:///tmp/pagellm-kvev-{tag}-replay"
    bs, n_blocks = 4, 24
    cfg = ('{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "%s", '
           '"replay_endpoint": "%s", "topic": "kv@%s"}' % (pub_ep, replay_ep, tag))
    env = {"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES": "1" if int_hashes else "0"}
    if seed is not None:
        env["PYTHONHASHSEED"] = seed
    else:
        os.environ.pop("PYTHONHASHSEED", None)
    srv = Server(PAGELLM, TINY + ["--block-size", str(bs), "--max-num-blocks", str(n_blocks),
                                  "--kv-events-config", cfg], env=env)
    sub = Subscriber(pub_ep, replay_ep, f"kv@{tag}")
    try:
        time.sleep(0.3)  # the SUB's connection (a late joiner misses batches; replay has them)
        base = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]         # 3 full blocks
        prompts = [base + [7, 7],                              # 3 blocks + 2 tokens
                   base[:8] + [0, 0, 0, 0, 1],                 # shares 2 blocks
                   base + [7, 7]]                              # all 3 cached
        outs = []
        for p in prompts:
            v = completion(srv, {"prompt": p, "max_tokens": 4, "temperature": 0,
                                 "ignore_eos": True})
            outs.append(v)
        # then enough distinct prompts that cached blocks are evicted (24 blocks in the pool)
        for k in range(12):
            completion(srv, {"prompt": [20 + k] * 9, "max_tokens": 3, "temperature": 0,
                             "ignore_eos": True})

        batches = sub.replay(0)
        check(batches, "no batch")
        check([s for s, _ in batches] == list(range(len(batches))), "sequence numbers 0, 1, ...")
        sub.poll_live(500)
        for seq, payload in batches:
            if seq in sub.live:
                check(sub.live[seq] == payload, f"batch {seq}: the PUB and replay bytes differ")
        check(len(sub.live) > 0, "nothing arrived on the PUB socket")
        tail = sub.replay(len(batches) - 1)
        check([s for s, _ in tail] == [len(batches) - 1], f"replay from the last: {tail}")

        none_hash = sha256_cbor(seed if seed is not None else "vllm-none-hash")
        full = {}    # wire hash -> full digest, for the blocks the index holds now
        chains = {}  # wire hash -> the token ids from the start of the sequence
        stores = {}  # wire hash -> how many times stored
        removed = 0

        def wire(h):
            return int.from_bytes(h[24:], "big") if int_hashes else h

        for seq, payload in batches:
            b = sub.decode(payload)
            check(isinstance(b, list) and len(b) == 3, f"batch {seq}: {b!r:.200}")
            ts, events, dp_rank = b
            check(isinstance(ts, float) and abs(ts - time.time()) < 600 and dp_rank == 0, b[0])
            for ev in events:
                kind = ev[0]
                if kind == "BlockStored":
                    check(len(ev) == 8, f"BlockStored fields: {ev}")
                    _, hashes, parent, tokens, block_size, lora_id, medium, lora_name = ev
                    check(block_size == bs and lora_id is None and lora_name is None
                          and medium == "GPU", ev)
                    check(len(tokens) == len(hashes) * bs and hashes, ev)
                    if parent is None:
                        prev, prefix = none_hash, []
                    else:
                        check(parent in full, f"BlockStored under an unknown parent {parent!r}")
                        prev, prefix = full[parent], chains[parent]
                    for i, h in enumerate(hashes):
                        blk = tokens[i * bs:(i + 1) * bs]
                        digest = sha256_cbor((prev, tuple(blk), None))
                        check(h == wire(digest), f"batch {seq}: hash {h!r} != sha256_cbor "
                              f"{wire(digest)!r} of {blk} under {prev.hex()[:16]}")
                        check(h not in full, f"block {h!r} stored twice without a removal")
                        prev, prefix = digest, prefix + blk
                        full[h], chains[h] = digest, prefix
                        stores[h] = stores.get(h, 0) + 1
                elif kind == "BlockRemoved":
                    check(len(ev) == 3 and ev[2] == "GPU", ev)
                    for h in ev[1]:
                        check(h in full, f"removed {h!r}, never stored (or removed twice)")
                        del full[h]
                        removed += 1
                else:
                    raise Failure(f"unexpected event {ev}")
        # the first three requests share `base`: its 3 blocks were stored once, and every
        # chain starting in a prompt follows that prompt's tokens
        base_hashes = [h for h, c in chains.items() if c in (base[:4], base[:8], base[:12])]
        check(len(base_hashes) == 3 and all(stores[h] == 1 for h in base_hashes),
              f"base blocks: {[(chains[h], stores[h]) for h in base_hashes]}")
        for c in chains.values():
            starts = [p for p in prompts if p[:bs] == c[:bs]] + \
                     [[20 + k] * 9 for k in range(12) if c[:bs] == [20 + k] * bs]
            check(any(c[:len(p)] == p[:len(c)] for p in starts), f"a chain of no prompt: {c}")
        check(removed > 0, "no block was evicted from a 24-block pool")
        return len(batches), len(stores), removed
    finally:
        sub.close()
        srv.stop()


def case_kv_events():
    need_modules("zmq", "msgpack", "cbor2")
    n1 = run_kv_events(None, True)
    n2 = run_kv_events("0", False)
    print(f"kv events: int hashes: {n1[0]} batches, {n1[1]} blocks stored, {n1[2]} removed; "
          f"32-byte hashes with PYTHONHASHSEED=0: {n2[0]} batches, {n2[1]} stored, "
          f"{n2[2]} removed")
    # refusals name what to fix, before the model loads
    for cfg, needle in (('{"endpiont": "tcp://*:1"}', 'unknown key "endpiont"'),
                        ('{"enable_kv_cache_events": true, "endpoint": "nonsense://x"}',
                         "kv_events_config.endpoint")):
        p = subprocess.run([PAGELLM, "serve", "--port", "0"] + TINY + ["--kv-events-config", cfg],
                           capture_output=True, text=True, timeout=60)
        check(p.returncode != 0 and needle in p.stderr, f"{cfg}: rc {p.returncode} {p.stderr}")
    p = subprocess.run([PAGELLM, "serve", "--port", "0"] + TINY +
                       ["--kv-events-config.enable_kv_cache_events", "true",
                        "--kv-events-config.endpoint=nonsense://y"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and "cannot connect to nonsense://y" in p.stderr,
          f"dotted flags: rc {p.returncode} {p.stderr}")


CASES = {name[5:]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")}


def main():
    global PAGELLM
    if sys.argv[1:] == ["--list"]:
        print("\n".join(CASES))
        return 0
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        print(f"usage: {sys.argv[0]} PAGELLM CASE ({', '.join(CASES)})")
        return 2
    PAGELLM = sys.argv[1]
    # Re-run under /usr/bin/python3 now if need be, before any server starts: an exec in the
    # middle of a case would leave its server running with no one to stop it. A module still
    # missing fails the cases that need it, by name.
    try:
        need_modules("prometheus_client", "zmq", "msgpack", "cbor2")
    except Failure:
        pass
    try:
        CASES[sys.argv[2]]()
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
