#!/usr/bin/env python3
"""The GPU kit's run (scripts/gpu_kit.sh run; docs/gpu.md): everything a short GPU loan should
check and measure, in priority order, against a deadline, writing the report as it goes.

usage: run.py --kit DIR --out OUT [--deadline S] [--cpu] [--small]

Phases (each step's output goes to a log; OUT holds gpu_report.md, gpu_report.json and
gpu_logs.tar.gz, rewritten after every step, so a run cut off at any moment still reports
what it did):
  env        the device, driver, which CUDA runtime and cuBLAS were found and used, libraries
             the kit's programs cannot load, the fatbin's machine code and PTX
  native     the 'gpu' suites' test binaries, run directly (a meson build folder is tied to
             the machine that configured it)
  sanitize   compute-sanitizer: memcheck (with leak checking) on the ops and engine tests and
             on one engine run mixing prefill chunks, decodes and split-K; racecheck and
             synccheck on the shared-memory kernels' tests; initcheck on the engine test.
             Criterion forks each test: --target-processes all
  bench      the device's read bandwidth; a launch-overhead probe; decode (batch 1, 8, 64) and
             prefill (512, 2048) for TinyLlama-1.1B and Llama-2-7B shapes in f16, Q8_0, Q4_0
             and Q4_K_M (dummy: weights drawn in the type), on the CUDA backend, then the CPU
             backend on every core beside it
  oracle     transformers' f32 logits against pagellm's (scripts/gpu_kit/oracle.py)
--cpu runs the same plumbing on a machine without a GPU: env, bench on the CPU backend, and the
oracle's pagellm half (against pagellm's reference backend) when transformers is absent.
--small picks tiny shapes and few steps (the test suite's run). Every step gets at most what
is left before the deadline (less a reserve for writing the report) and is skipped, and said
so, when its minimum does not fit.
"""
import argparse
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

RESERVE_S = 8.0  # kept for the last report write and the logs archive


