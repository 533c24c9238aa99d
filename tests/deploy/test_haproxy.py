#!/usr/bin/env python3
"""deploy/haproxy/haproxy.cfg, run as written: two `pagellm serve` replicas and HAProxy on
127.0.0.1 (free ports; everything stopped at the end).

usage: test_haproxy.py PAGELLM

1. Prefix affinity against round robin, each on fresh replicas (cold caches), on the same
   shared-prefix workload: 5 groups of 4 prompts, each prompt a group's 300-character prefix
   and a question of its own, sent one at a time. Round robin is the recipe with its hash
   line replaced by "balance roundrobin". With affinity every group stays on one replica
   (the X-Pagellm-Replica header HAProxy adds) and the replicas' prefix-cache hit rate
   (/metrics, pagellm:prefix_cache_hits_total over _queries_total, both replicas) is higher
   than round robin's, which sends every group to both.
2. The agent check: HAProxy's own statistics (its stats socket, added to the recipe's global
   section here) show every agent check passing (L7OK) with weight 100 when idle, and a
   replica's weight falling to 50 while a request waits on it.
3. A replica killed (SIGKILL): the next requests all succeed, on the other replica, and
   HAProxy marks the dead one DOWN.

The replicas are dummy:tiny with the tok512 tokenizer of tests/data (text prompts, no model
files). SKIP (77) when haproxy is not installed (Debian's haproxy; CI installs it).
Exit 0 pass, 1 fail, 77 skip.
"""
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "server"))
from server_util import Failure, Server, check, wait_for  # noqa: E402

RECIPE = os.path.join(ROOT, "deploy", "haproxy", "haproxy.cfg")
SLOW_ID = 7  # PAGELLM_FAULT_SLOW_FORWARD's token


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Replica(Server):
    def __init__(self, pagellm):
        self.agent_port = free_port()
        super().__init__(pagellm, ["--model", "dummy:tiny", "--tokenizer",
                                   os.path.join(ROOT, "tests", "data", "tok512_hf"),
                                   "--threads", "1", "--log-interval", "0",
                                   "--max-num-blocks", "512", "--agent-port",
                                   str(self.agent_port)],
                         env={"PAGELLM_FAULT_SLOW_FORWARD": f"{SLOW_ID}:3"})

    def counters(self):
        m = self.metrics()
        return m["pagellm:prefix_cache_hits_total"], m["pagellm:prefix_cache_queries_total"]


