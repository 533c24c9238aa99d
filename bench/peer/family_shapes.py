#!/usr/bin/env python3
"""bench/peer/family_shapes.py - speed files for the families that share the dense kernels
(issue 30: Gemma 2 and Phi-3 "within the dense families' ratio to llama.cpp"): random models
of the stories110M shape (dim 768, 12 layers, 12 heads, hidden 2048, vocabulary 32000,
context 1024) written by llama.cpp's own writer (families_check.build with the shape
replaced), for llama (the dense control), gemma2 and phi3, then quantised by `pagellm
quantize`; bench/peer/run.py then runs both engines on them.

usage: /usr/bin/python3 bench/peer/family_shapes.py --llama-src DIR
           [--pagellm build/tools/pagellm] [--families llama,gemma2,phi3] [--types q4_0]
  writes $PEER_MODELS/FAMILY-110m/pl-f32.gguf and pl-TYPE.gguf (files that exist are kept);
  then: bench/peer/run.py --shapes llama-110m,gemma2-110m,phi3-110m --types q4_0 --files pl

The shapes differ from the test files only where speed would not be comparable: Gemma 2's
window covers the whole context (the test file's 12 positions would make its attention nearly
free) and Phi-3's original context is the file's (short rope factors; the long ones cost the
same). Gemma keeps its soft-caps, post-norms and tied embeddings; Phi-3 its fused QKV and
gate-up tensors. Needs numpy (run with /usr/bin/python3).
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import families_check  # noqa: E402

SHAPE = dict(dim=768, heads=12, kv=12, hd=64, ffn=2048, layers=12, vocab=32000, ctx=1024,
             window=1024, orig_ctx=1024)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-src", required=True)
    ap.add_argument("--pagellm",
                    default=os.path.join(HERE, "..", "..", "build", "tools", "pagellm"))
    ap.add_argument("--families", default="llama,gemma2,phi3")
    ap.add_argument("--types", default="q4_0")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.llama_src, "gguf-py"))
    import gguf  # noqa: E402
    out = os.environ.get("PEER_MODELS", "/tmp/pagellm-peer-models")
    for fam in a.families.split(","):
        d = os.path.join(out, fam + "-110m")
        os.makedirs(d, exist_ok=True)
        src = os.path.join(d, "pl-f32.gguf")
        if not os.path.exists(src):
            families_check.build(gguf, fam, src + ".part", SHAPE)
            os.rename(src + ".part", src)
        for t in a.types.split(","):
            dst = os.path.join(d, f"pl-{t}.gguf")
            if not os.path.exists(dst):
                subprocess.run([a.pagellm, "quantize", src, dst, t], check=True)
        print(d)
    return 0


if __name__ == "__main__":
    sys.exit(main())
