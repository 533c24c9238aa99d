#!/usr/bin/env python3
"""The official OpenAI client library under Node against `pagellm serve`.

usage: test_openai.py PAGELLM

Starts the server on stories260K with an API key and a chat template, runs
tests/oracle/serve_openai.mjs against it, and stops it. The `openai` package comes from
tests/oracle (package.json pins it): when tests/oracle/node_modules lacks it, `npm ci` is run
there first. Exit 77 (skip) without node, npm, the package (npm ci failed: no registry) or
PAGELLM_TEST_MODELS; 0 pass; 1 fail.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(HERE, "..", "oracle")
sys.path.insert(0, HERE)
from server_util import Failure, Server, models_dir  # noqa: E402

# Tools as Hermes writes them (the server reads calls as "hermes"), and the calls of a history.
TEMPLATE = ("{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools> "
            "<tool_call>\n{% endif %}"
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
            "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function.name }}"
            "{{ c.function.arguments | tojson }}</tool_call>{% endfor %}{{ '\\n' }}{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def ensure_openai():
    """None when the package is there (installed now if needed), else why not."""
    if not shutil.which("node"):
        return "node is not installed"
    if all(os.path.isdir(os.path.join(ORACLE, "node_modules", p)) for p in ("openai", "ajv")):
        return None
    if not shutil.which("npm"):
        return "npm is not installed"
    p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=ORACLE, capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0 or not os.path.isdir(os.path.join(ORACLE, "node_modules", "ajv")):
        return f"npm ci in tests/oracle failed:\n{p.stderr[-2000:]}"
    return None


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} PAGELLM")
        return 2
    d = models_dir()
    if not d:
        print("SKIP: PAGELLM_TEST_MODELS unset: no stories260K")
        return 77
    why = ensure_openai()
    if why:
        print(f"SKIP: {why}")
        return 77
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(TEMPLATE)
    key = "sk-test-0123456789"
    srv = None
    try:
        srv = Server(sys.argv[1], ["--model", os.path.join(d, "stories260K.bin"), "--kv-dtype",
                                   "f32", "--threads", "1", "--log-interval", "0",
                                   "--served-model-name", "stories", "--api-key", key,
                                   "--chat-template", f.name])
        p = subprocess.run(["node", os.path.join(ORACLE, "serve_openai.mjs"),
                            f"http://127.0.0.1:{srv.port}/v1", "stories", key],
                           capture_output=True, text=True, timeout=300)
        print(p.stdout, end="")
        if p.returncode != 0:
            print(p.stderr[-4000:])
            print(srv.text()[-4000:])
            return 1
        srv.stop()
        srv = None
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    finally:
        if srv:
            srv.kill()
        os.unlink(f.name)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
