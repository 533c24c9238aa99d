"""The progress bar of generate: drawn on a terminal (tqdm if installed, a plain one
otherwise), counting every prompt; nothing without a terminal or with use_tqdm=False."""
import os
import pty
import select
import subprocess
import sys

SCRIPT = """
import sys
from pagellm import LLM, SamplingParams
llm = LLM("dummy:tiny", max_num_blocks=64, threads=1)
out = llm.generate([[1, 2, i] for i in range(3, 8)], SamplingParams(max_tokens=4),
                   use_tqdm=USE)
print("done", len(out), flush=True)
"""


def run(use_tqdm, tty):
    code = SCRIPT.replace("USE", str(use_tqdm))
    if not tty:
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        return p.stdout + p.stderr
    master, slave = pty.openpty()
    p = subprocess.Popen([sys.executable, "-c", code], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        r, _, _ = select.select([master], [], [], 30)
        if not r:
            break
        try:
            data = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    p.wait(30)
    os.close(master)
    assert p.returncode == 0, b"".join(chunks)
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_bar_on_a_terminal_counts_every_prompt():
    out = run(True, True)
    assert "Processed prompts" in out
    assert "5/5" in out
    assert "done 5" in out


def test_no_bar_without_a_terminal_or_when_asked():
    for use, tty in ((True, False), (False, True), (False, False)):
        out = run(use, tty)
        assert "Processed prompts" not in out, (use, tty)
        assert "done 5" in out