class HAProxy:
    def __init__(self, haproxy, cfg_text, replicas):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="pagellm-haproxy-")
        self.sock = os.path.join(self.dir, "stats.sock")
        cfg_text = cfg_text.replace("global\n", f"global\n    stats socket {self.sock} level admin\n", 1)
        self.cfg = os.path.join(self.dir, "haproxy.cfg")
        with open(self.cfg, "w") as f:
            f.write(cfg_text)
        env = dict(os.environ, PAGELLM_LISTEN=f"127.0.0.1:{self.port}")
        for i, r in enumerate(replicas, 1):
            env[f"PAGELLM_R{i}"] = f"127.0.0.1:{r.port}"
            env[f"PAGELLM_R{i}_AGENT"] = str(r.agent_port)
        self.log = open(os.path.join(self.dir, "haproxy.log"), "w+")
        self.proc = subprocess.Popen([haproxy, "-f", self.cfg, "-db"], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env)
        wait_for(lambda: os.path.exists(self.sock) or self.proc.poll() is not None, 20,
                 "haproxy to start")
        check(self.proc.poll() is None, f"haproxy exited:\n{self.text()}")

    def text(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def request(self, method, path, body=None):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"} if body is not None else {})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, r.getheader("X-Pagellm-Replica"), data

    def stats(self):
        """{(backend, server): row} from "show stat"."""
        s = socket.socket(socket.AF_UNIX)
        s.connect(self.sock)
        s.sendall(b"show stat\n")
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
        s.close()
        lines = out.decode().splitlines()
        head = lines[0].lstrip("# ").split(",")
        rows = {}
        for line in lines[1:]:
            if line:
                row = dict(zip(head, line.split(",")))
                rows[(row["pxname"], row["svname"])] = row
        return rows

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        text = self.text()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return text


PREFIX = ("Group {g}: Once upon a time there was a little girl named Lily who loved to play in "
          "the park with her dog. Every morning she packed a small bag with an apple, a book "
          "and a red ball, and walked along the river to the old oak tree where her friends "
          "met. One day the sky turned grey and a strong wind began to blow across the water. ")


def workload(hp, groups=5, rounds=4):
    """Sends the prompts one at a time; returns {group: [replica per request]}."""
    served = {g: [] for g in range(groups)}
    for r in range(rounds):
        for g in range(groups):
            body = {"prompt": PREFIX.format(g=g) + f"Question {r} for group {g}: what next?",
                    "max_tokens": 2, "temperature": 0}
            st, replica, data = hp.request("POST", "/v1/completions", body)
            check(st == 200, f"{st} {data[:300]}")
            served[g].append(replica)
    return served


def hit_rate(replicas):
    hits = queries = 0
    for rep in replicas:
        h, q = rep.counters()
        hits, queries = hits + h, queries + q
    check(queries > 0, "no prefix-cache queries")
    return hits / queries, hits


def phase(pagellm, haproxy, cfg_text, keep=False):
    replicas = [Replica(pagellm), Replica(pagellm)]
    hp = None
    try:
        hp = HAProxy(haproxy, cfg_text, replicas)
        served = workload(hp)
        rate, hits = hit_rate(replicas)
        if keep:
            return replicas, hp, served, rate, hits
        return None, None, served, rate, hits
    finally:
        if not keep:
            if hp:
                hp.stop()
            for r in replicas:
                r.stop()


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} PAGELLM")
        return 2
    pagellm = sys.argv[1]
    haproxy = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
    if not haproxy:
        print("SKIP: haproxy is not installed (Debian: apt-get install haproxy)")
        return 77
    with open(RECIPE) as f:
        recipe = f.read()
    hash_line = re.compile(r"^    balance hash .*$", re.M)
    check(len(hash_line.findall(recipe)) == 1, "the recipe's hash line")
    round_robin = hash_line.sub("    balance roundrobin", recipe)

    replicas, hp = [], None
    try:
        _, _, rr_served, rr_rate, rr_hits = phase(pagellm, haproxy, round_robin)
        check(all(len(set(v)) == 2 for v in rr_served.values()),
              f"round robin sends each group to both replicas: {rr_served}")
        replicas, hp, pf_served, pf_rate, pf_hits = phase(pagellm, haproxy, recipe, keep=True)
        check(all(len(set(v)) == 1 for v in pf_served.values()),
              f"prefix affinity keeps each group on one replica: {pf_served}")
        check(len({v[0] for v in pf_served.values()}) == 2,
              f"the groups spread over both replicas: {pf_served}")
        print(f"prefix-cache hit rate: round robin {rr_rate:.3f} ({rr_hits:.0f} tokens), "
              f"prefix affinity {pf_rate:.3f} ({pf_hits:.0f} tokens)")
        check(pf_rate > rr_rate + 0.1 and pf_hits >= 1.3 * rr_hits,
              f"affinity {pf_rate:.3f} does not beat round robin {rr_rate:.3f}")

        # 2. the agent check, as HAProxy sees it
        def agents_ok():
            rows = hp.stats()
            lc = [rows[("pagellm_leastconn", s)] for s in ("r1", "r2")]
            return lc if all(r["agent_status"] == "L7OK" and r["weight"] == "100"
                             for r in lc) else None
        wait_for(agents_ok, 10, "both agents L7OK at weight 100")
        out = {}

        def slow():  # a request waiting on r2 for one 3 s step: its agent says 50%
            st, _, v = replicas[1].post("/v1/completions", {"prompt": [SLOW_ID, 5, 6],
                                                           "max_tokens": 1})
            out["status"] = st
        t = threading.Thread(target=slow)
        t.start()
        wait_for(lambda: hp.stats()[("pagellm_leastconn", "r2")]["weight"] == "50", 10,
                 "HAProxy to weigh r2 at 50 while a request waits on it")
        t.join()
        check(out.get("status") == 200, out)

        # 3. r1 killed: every following request is answered, by r2
        replicas[0].kill()
        os.unlink(replicas[0].log.name)
        for g in range(5):
            st, replica, data = hp.request(
                "POST", "/v1/completions",
                {"prompt": PREFIX.format(g=g) + "After the kill.", "max_tokens": 2})
            check(st == 200 and replica == "r2", f"after the kill: {st} {replica} {data[:200]}")
            st, replica, data = hp.request("GET", "/v1/models")
            check(st == 200 and replica == "r2", f"after the kill: {st} {replica} {data[:200]}")
        wait_for(lambda: hp.stats()[("pagellm_prefix", "r1")]["status"].startswith("DOWN"),
                 10, "HAProxy to mark r1 DOWN")
    except Failure as e:
        print(f"FAIL: {e}")
        if hp:
            print(hp.text()[-3000:])
        return 1
    finally:
        if hp:
            hp.stop()
        for r in replicas:
            if r.proc.poll() is None:
                r.stop()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