class Run:
    def __init__(self, kit, out, deadline, cpu, small):
        self.kit, self.out, self.deadline = kit, out, deadline
        self.cpu, self.small = cpu, small
        self.t0 = time.monotonic()
        self.saved = 0.0
        self.phase_until = deadline - RESERVE_S
        self.logs = os.path.join(kit, "logs")
        os.makedirs(self.logs, exist_ok=True)
        os.makedirs(out, exist_ok=True)
        manifest = {}
        try:
            with open(os.path.join(kit, "MANIFEST.json")) as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            pass
        self.r = {"kit": manifest, "mode": "cpu" if cpu else "gpu", "small": small,
                  "deadline_s": deadline, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "elapsed_s": 0.0, "finished": False, "env": {}, "steps": [],
                  "bench": {"bandwidth": {}, "rows": []}, "oracle": {}, "targets": []}
        # The kit's programs find its libraries first; Python processes (bench.py, oracle.py)
        # get them last, so the interpreter and PyTorch keep the system's and their own, and
        # the oracle gets no CUDA folder (PyTorch brings its cuBLAS, which libpagellm.so then
        # shares). cuda_dirs: set by the env phase.
        self.base_ld = os.environ.get("LD_LIBRARY_PATH", "")
        self.cuda_dirs = []
        self.env = dict(os.environ)
        self.env["PAGELLM_LIBRARY"] = os.path.join(kit, "lib", "libpagellm.so.0")
        self.env["PYTHONPATH"] = os.path.join(kit, "python") + (
            ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
        self.env["PAGELLM_TEST_MODELS"] = os.path.join(kit, "models")
        self.env["PYTHONUNBUFFERED"] = "1"
        self.set_paths()

    def set_paths(self):
        kl = os.path.join(self.kit, "lib")
        join = lambda *ps: ":".join(p for p in ps if p)  # noqa: E731
        self.env["LD_LIBRARY_PATH"] = join(kl, *self.cuda_dirs, self.base_ld)
        self.env_py = dict(self.env, LD_LIBRARY_PATH=join(self.base_ld, *self.cuda_dirs, kl))
        self.env_oracle = dict(self.env, LD_LIBRARY_PATH=join(self.base_ld, kl))

    # ---- time -------------------------------------------------------------------------

    def elapsed(self):
        return time.monotonic() - self.t0

    def begin_phase(self, share):
        """The phase may run until its share of the deadline plus what earlier phases left
        unused has passed (never past the deadline), so a slow phase cannot starve the ones
        after it of all their time, and a quick one hands its time on."""
        end = self.deadline - RESERVE_S
        self.phase_until = min(end, self.elapsed() + share * self.deadline + self.saved)

    def end_phase(self):
        self.saved = max(0.0, self.phase_until - self.elapsed())

    def left(self):
        return min(self.deadline - RESERVE_S, self.phase_until) - self.elapsed()

    # ---- the report -------------------------------------------------------------------

    def write(self):
        self.r["elapsed_s"] = round(self.elapsed(), 1)
        self.r["targets"] = targets(self.r)
        tmp = os.path.join(self.out, ".gpu_report.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.r, f, indent=1)
        os.replace(tmp, os.path.join(self.out, "gpu_report.json"))
        tmp = os.path.join(self.out, ".gpu_report.md.tmp")
        with open(tmp, "w") as f:
            f.write(markdown(self.r))
        os.replace(tmp, os.path.join(self.out, "gpu_report.md"))

    def pack_logs(self):
        tmp = os.path.join(self.out, ".gpu_logs.tmp")
        try:
            with tarfile.open(tmp, "w:gz") as t:
                t.add(self.logs, arcname="logs")
            os.replace(tmp, os.path.join(self.out, "gpu_logs.tar.gz"))
        except OSError:
            pass

    def step(self, rec):
        self.r["steps"].append(rec)
        self.write()

    # ---- running ----------------------------------------------------------------------

    def run(self, phase, name, argv, minimum, cap, parse=None, env=None, cwd=None):
        """argv with a timeout of min(cap, time left); skipped when less than minimum is left.
        The record gets status pass / fail / timeout / skipped, the log's last lines, and what
        parse(text, rc) adds."""
        rec = {"phase": phase, "name": name, "cmd": " ".join(argv)}
        left = self.left()
        if left < minimum:
            rec.update(status="skipped", why=f"deadline: {left:.0f} s left, needs {minimum} s")
            self.step(rec)
            return rec, ""
        timeout = max(1.0, min(cap, left))
        log = os.path.join(self.logs, re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{phase}-{name}") + ".log")
        t = time.monotonic()
        try:
            p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env=env or self.env, cwd=cwd, timeout=timeout)
            text = p.stdout.decode("utf-8", "replace")
            rc = p.returncode
            status = "pass" if rc == 0 else ("skipped" if rc == 77 else "fail")
        except subprocess.TimeoutExpired as ex:
            text = (ex.stdout or b"").decode("utf-8", "replace")
            rc, status = None, "timeout"
        except OSError as ex:
            text, rc, status = f"{ex}", None, "fail"
        with open(log, "w") as f:
            f.write(text)
        rec.update(status=status, rc=rc, seconds=round(time.monotonic() - t, 1),
                   timeout_s=round(timeout, 1), log=os.path.basename(log),
                   tail="\n".join(text.strip().splitlines()[-12:]))
        if parse:
            try:
                rec.update(parse(text, rc) or {})
            except Exception as ex:  # a parser's bug must not end the run
                rec["parse_error"] = f"{type(ex).__name__}: {ex}"
        self.step(rec)
        return rec, text


# ---- parsers ----------------------------------------------------------------------------

def criterion_counts(text, rc):
    m = re.findall(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+) \| "
                   r"Crashing: (\d+)", text)
    if not m:
        return {}
    t = [sum(int(x[i]) for x in m) for i in range(4)]
    out = {"tests": {"tested": t[0], "passing": t[1], "failing": t[2], "crashing": t[3]}}
    skip = re.search(r"^SKIP: (.*)$", text, re.M)
    if skip:
        out["why"] = skip.group(1)
    return out


def sanitizer_counts(text, rc):
    errors = [int(x) for x in re.findall(r"ERROR SUMMARY: (\d+) error", text)]
    hazards = [int(x) for x in re.findall(r"RACECHECK SUMMARY: (\d+) hazard", text)]
    leaks = len(re.findall(r"Leaked \d+ bytes", text))
    out = criterion_counts(text, rc)
    out["sanitizer"] = {"processes": len(errors) + len(hazards), "errors": sum(errors),
                        "hazards": sum(hazards), "leaks": leaks}
    if not errors and not hazards:
        out["sanitizer"]["note"] = "no sanitizer summary in the output"
    return out


def json_lines(text, rc):
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                pass
    return {"rows": rows}


# ---- phases -----------------------------------------------------------------------------

def find_cuda_libs():
    """Folders holding libcudart.so.13, libcublas.so.13 and libnccl.so.2 (linked when the build
    found NCCL): the CUDA toolkit's, else PyTorch's nvidia wheels'. The first folder that has
    each wins."""
    roots = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
             "/usr/local/cuda/lib"] + sorted(glob.glob("/usr/local/cuda-*/lib64")) + \
        sorted(glob.glob("/usr/local/cuda-*/targets/x86_64-linux/lib")) + \
        sorted(glob.glob("/usr/local/cuda-*/lib"))
    try:
        import site
        sp = site.getsitepackages()
    except Exception:
        sp = []
    for p in sp + sorted(glob.glob("/opt/*/.venv/lib/python3*/site-packages")):
        roots += sorted(glob.glob(os.path.join(p, "nvidia", "*", "lib")))
        roots += sorted(glob.glob(os.path.join(p, "nvidia", "cu13", "lib")))
    found = {}
    for want in ("libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libnccl.so.2"):
        for r in roots:
            if os.path.exists(os.path.join(r, want)):
                found[want] = r
                break
    return found


