#!/usr/bin/env python3
"""scripts/test.sh and scripts/test_summary.py (issue 26 item 18): the shared models are used
by default when ../shared/models exists, and the summary says what was skipped and why.

usage: check_test_script.py SOURCE_DIR   (exit 0 pass, 1 fail)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def env_of(test_sh, **env):
    e = {k: v for k, v in os.environ.items()
         if k not in ("PAGELLM_TEST_MODELS", "CRITERION_VERBOSITY_LEVEL")}
    e.update(env)
    out = subprocess.run(["bash", test_sh, "--env"], capture_output=True, text=True, env=e,
                         check=True).stdout
    return dict(l.split("=", 1) for l in out.splitlines())


def check_defaults(src, tmp):
    repo = os.path.join(tmp, "work", "repo")
    os.makedirs(os.path.join(repo, "scripts"))
    shutil.copy(os.path.join(src, "scripts", "test.sh"), os.path.join(repo, "scripts"))
    test_sh = os.path.join(repo, "scripts", "test.sh")
    got = env_of(test_sh)
    if got["PAGELLM_TEST_MODELS"] != "":
        fail(f"no ../shared/models, yet PAGELLM_TEST_MODELS={got['PAGELLM_TEST_MODELS']}")
    models = os.path.join(tmp, "work", "shared", "models")
    os.makedirs(models)
    got = env_of(test_sh)
    if got["PAGELLM_TEST_MODELS"] != os.path.realpath(models):
        fail(f"../shared/models exists, PAGELLM_TEST_MODELS={got['PAGELLM_TEST_MODELS']!r}")
    if got["CRITERION_VERBOSITY_LEVEL"] != "1":
        fail("Criterion's skipped cases would not be printed")
    if env_of(test_sh, PAGELLM_TEST_MODELS="/elsewhere")["PAGELLM_TEST_MODELS"] != "/elsewhere":
        fail("a PAGELLM_TEST_MODELS the user set was replaced")
    if env_of(test_sh, PAGELLM_TEST_MODELS="")["PAGELLM_TEST_MODELS"] != "":
        fail("PAGELLM_TEST_MODELS set empty (run without models) was replaced")


def check_summary(src, tmp):
    build = os.path.join(tmp, "build")
    os.makedirs(os.path.join(build, "meson-logs"))
    crit = ("[SKIP] api_args::text_prompts: PAGELLM_TEST_MODELS unset: no tokenizer\n"
            "[====] Synthesis: Tested: 3 | Passing: 3 | Failing: 0 | Crashing: 0\n")
    rows = [
        {"name": "api_args", "result": "OK", "stdout": crit},
        {"name": "stories", "result": "SKIP", "stdout": "SKIP: PAGELLM_TEST_MODELS is not set\n"},
        {"name": "silent", "result": "SKIP", "stdout": ""},
        {"name": "cli_refusals", "result": "OK",
         "stdout": "# skip: PAGELLM_TEST_MODELS is not set: no stories260K cases\n73 passed\n"},
        {"name": "layering", "result": "OK", "stdout": ""},
    ]
    with open(os.path.join(build, "meson-logs", "testlog.json"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    p = subprocess.run([sys.executable, os.path.join(src, "scripts", "test_summary.py"), build],
                       capture_output=True, text=True)
    out = p.stdout
    want = [
        "skipped: api_args: api_args::text_prompts: PAGELLM_TEST_MODELS unset: no tokenizer",
        "skipped: stories: PAGELLM_TEST_MODELS is not set",
        "skipped: silent: exit 77 (no reason printed)",
        "partly:  cli_refusals: PAGELLM_TEST_MODELS is not set: no stories260K cases",
    ]
    for w in want:
        if w not in out:
            fail(f"the summary lacks {w!r}:\n{out}")
    if not out.rstrip().endswith("5 passed, 0 failed, 3 skipped") or p.returncode != 0:
        fail(f"counts: {out}")


def main():
    src = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="pagellm-testsh-") as tmp:
        check_defaults(src, tmp)
        check_summary(src, tmp)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
