#!/usr/bin/env python3
"""bench/peer/families_check.py - GGUF files written by llama.cpp's own writer (gguf-py) for
every family of issue 30, run by llama.cpp and by pagellm: the same greedy ids.

usage: /usr/bin/python3 bench/peer/families_check.py --llama-src DIR --llama-lib DIR
           [--pagellm build/tools/pagellm] [--families mixtral,...] [--out DIR] [--n-out 48]

  --llama-src  a llama.cpp source tree (its gguf-py, include/ and ggml/include/): the newest,
               github:unslothai/llama.cpp (August 2026), checked out OUTSIDE this repository
  --llama-lib  the directory of its built libllama.so and libggml*.so (CPU build)
Needs numpy (Debian python3-numpy: run it with /usr/bin/python3). Builds llama_greedy.cpp
(beside this script) against them into --out (default /tmp/pagellm-families-check).

For each family (llama, mixtral, qwen2moe, qwen3moe, gemma2, gemma3, phi3) a small random
model is written in llama.cpp's layout with gguf-py's GGUFWriter: its keys through the
writer's add_* calls, its tensors under gguf-py's TENSOR_NAMES (stacked ffn_*_exps, fused
attn_qkv and ffn_up for phi3, Gemma's norms stored as 1 + w as llama.cpp's converter stores
them, rope_factors_long/short), all F32, a small SentencePiece ("llama") vocabulary. Weights
are scaled so greedy tokens wander (as tests/support's family models are). Then each of a
few id prompts is continued greedily for N tokens by llama.cpp (llama_greedy: f32 KV, flash
attention off, the file's whole context) and by `pagellm generate --prompt-ids` (f32 KV,
cpu), and the ids are compared: equal, or equal up to a step where llama.cpp's top two logits
were within 1e-3 (a near tie that last-bit differences may flip; after it either is right).
Prints one line per family and prompt; exits 1 on a disagreement that is not a near tie.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NEAR_TIE = 1e-3
PROMPTS = [[1, 5, 9, 44, 200, 17], [1, 150, 151, 7], [1] + list(range(30, 62))]


def vocab(w, n):
    """A SentencePiece vocabulary of n tokens: <unk>, <s>, </s>, the 256 byte tokens, then
    pieces. Only ids are fed; both engines need a vocabulary to load a file."""
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        toks.append("<0x%02X>" % b), scores.append(0.0), types.append(6)
    i = 0
    while len(toks) < n:
        toks.append("\u2581" + "".join(chr(97 + (i // 26 ** k) % 26) for k in range(2)) + str(i))
        scores.append(-float(i)), types.append(1)
        i += 1
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


class Model:
    def __init__(self, gguf, arch, seed, d):
        self.g, self.rng, self.d = gguf, np.random.default_rng(seed), d
        self.arch = arch
        self.tensors = []

    def name(self, t, bid=None):
        n = self.g.TENSOR_NAMES[t]
        return (n.format(bid=bid) if bid is not None else n) + ".weight"

    def mat(self, rows, cols, gain=1.0, *, lead=None):
        shape = (rows, cols) if lead is None else (lead, rows, cols)
        return (self.rng.uniform(-1, 1, shape) * gain / np.sqrt(cols)).astype(np.float32)

    def vec(self, n, center=1.0, spread=0.25):
        return (center + spread * self.rng.uniform(-1, 1, n)).astype(np.float32)

    def add(self, t, arr, bid=None):
        self.tensors.append((self.name(t, bid), arr))


def build(g, family, path, shape=None):
    """Writes family's random model to path; returns its context length. shape: keys of cfg
    (and window, orig_ctx) that replace the small test shape (bench/peer/family_shapes.py)."""
    T = g.MODEL_TENSOR
    cfg = dict(dim=48, heads=6, kv=2, hd=8, ffn=64, layers=2, vocab=300, ctx=256, eps=1e-5,
               theta=10000.0)
    arch = {"llama": g.MODEL_ARCH.LLAMA, "mixtral": g.MODEL_ARCH.LLAMA,
            "qwen2moe": g.MODEL_ARCH.QWEN2MOE, "qwen3moe": g.MODEL_ARCH.QWEN3MOE,
            "gemma2": g.MODEL_ARCH.GEMMA2, "gemma3": g.MODEL_ARCH.GEMMA3,
            "phi3": g.MODEL_ARCH.PHI3}[family]
    if family in ("gemma2", "gemma3"):
        cfg.update(heads=4, kv=2, hd=16, layers=3 if family == "gemma3" else 2, eps=1e-6)
    if family == "qwen3moe":
        cfg.update(heads=4, kv=2, hd=14)
    cfg.update(shape or {})
    m = Model(g, arch, {"llama": 1, "mixtral": 2, "qwen2moe": 3, "qwen3moe": 4, "gemma2": 5,
                        "gemma3": 6, "phi3": 7}[family], cfg)
    w = g.GGUFWriter(path, g.MODEL_ARCH_NAMES[arch])
    D, H, KV, hd, F, L = cfg["dim"], cfg["heads"], cfg["kv"], cfg["hd"], cfg["ffn"], cfg["layers"]
    qd, kvd = H * hd, KV * hd
    w.add_context_length(cfg["ctx"])
    w.add_embedding_length(D)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    w.add_layer_norm_rms_eps(cfg["eps"])
    w.add_rope_freq_base(cfg["theta"] if family != "gemma3" else 1e6)
    w.add_file_type(0)
    vocab(w, cfg["vocab"])
    E, K = {"mixtral": (4, 2), "qwen2moe": (6, 3), "qwen3moe": (8, 2)}.get(family, (0, 0))
    FE = {"mixtral": F, "qwen2moe": 20, "qwen3moe": 24}.get(family, 0)
    if E:
        w.add_expert_count(E)
        w.add_expert_used_count(K)
        if family != "mixtral":
            w.add_expert_feed_forward_length(FE)
    if family == "qwen2moe":
        w.add_expert_shared_feed_forward_length(44)
    if family == "gemma2":
        w.add_sliding_window(cfg.get("window", 12))
        w.add_attn_logit_softcapping(4.0)
        w.add_final_logit_softcapping(6.0)
    if family == "gemma3":
        w.add_sliding_window(12)
        w.add_sliding_window_pattern(3)  # layers 0, 1 local; 2 global
        w.add_rope_scaling_type(g.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(2.0)
    if family == "phi3":
        orig = cfg.get("orig_ctx", 128)
        w.add_rope_scaling_orig_ctx_len(orig)
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(cfg["ctx"] / orig) /
                                                      np.log(orig))))
        w.add_sliding_window(0)
        m.add(T.ROPE_FACTORS_LONG, np.array([1 + 1.5 * j * j for j in range(hd // 2)], np.float32))
        m.add(T.ROPE_FACTORS_SHORT, np.array([1 + 0.25 * j for j in range(hd // 2)], np.float32))
    gemma = family in ("gemma2", "gemma3")
    m.add(T.TOKEN_EMBD, (m.rng.uniform(-1, 1, (cfg["vocab"], D)) * 0.3).astype(np.float32))
    for b in range(L):
        m.add(T.ATTN_NORM, m.vec(D), b)
        q, k, v = m.mat(qd, D, 4), m.mat(kvd, D, 4), m.mat(kvd, D)
        if family == "phi3":
            m.add(T.ATTN_QKV, np.concatenate([q, k, v]), b)
        else:
            m.add(T.ATTN_Q, q, b), m.add(T.ATTN_K, k, b), m.add(T.ATTN_V, v, b)
        if family == "qwen2moe":
            for t, n in ((T.ATTN_Q, qd), (T.ATTN_K, kvd), (T.ATTN_V, kvd)):
                m.tensors.append((g.TENSOR_NAMES[t].format(bid=b) + ".bias",
                                  (0.1 * m.rng.uniform(-1, 1, n)).astype(np.float32)))
        if family in ("qwen3moe", "gemma3"):
            m.add(T.ATTN_Q_NORM, m.vec(hd, 3.0 if family == "qwen3moe" else 2.0), b)
            m.add(T.ATTN_K_NORM, m.vec(hd, 3.0 if family == "qwen3moe" else 2.0), b)
        m.add(T.ATTN_OUT, m.mat(D, qd, 6), b)
        if gemma:
            m.add(T.ATTN_POST_NORM, m.vec(D, 4.0, 1.0), b)
        m.add(T.FFN_NORM, m.vec(D), b)
        if E:
            m.add(T.FFN_GATE_INP, m.mat(E, D, 3), b)
            m.add(T.FFN_GATE_EXP, m.mat(FE, D, lead=E), b)
            m.add(T.FFN_UP_EXP, m.mat(FE, D, lead=E), b)
            m.add(T.FFN_DOWN_EXP, m.mat(D, FE, 0.3, lead=E), b)
            if family == "qwen2moe":
                m.add(T.FFN_GATE_INP_SHEXP, m.mat(1, D), b)
                m.add(T.FFN_GATE_SHEXP, m.mat(44, D), b)
                m.add(T.FFN_UP_SHEXP, m.mat(44, D), b)
                m.add(T.FFN_DOWN_SHEXP, m.mat(D, 44, 0.3), b)
        elif family == "phi3":
            m.add(T.FFN_UP, np.concatenate([m.mat(F, D), m.mat(F, D)]), b)  # gate, then up
            m.add(T.FFN_DOWN, m.mat(D, F, 0.3), b)
        else:
            m.add(T.FFN_GATE, m.mat(F, D), b)
            m.add(T.FFN_UP, m.mat(F, D), b)
            m.add(T.FFN_DOWN, m.mat(D, F, 0.3), b)
        if gemma:
            m.add(T.FFN_POST_NORM, m.vec(D, 2.0, 0.5), b)
    m.add(T.OUTPUT_NORM, m.vec(D))
    if not gemma:
        m.add(T.OUTPUT, m.mat(cfg["vocab"], D, 2.0))
    for n, a in m.tensors:
        w.add_tensor(n, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return cfg["ctx"]


def llama_greedy(exe, path, n_out, ctx):
    p = subprocess.run([exe, path, str(n_out), str(ctx)] + [",".join(map(str, q)) for q in PROMPTS],
                       capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"llama_greedy {path}: {p.stderr}")
    out = []
    for line in p.stdout.splitlines():
        ids, gaps = line.split("\t")
        out.append(([int(x) for x in ids.split(",")], [float(x) for x in gaps.split(",")]))
    return out


def pagellm_greedy(exe, path, n_out):
    res = []
    for q in PROMPTS:
        p = subprocess.run([exe, "generate", "--model", path, "--prompt-ids", ",".join(map(str, q)),
                            "--temperature", "0", "--max-tokens", str(n_out), "--ignore-eos",
                            "--kv-dtype", "f32", "--backend", "cpu", "--threads", "2", "--json"],
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            return None, p.stderr.strip()
        res.append(json.loads(p.stdout.splitlines()[-1])["output_token_ids"])
    return res, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-src", required=True)
    ap.add_argument("--llama-lib", required=True)
    ap.add_argument("--pagellm", default=os.path.join(HERE, "..", "..", "build", "tools", "pagellm"))
    ap.add_argument("--families", default="llama,mixtral,qwen2moe,qwen3moe,gemma2,gemma3,phi3")
    ap.add_argument("--out", default="/tmp/pagellm-families-check")
    ap.add_argument("--n-out", type=int, default=48)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.llama_src, "gguf-py"))
    import gguf  # noqa: E402
    os.makedirs(a.out, exist_ok=True)
    exe = os.path.join(a.out, "llama_greedy")
    subprocess.run(["g++", "-O2", "-std=c++17", "-I", os.path.join(a.llama_src, "include"),
                    "-I", os.path.join(a.llama_src, "ggml", "include"),
                    os.path.join(HERE, "llama_greedy.cpp"), "-L", a.llama_lib, "-lllama",
                    "-lggml", "-lggml-base", "-Wl,-rpath," + a.llama_lib, "-o", exe], check=True)
    bad = 0
    for fam in a.families.split(","):
        path = os.path.join(a.out, fam + ".gguf")
        ctx = build(gguf, fam, path)
        want = llama_greedy(exe, path, a.n_out, ctx)
        got, err = pagellm_greedy(a.pagellm, path, a.n_out)
        if got is None:
            print(f"{fam}: pagellm refused the file: {err}")
            bad += 1
            continue
        for i, ((ids, gaps), mine) in enumerate(zip(want, got)):
            k = next((j for j in range(a.n_out) if ids[j] != mine[j]), a.n_out)
            if k == a.n_out:
                verdict = f"equal ({a.n_out} tokens, {len(set(ids))} distinct)"
            elif gaps[k] < NEAR_TIE:
                verdict = f"equal up to a near tie at {k} (llama.cpp's top-2 gap {gaps[k]:.2g})"
            else:
                verdict = f"DIFFER at {k}: llama.cpp {ids[k:k + 5]}, pagellm {mine[k:k + 5]}"
                bad += 1
            print(f"{fam} prompt {i}: {verdict}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