def phase_env(run):
    e = run.r["env"]
    e["python"] = sys.version.split()[0]
    e["cpus"] = os.cpu_count()
    if not run.cpu:
        smi = shutil.which("nvidia-smi")
        if smi:
            p = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,clocks.max.sm,"
                                "clocks.max.mem", "--format=csv,noheader"],
                               capture_output=True, text=True)
            e["gpu"] = p.stdout.strip() or p.stderr.strip()
        libs = find_cuda_libs()
        e["cuda_libs"] = libs
        for d in libs.values():
            if d not in run.cuda_dirs:
                run.cuda_dirs.append(d)
        run.set_paths()
        e["ld_library_path"] = run.env["LD_LIBRARY_PATH"]
    missing = {}
    for b in [os.path.join(run.kit, "bin", "pagellm")] + sorted(
            glob.glob(os.path.join(run.kit, "tests", "*"))):
        p = subprocess.run(["ldd", b], capture_output=True, text=True, env=run.env)
        nf = [ln.split()[0] for ln in p.stdout.splitlines() if "not found" in ln]
        if nf:
            missing[os.path.basename(b)] = nf
    e["missing_libraries"] = missing
    cuobjdump = shutil.which("cuobjdump") or (
        "/usr/local/cuda/bin/cuobjdump" if os.path.exists("/usr/local/cuda/bin/cuobjdump")
        else None)
    if cuobjdump:
        lib = os.path.join(run.kit, "lib", "libpagellm.so.0")
        elf = subprocess.run([cuobjdump, "--list-elf", lib], capture_output=True, text=True)
        ptx = subprocess.run([cuobjdump, "--list-ptx", lib], capture_output=True, text=True)
        e["fatbin"] = {"sm": sorted(set(re.findall(r"sm_(\d+)", elf.stdout))),
                       "ptx": sorted(set(re.findall(r"sm_(\d+)", ptx.stdout)))}
    run.step({"phase": "env", "name": "probe", "status": "fail" if missing else "pass",
              "seconds": round(run.elapsed(), 1)})
    run.pack_logs()


