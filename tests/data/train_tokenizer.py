#!/usr/bin/env python3
"""Trains one SentencePiece model with spm_train for the tokenizer tests (see README.md).

Usage: train_tokenizer.py SPM_TRAIN OUT.model [spm_train flags...]

Runs `SPM_TRAIN --model_prefix=<tmp>/m <flags>` in a temporary directory and moves m.model to
OUT.model. spm_train logs ~18 KB per run; it is shown only when training fails, so a build
stays quiet and a failure is loud (non-zero exit, full log on stderr).
"""
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: train_tokenizer.py SPM_TRAIN OUT.model [spm_train flags...]")
    spm_train, out = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [spm_train, "--model_prefix=" + os.path.join(tmp, "m")] + sys.argv[3:]
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if run.returncode != 0 or not os.path.exists(os.path.join(tmp, "m.model")):
            sys.stderr.write(run.stdout.decode("utf-8", "replace"))
            sys.exit("spm_train failed (exit %d): %s" % (run.returncode, " ".join(cmd)))
        shutil.move(os.path.join(tmp, "m.model"), out)


if __name__ == "__main__":
    main()
