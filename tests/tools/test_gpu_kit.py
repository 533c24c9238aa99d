#!/usr/bin/env python3
"""scripts/gpu_kit.sh on this machine, so the kit cannot rot between GPU loans: it packs the
build under test (--from-build, --fast), unpacks it with the kit's own run.sh as the device
would, and runs it with --cpu --small: the report's every part is checked (env, the skipped
GPU phases saying why, a benchmark row per planned model, dtype and measurement with sane
numbers, the oracle's pagellm half against the reference backend, the targets, the logs
archive); then a run with a deadline too short for most steps still finishes its report,
saying which steps the deadline skipped.

usage: test_gpu_kit.py SOURCE_ROOT BUILD_ROOT"""
import json
import os
import subprocess
import sys
import tarfile
import tempfile


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def main():
    root, build = sys.argv[1], sys.argv[2]
    kit_sh = os.path.join(root, "scripts", "gpu_kit.sh")
    with tempfile.TemporaryDirectory(prefix="pagellm-kit-test-") as tmp:
        kit = os.path.join(tmp, "kit")
        p = subprocess.run(["bash", kit_sh, "pack", kit, "--from-build", build, "--fast"],
                           capture_output=True, text=True)
        check(p.returncode == 0, f"pack failed:\n{p.stdout}\n{p.stderr}")
        check(sorted(os.listdir(kit)) == ["kit.tar.xz", "run.sh"], os.listdir(kit))
        size = os.path.getsize(os.path.join(kit, "kit.tar.xz"))
        check(size < 40 << 20, f"kit.tar.xz is {size} bytes")

        out = os.path.join(tmp, "out")
        env = dict(os.environ, TMPDIR=tmp)
        p = subprocess.run(["bash", os.path.join(kit, "run.sh"), f"OUT={out}", "--cpu",
                            "--small", "--deadline", "150"], capture_output=True, text=True,
                           env=env, timeout=300)
        check(p.returncode == 0, f"run failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        check(sorted(os.listdir(out)) == ["gpu_logs.tar.gz", "gpu_report.json",
                                          "gpu_report.md"], os.listdir(out))
        r = json.load(open(os.path.join(out, "gpu_report.json")))
        check(r["mode"] == "cpu" and r["small"] and r["finished"], {k: r[k] for k in
                                                                     ("mode", "small", "finished")})
        check(r["kit"].get("commit") and "bin/pagellm" in r["kit"].get("files", []), r["kit"])
        check(r["env"].get("missing_libraries") == {},
              f"the kit's programs lack libraries: {r['env'].get('missing_libraries')}")
        steps = {(s["phase"], s["name"]): s for s in r["steps"]}
        for ph in ("native", "sanitize"):
            s = [x for x in r["steps"] if x["phase"] == ph]
            check(len(s) == 1 and s[0]["status"] == "skipped" and "--cpu" in s[0]["why"], s)
        bad = [s for s in r["steps"] if s["status"] not in ("pass", "skipped")]
        check(not bad, f"steps failed: {json.dumps(bad, indent=1)[:3000]}")
        check(r["bench"]["bandwidth"].get("cpu", {}).get("read_gbs", 0) > 0, r["bench"])
        rows = r["bench"]["rows"]
        for model, dtypes in (("tiny", ["f16", "q8_0", "q4_0", "q4_k_m"]),
                              ("stories15m", ["f16", "q4_0"])):
            for d in dtypes:
                mine = [x for x in rows if x["model"] == model and x["dtype"] == d]
                dec = sorted(x["batch"] for x in mine if x["kind"] == "decode")
                pre = sorted(x["tokens"] for x in mine if x["kind"] == "prefill")
                check(dec == [1, 4] and pre == [64, 128], f"{model} {d}: {mine}")
                for x in mine:
                    check(x["tok_s"] > 0 and x.get("step_ms", x.get("ms", 0)) > 0, x)
                    if x["kind"] == "decode":
                        check(x["weight_gbs"] > 0 and x.get("bw_fraction", 0) > 0, x)
                check(mine[0]["weight_type"], mine[0])
        # the quantised dummy weights are what was asked for
        wt = {x["dtype"]: x["weight_type"] for x in rows if x["model"] == "tiny"}
        check(wt["q8_0"].startswith("q8_0") and wt["q4_0"].startswith("q4_0"), wt)
        o = r["oracle"]
        check(o.get("results") and "ref" in o.get("reference", ""), o)
        for x in o["results"]:
            check("error" not in x and x["greedy_ok"] and x["logits_ok"] and
                  x["positions"] > 0, x)
        names = {t["target"] for t in r["targets"]}
        check(any("oracle" in n for n in names) and any("8 minutes" in n for n in names),
              r["targets"])
        md = open(os.path.join(out, "gpu_report.md")).read()
        for part in ("# GPU kit report (cpu, small)", "## Steps", "## Benchmarks", "## Oracle",
                     "## Targets"):
            check(part in md, f"{part} missing from the markdown report")
        with tarfile.open(os.path.join(out, "gpu_logs.tar.gz")) as t:
            logs = t.getnames()
        check(any(n.endswith(".log") and "bench" in n for n in logs), logs)

        # a deadline that leaves room for almost nothing: still a whole report
        out2 = os.path.join(tmp, "out2")
        p = subprocess.run(["bash", kit_sh, "run", kit, out2, "--cpu", "--small",
                            "--deadline", "14"], capture_output=True, text=True, env=env,
                           timeout=120)
        r2 = json.load(open(os.path.join(out2, "gpu_report.json")))
        check(r2["finished"], "the short run did not finish its report")
        skipped = [s for s in r2["steps"] if s["status"] == "skipped" and
                   "deadline" in s.get("why", "")]
        check(skipped, f"nothing was skipped for the deadline: {r2['steps']}")
        check(r2["elapsed_s"] < 14 + 10, f"the short run took {r2['elapsed_s']} s")
    print("ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failure as e:
        print(f"FAIL: {e}")
        sys.exit(1)