NATIVE = [  # binary, minimum seconds, cap
    ("test_cuda_gpu", 10, 150),
    ("test_cuda_engine_gpu", 5, 90),
    ("test_cuda_engine_stories_gpu", 5, 90),
    ("test_cuda_families_gpu", 10, 120),
    ("test_cuda_quant_gpu", 10, 150),
]


def phase_native(run):
    if run.cpu:
        run.step({"phase": "native", "name": "gpu suites", "status": "skipped",
                  "why": "--cpu: no GPU"})
        return
    jobs = str(max(1, min(8, (os.cpu_count() or 2) // 2)))
    for name, minimum, cap in NATIVE:
        b = os.path.join(run.kit, "tests", name)
        if not os.path.exists(b):
            run.step({"phase": "native", "name": name, "status": "skipped",
                      "why": "not in the kit (packed from a build without it)"})
            continue
        run.run("native", name, [b, "-j", jobs], minimum, cap, criterion_counts)
    run.pack_logs()


def sanitizer():
    for c in [shutil.which("compute-sanitizer"), "/usr/local/cuda/bin/compute-sanitizer",
              *sorted(glob.glob("/usr/local/cuda-*/bin/compute-sanitizer"))]:
        if c and os.path.exists(c):
            return c
    return None


def phase_sanitize(run):
    if run.cpu:
        run.step({"phase": "sanitize", "name": "compute-sanitizer", "status": "skipped",
                  "why": "--cpu: no GPU"})
        return
    cs = sanitizer()
    if not cs:
        run.step({"phase": "sanitize", "name": "compute-sanitizer", "status": "skipped",
                  "why": "compute-sanitizer not found"})
        return
    t = lambda n: os.path.join(run.kit, "tests", n)  # noqa: E731
    base = [cs, "--target-processes", "all", "--error-exitcode", "9", "--print-limit", "50"]
    pagellm = os.path.join(run.kit, "bin", "pagellm")
    # one engine run: prompts of 600 tokens in chunks of 256 beside decodes (chunked prefill
    # mixes them), contexts over 512 with 3 x 12 heads (split-K), Q4_0 weights (the quantised
    # GEMV and the dequantise + cuBLAS path); stories110M's shape keeps memcheck's cost down
    engine_run = [pagellm, "bench", "throughput", "--backend", "cuda", "--model",
                  "dummy:stories110m", "--dtype", "q4_0", "--num-prompts", "3",
                  "--input-len", "600", "--output-len", "6", "--max-total-tokens", "256",
                  "--max-model-len", "700", "--no-progress"]
    shared_mem = ["cuda_ops/attention_f16_split_k", "cuda_ops/attention_window_unsplit_and_split_k",
                  "cuda_ops/rmsnorm_and_fused_add", "cuda_ops/argmax_ties_nan_and_inf",
                  "cuda_ops/matmul_quantised"]
    race = lambda f: (f"racecheck {f}", base + ["--tool", "racecheck", "--racecheck-report",  # noqa
                                                "all", t("test_cuda_gpu"), "--filter", f], 10, 40)
    sync = lambda f: (f"synccheck {f}", base + ["--tool", "synccheck", t("test_cuda_gpu"),  # noqa
                                                "--filter", f], 8, 25)
    # most telling first: what is cut off by the deadline is the least
    steps = [
        ("memcheck ops", base + ["--tool", "memcheck", "--leak-check", "full",
                                 t("test_cuda_gpu"), "-j", "4"], 20, 60),
        ("memcheck engine", base + ["--tool", "memcheck", "--leak-check", "full",
                                    t("test_cuda_engine_gpu")], 10, 30),
        race(shared_mem[0]),
        ("memcheck mixed prefill/decode split-K", base + ["--tool", "memcheck",
                                                          "--leak-check", "full"] + engine_run,
         15, 45),
        ("initcheck engine", base + ["--tool", "initcheck", t("test_cuda_engine_gpu")], 10, 30),
        sync(shared_mem[0]),
    ] + [race(f) for f in shared_mem[1:]] + [sync(f) for f in shared_mem[1:3]]
    for name, argv, minimum, cap in steps:
        # each process's report to its own file (Criterion's workers' output may not reach
        # ours): counted with the step's own output
        stem = os.path.join(run.logs, "cs-" + re.sub(r"[^A-Za-z0-9_.-]+", "_", name))
        argv = argv[:1] + ["--log-file", stem + ".%p.txt"] + argv[1:]

        def parse(text, rc, stem=stem):
            for f in sorted(glob.glob(stem + ".*.txt")):
                with open(f, errors="replace") as fh:
                    text += "\n" + fh.read()
            return sanitizer_counts(text, rc)
        run.run("sanitize", name, argv, minimum, cap, parse)
    run.pack_logs()


def bench_plan(run):
    if run.small:
        models = [("tiny", ["f16", "q8_0", "q4_0", "q4_k_m"]), ("stories15m", ["f16", "q4_0"])]
        args = ["--batches", "1,4", "--prefills", "64,128", "--decode-steps", "6", "--reps", "2"]
        plan = [("cpu", m, d, args, 5, 60) for m, ds in models for d in ds]
        if not run.cpu:
            plan = [("cuda", m, d, args, 5, 60) for m, ds in models for d in ds] + plan
        return plan
    full = ["--batches", "1,8,64", "--prefills", "512,2048", "--decode-steps", "24"]
    plan = []
    if not run.cpu:
        plan.append(("cuda", "stories15m", "f16", ["--batches", "1", "--prefills", "",
                                                   "--decode-steps", "48"], 5, 30))
        for m in ("llama2-7b", "tinyllama-1.1b"):
            for d in ("f16", "q4_k_m", "q4_0", "q8_0"):
                plan.append(("cuda", f"{m}", d, full, 15, 90))
    for d in ("f16", "q4_k_m", "q4_0", "q8_0"):
        plan.append(("cpu", "tinyllama-1.1b", d, ["--batches", "1,8,64", "--prefills", "512",
                                                  "--decode-steps", "12", "--reps", "2"], 15, 60))
    for d in ("f16", "q4_0"):
        plan.append(("cpu", "llama2-7b", d, ["--batches", "1", "--prefills", "512",
                                             "--decode-steps", "8", "--reps", "1"], 20, 60))
    return plan


def phase_bench(run):
    bw = run.r["bench"]["bandwidth"]
    if not run.cpu:
        membw = os.path.join(run.kit, "bin", "gpu_membw")
        rec, _ = run.run("bench", "gpu read bandwidth",
                         [membw, "--mib", "256" if run.small else "4096", "--reps",
                          "5" if run.small else "20"], 3, 30, json_lines)
        if rec.get("rows"):
            bw["cuda"] = rec["rows"][0]
    small = ["--array-mib", "32", "--roofline-reps", "2"] if run.small else ["--roofline-reps", "3"]
    rec, _ = run.run("bench", "cpu read bandwidth",
                     [os.path.join(run.kit, "bin", "pagellm"), "bench", "roofline",
                      "--gemm-n", "256", "--output-json",
                      os.path.join(run.logs, "roofline.json")] + small, 3, 30)
    try:
        with open(os.path.join(run.logs, "roofline.json")) as f:
            rl = json.load(f)
        bw["cpu"] = {"read_gbs": rl.get("read_gbs"), "threads": rl.get("memory_threads"),
                     "isa": rl.get("memory_isa")}
    except (OSError, ValueError):
        pass
    threads = str(os.cpu_count() or 1)
    for backend, model, dtype, args, minimum, cap in bench_plan(run):
        argv = [sys.executable, os.path.join(run.kit, "scripts", "bench.py"), "--backend", backend,
                "--model", f"dummy:{model}", "--dtype", dtype, "--threads",
                threads if backend == "cpu" else "0"] + args
        rec, _ = run.run("bench", f"{backend} {model} {dtype}", argv, minimum, cap, json_lines,
                         env=run.env_py)
        meta = next((r for r in rec.get("rows", []) if r.get("kind") == "meta"), {})
        ceiling = (bw.get(backend) or {}).get("read_gbs_best" if backend == "cuda" else "read_gbs")
        for r in rec.get("rows", []):
            if r.get("kind") not in ("decode", "prefill"):
                continue
            row = dict(backend=backend, model=model, dtype=dtype,
                       weight_type=meta.get("weight_type"), **r)
            if r["kind"] == "decode" and ceiling:
                row["bw_fraction"] = round(r["weight_gbs"] / ceiling, 4)
            run.r["bench"]["rows"].append(row)
        rec.pop("rows", None)
        run.write()
    run.pack_logs()


def phase_oracle(run):
    script = os.path.join(run.kit, "scripts", "oracle.py")
    out = os.path.join(run.logs, "oracle.json")
    have = subprocess.run([sys.executable, "-c", "import torch, transformers"],
                          capture_output=True, env=run.env_oracle).returncode == 0
    if have:
        argv = [sys.executable, script, "--out", out, "--workdir",
                os.path.join(run.kit, "oracle-models"),
                "--backends", "cpu" if run.cpu else "cuda,cpu"]
        if run.small:
            argv += ["--prompts", "1", "--new-tokens", "6"]
        minimum, cap = 30, 240
    else:
        model = os.path.join(run.kit, "models", "stories260K.bin")
        if not os.path.exists(model):  # packed without ../shared/models
            model = "dummy:tiny"
        argv = [sys.executable, script, "--out", out, "--model", model, "--reference", "ref",
                "--backends", "cpu" if run.cpu else "cuda,cpu", "--prompts", "2",
                "--new-tokens", "8"]
        minimum, cap = 5, 60
    rec, _ = run.run("oracle", "transformers" if have else "pagellm ref (no transformers)",
                     argv, minimum, cap, env=run.env_oracle if have else run.env_py)
    try:
        with open(out) as f:
            run.r["oracle"] = json.load(f)
    except (OSError, ValueError):
        pass
    run.write()
    run.pack_logs()


# ---- targets and the markdown ----------------------------------------------------------

def targets(r):
    t = []
    native = [s for s in r["steps"] if s["phase"] == "native" and s.get("tests")]
    if native:
        bad = sum(s["tests"]["failing"] + s["tests"]["crashing"] for s in native)
        t.append({"target": "native suites: 0 failures", "value": bad, "met": bad == 0})
    san = [s for s in r["steps"] if s["phase"] == "sanitize" and s.get("sanitizer")]
    if san:
        errs = sum(s["sanitizer"]["errors"] + s["sanitizer"]["hazards"] + s["sanitizer"]["leaks"]
                   for s in san)
        t.append({"target": "compute-sanitizer: 0 errors, 0 hazards, 0 leaks", "value": errs,
                  "met": errs == 0 and all(s["status"] == "pass" for s in san)})
    res = [x for x in r.get("oracle", {}).get("results", []) if "error" not in x]
    if res or r.get("oracle", {}).get("results"):
        ok = all(x.get("greedy_ok") and x.get("logits_ok") for x in res) and len(res) == len(
            r["oracle"]["results"])
        worst = max((x.get("max_logit_err", 0) for x in res), default=None)
        t.append({"target": "oracle: greedy ids equal up to the first unclear step, logits "
                            "within 2e-2", "value": worst, "met": ok})
    rows = r["bench"]["rows"]

    def dec(model, dtype, batch, backend="cuda"):
        return next((x for x in rows if x["backend"] == backend and x["model"] == model and
                     x["dtype"] == dtype and x["kind"] == "decode" and x["batch"] == batch),
                    None)
    f16 = dec("llama2-7b", "f16", 1)
    if f16 and "bw_fraction" in f16:
        t.append({"target": "7B f16 batch-1 decode >= 70% of the read bandwidth",
                  "value": f16["bw_fraction"], "met": f16["bw_fraction"] >= 0.70})
    q4 = dec("llama2-7b", "q4_k_m", 1)
    if q4 and "bw_fraction" in q4:
        t.append({"target": "7B Q4_K_M batch-1 decode >= 50% of the read bandwidth",
                  "value": q4["bw_fraction"], "met": q4["bw_fraction"] >= 0.50})
    b64 = dec("llama2-7b", "f16", 64)
    if f16 and b64:
        x = round(b64["tok_s"] / f16["tok_s"], 2)
        t.append({"target": "7B f16 decode at 64 sequences >= 20x batch-1 tokens/s",
                  "value": x, "met": x >= 20})
    if r.get("finished"):
        t.append({"target": "whole run under 8 minutes", "value": r["elapsed_s"],
                  "met": r["elapsed_s"] < 480})
    return t


def markdown(r):
    k = r.get("kit", {})
    L = [f"# GPU kit report ({r['mode']}{', small' if r['small'] else ''})", "",
         f"- kit: commit {k.get('commit', '?')}{' (dirty)' if k.get('dirty') else ''}, "
         f"packed {k.get('packed', '?')}, gpu_archs {k.get('gpu_archs', '?')}",
         f"- started {r['started']}, {r['elapsed_s']} s elapsed of a {r['deadline_s']} s "
         f"deadline{'' if r['finished'] else ' (still running, or cut off)'}", ""]
    e = r.get("env", {})
    if e:
        L += ["## Environment", ""]
        for key in ("gpu", "cuda_libs", "fatbin", "missing_libraries", "cpus", "python"):
            if key in e:
                L.append(f"- {key}: {json.dumps(e[key]) if not isinstance(e[key], str) else e[key]}")
        L.append("")
    if r["targets"]:
        L += ["## Targets", "", "| target | value | met |", "| --- | --- | --- |"]
        for t in r["targets"]:
            L.append(f"| {t['target']} | {t['value']} | "
                     f"{'yes' if t['met'] else 'NO' if t['met'] is False else '?'} |")
        L.append("")
    L += ["## Steps", "", "| phase | step | status | s | result |", "| --- | --- | --- | --- | --- |"]
    for s in r["steps"]:
        res = ""
        if s.get("tests"):
            x = s["tests"]
            res = f"{x['passing']}/{x['tested']} passed, {x['failing']} failed, {x['crashing']} crashed"
        if s.get("sanitizer"):
            x = s["sanitizer"]
            res += (f"; {x['errors']} errors, {x['hazards']} hazards, {x['leaks']} leaks "
                    f"({x['processes']} processes)")
        if s.get("why"):
            res += f" {s['why']}"
        L.append(f"| {s['phase']} | {s['name']} | {s['status']} | {s.get('seconds', '')} | "
                 f"{res.strip()} |")
    L.append("")
    bad = [s for s in r["steps"] if s["status"] in ("fail", "timeout") and s.get("tail")]
    if bad:
        L += ["### Failures (last lines; gpu_logs.tar.gz has the whole logs)", ""]
        for s in bad:
            L += [f"**{s['phase']} / {s['name']}** ({s['status']}, log {s.get('log')})", "",
                  "```", s["tail"], "```", ""]
    bw = r["bench"]["bandwidth"]
    rows = r["bench"]["rows"]
    if bw or rows:
        L += ["## Benchmarks", ""]
        if bw.get("cuda"):
            L.append(f"- GPU read bandwidth: {bw['cuda'].get('read_gbs_best')} GB/s best, "
                     f"{bw['cuda'].get('read_gbs_median')} median (device-to-device copy "
                     f"{bw['cuda'].get('copy_gbs')} GB/s read + written)")
        if bw.get("cpu"):
            L.append(f"- CPU read bandwidth: {bw['cpu'].get('read_gbs')} GB/s "
                     f"({bw['cpu'].get('threads')} threads)")
        L += ["", "| backend | model | dtype | what | batch / tokens | ms | tokens/s | "
                  "weight GB/s | of bandwidth |", "| --- | --- | --- | --- | --- | --- | --- | "
                  "--- | --- |"]
        for x in rows:
            if x["kind"] == "decode":
                L.append(f"| {x['backend']} | {x['model']} | {x['dtype']} | decode | "
                         f"{x['batch']} | {x['step_ms']} | {x['tok_s']} | {x['weight_gbs']} | "
                         f"{x.get('bw_fraction', '')} |")
            else:
                L.append(f"| {x['backend']} | {x['model']} | {x['dtype']} | prefill | "
                         f"{x['tokens']} | {x['ms']} | {x['tok_s']} | | |")
        probe = next((x for x in rows if x["model"] == "stories15m" and x["kind"] == "decode"
                      and x["backend"] == "cuda" and x["batch"] == 1), None)
        if probe:
            L += ["", f"Launch probe: a batch-1 decode step of stories15m (6 layers, weights "
                      f"negligible, ~20 launches a layer) takes {probe['step_ms']} ms, about "
                      f"{probe['step_ms'] * 1000 / 125:.1f} us per launch: compare with the "
                      f"larger models' step times and their bytes / bandwidth to see whether "
                      f"batch-1 decode is launch-bound."]
        L.append("")
    o = r.get("oracle", {})
    if o.get("results"):
        L += ["## Oracle", "", f"Reference: {o.get('reference')}; clear step = top-1 ahead by "
              f">= {o.get('gap')}; logit tolerance {o.get('logit_tol')}.", "",
              "| family | backend | prompt | greedy equal / clear steps | max logprob err | "
              "max logit err | ok |", "| --- | --- | --- | --- | --- | --- | --- |"]
        for x in o["results"]:
            if "error" in x:
                L.append(f"| {x.get('family')} | {x.get('backend', '')} | {x.get('prompt', '')} "
                         f"| error: {x['error'][:120]} | | | NO |")
                continue
            L.append(f"| {x['family']} | {x['backend']} | {x['prompt']} | "
                     f"{x['greedy_equal_until']} / {x['clear_steps']} | {x['max_logprob_err']} | "
                     f"{x['max_logit_err']} | "
                     f"{'yes' if x['greedy_ok'] and x['logits_ok'] else 'NO'} |")
        L.append("")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kit", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--deadline", type=float, default=420.0)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--small", action="store_true")
    a = ap.parse_args()
    run = Run(os.path.abspath(a.kit), os.path.abspath(a.out), a.deadline, a.cpu, a.small)
    run.write()
    # shares of the deadline (420 s: native 84, sanitize 134, bench 126, oracle the rest)
    for phase, share in ((phase_env, 0.02), (phase_native, 0.20), (phase_sanitize, 0.32),
                         (phase_bench, 0.30), (phase_oracle, 1.0)):
        run.begin_phase(share)
        try:
            phase(run)
        except Exception as ex:  # a phase's own failure is reported; the next phase runs
            run.step({"phase": phase.__name__[6:], "name": "(the phase itself)",
                      "status": "fail", "tail": f"{type(ex).__name__}: {ex}"})
        run.end_phase()
    run.r["finished"] = True
    run.write()
    run.pack_logs()
    failed = [s for s in run.r["steps"] if s["status"] in ("fail", "timeout")]
    print(f"gpu kit: {len(run.r['steps'])} steps, {len(failed)} failed or timed out, "
          f"{run.elapsed():.0f} s; report in {os.path.join(run.out, 'gpu_report.md')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
