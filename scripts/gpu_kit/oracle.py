#!/usr/bin/env python3
"""An independent oracle for the GPU kit: small random-weight Llama 3, Qwen2, Qwen3 and Mistral
models written by transformers (PyTorch), transformers' own f32 logits against pagellm's on the
CUDA backend, with pagellm's CPU backend as a control (scripts/gpu_kit.sh, run.py).

usage: oracle.py --out FILE.json [--workdir DIR] [--backends cuda,cpu] [--families ...]
                 [--prompts N] [--new-tokens N]
       oracle.py --out FILE.json --model PATH --reference ref [--backends cpu]

With torch and transformers (the device image has both): each family is built from its
transformers config class with seeded random weights (initializer_range 0.1, so logits spread
over a few units and greedy choices are mostly clear), saved with save_pretrained (safetensors
and a transformers-5 config.json: rope_parameters), and for each prompt (random token ids):
  - transformers generates N tokens greedily in f32; one more forward over prompt + generated
    gives its log-softmax at every position (teacher forcing);
  - pagellm (each backend) generates greedily from the prompt: its ids must equal transformers'
    up to the first step where transformers' top-1 logit leads the second by less than 1e-2
    (after that a last-bit difference may pick either);
  - pagellm scores prompt + transformers' tokens (prompt_logprobs, top 20): at every position
    the logprobs of those tokens against transformers' log-softmax; "logit error" is the
    largest difference after removing each position's mean difference (the normaliser), which
    is how far the logits themselves are apart.
Without torch (this machine, the test suite): --model PATH is scored against pagellm's own
reference backend (--reference ref), the same comparisons and the same report: the pagellm
half is what the test exercises.

Writes FILE.json: {"reference": "transformers X" | "pagellm ref", "results": [{family, backend,
prompt, greedy_equal_until, clear_steps, greedy_ok, max_logprob_err, max_logit_err, ...}]}
and prints one line per result.
"""
import argparse
import json
import math
import os
import random
import sys
import time

GAP = 1e-2     # a greedy step is "clear" when top-1 leads top-2 by at least this (logits)
LOGIT_TOL = 2e-2


def log_softmax(row):
    m = max(row)
    s = math.fsum(math.exp(v - m) for v in row)
    lse = m + math.log(s)
    return [v - lse for v in row]


# ---- the reference: transformers ---------------------------------------------------------

FAMILIES = {
    "llama3": ("LlamaConfig", "LlamaForCausalLM", dict(
        rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64},
        tie_word_embeddings=False)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(rope_theta=1000000.0,
                                                      tie_word_embeddings=False,
                                                      use_sliding_window=False)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(rope_theta=1000000.0, head_dim=64,
                                                      tie_word_embeddings=True,
                                                      use_sliding_window=False)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(rope_theta=10000.0,
                                                            sliding_window=24,
                                                            tie_word_embeddings=False)),
}


def preload_cuda():
    """Makes libcudart.so.13, libcublasLt.so.13 and libcublas.so.13 loaded before pagellm's
    library is: PyTorch's own when it has them mapped already, else the first found in its
    nvidia wheels or the CUDA folders (run.py gives this process no CUDA folder in
    LD_LIBRARY_PATH, so PyTorch keeps its libraries). Returns {soname: path}."""
    import ctypes
    import glob
    import site
    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        maps = ""
    roots = []
    for sp in site.getsitepackages():
        roots += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    roots += ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"]
    roots += sorted(glob.glob("/usr/local/cuda-*/lib64"))
    used = {}
    for so in ("libcudart.so.13", "libcublasLt.so.13", "libcublas.so.13"):
        hit = [ln.split()[-1] for ln in maps.splitlines() if ln.rstrip().endswith(so)]
        if hit:
            used[so] = hit[0]
            continue
        for r in roots:
            path = os.path.join(r, so)
            if os.path.exists(path):
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                used[so] = path
                break
    return used


def build_hf(family, outdir, seed):
    import torch
    import transformers
    cfg_cls, model_cls, extra = FAMILIES[family]
    extra = dict(extra)
    major = int(transformers.__version__.split(".")[0])
    if major >= 5:  # rope_theta and the scaling live in rope_parameters there
        rp = dict(extra.pop("rope_scaling", None) or {"rope_type": "default"})
        rp["rope_theta"] = extra.pop("rope_theta")
        extra["rope_parameters"] = rp
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_cls)(
        vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=512,
        rms_norm_eps=1e-5, initializer_range=0.1, bos_token_id=1, eos_token_id=2, **extra)
    cfg._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(cfg).to(torch.float32).eval()
    with torch.no_grad():  # norms and biases away from their 1 / 0 inits: they are checked too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(outdir)
    return model


def hf_reference(model, prompt, n_new, device):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32
    torch.set_float32_matmul_precision("highest")
    model = model.to(device)
    ids = list(prompt)
    gaps = []
    with torch.no_grad():
        for _ in range(n_new):  # greedy, recomputed in full: small models, exact f32
            logits = model(torch.tensor([ids], device=device)).logits[0, -1].float()
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            ids.append(int(top.indices[0]))
        full = model(torch.tensor([ids], device=device)).logits[0].float()
        lsm = torch.log_softmax(full, dim=-1).cpu().tolist()
    return ids[len(prompt):], gaps, lsm


# ---- the other side: pagellm ---------------------------------------------------------------

def pagellm_run(model_path, backend, prompt, n_new, extra):
    import pagellm
    llm = pagellm.LLM(model_path, backend=backend, enable_prefix_caching=False, **extra)
    try:
        gen = llm.generate([{"prompt_token_ids": list(prompt)}],
                           pagellm.SamplingParams(max_tokens=n_new, temperature=0.0,
                                                  ignore_eos=True), use_tqdm=False)
        out_ids = list(gen[0].outputs[0].token_ids)
        return llm, out_ids
    except BaseException:
        llm.close()
        raise


def pagellm_score(llm, seq):
    """{position: {token: logprob}} of prompt seq (teacher forcing), top 20 plus the token."""
    import pagellm
    res = llm.generate([{"prompt_token_ids": list(seq)}],
                       pagellm.SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True,
                                              prompt_logprobs=20), use_tqdm=False)
    plp = res[0].prompt_logprobs  # [None, {tok: Logprob}, ...] as vLLM
    out = {}
    for pos, d in enumerate(plp):
        if not d:
            continue
        out[pos] = {int(t): float(getattr(v, "logprob", v)) for t, v in d.items()}
    return out


def ref_reference(model_path, prompt, n_new):
    """The reference without torch: pagellm's ref backend, log-softmax from its top 20."""
    llm, ids = pagellm_run(model_path, "ref", prompt, n_new, {"kv_dtype": "f32"})
    try:
        scored = pagellm_score(llm, list(prompt) + ids)
    finally:
        llm.close()
    return ids, scored


def compare(ref_ids, gaps, ref_lp, pl_ids, pl_scored, seq_len):
    """greedy agreement up to the first unclear step, and logprob/logit errors."""
    clear = 0
    while clear < len(gaps) and gaps[clear] >= GAP:
        clear += 1
    equal = 0
    while equal < min(len(ref_ids), len(pl_ids)) and ref_ids[equal] == pl_ids[equal]:
        equal += 1
    max_lp = max_logit = 0.0
    n_pos = 0
    for pos in range(1, seq_len):
        got = pl_scored.get(pos)
        if not got:
            continue
        diffs = [got[t] - ref_lp(pos, t) for t in got]
        diffs = [d for d in diffs if d == d]  # NaN-free
        if not diffs:
            continue
        n_pos += 1
        max_lp = max(max_lp, max(abs(d) for d in diffs))
        mean = sum(diffs) / len(diffs)
        max_logit = max(max_logit, max(abs(d - mean) for d in diffs))
    return {"greedy_equal_until": equal, "clear_steps": clear,
            "greedy_ok": equal >= clear, "positions": n_pos,
            "max_logprob_err": round(max_lp, 6), "max_logit_err": round(max_logit, 6),
            "logits_ok": max_logit <= LOGIT_TOL}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--workdir", default="/tmp/pagellm-oracle")
    ap.add_argument("--backends", default="cuda,cpu")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--model", help="without torch: a model to score against --reference")
    ap.add_argument("--reference", default="transformers", choices=["transformers", "ref"])
    a = ap.parse_args()
    backends = [b for b in a.backends.split(",") if b]
    results = []
    report = {"gap": GAP, "logit_tol": LOGIT_TOL, "results": results}

    def save():
        with open(a.out + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(a.out + ".tmp", a.out)

    rng = random.Random(7)
    if a.reference == "ref":
        if not a.model:
            print("oracle.py: --reference ref needs --model", file=sys.stderr)
            return 2
        report["reference"] = "pagellm ref backend (no torch here)"
        for p in range(a.prompts):
            prompt = [1] + [rng.randrange(3, 500) for _ in range(8 + 5 * p)]
            ref_ids, ref_scored = ref_reference(a.model, prompt, a.new_tokens)
            seq = prompt + ref_ids

            def ref_lp(pos, tok, s=ref_scored):
                return s.get(pos, {}).get(tok, float("nan"))
            gaps = [GAP] * len(ref_ids)  # the ref backend's own top-2 gap is not exported
            for be in backends:
                t0 = time.monotonic()
                try:
                    llm, ids = pagellm_run(a.model, be, prompt, a.new_tokens, {})
                    try:
                        scored = pagellm_score(llm, seq)
                    finally:
                        llm.close()
                    r = dict(family=os.path.basename(a.model), backend=be, prompt=p,
                             seconds=round(time.monotonic() - t0, 2),
                             **compare(ref_ids, gaps, ref_lp, ids, scored, len(seq)))
                except Exception as ex:  # one backend's failure is a result, not the end
                    r = dict(family=os.path.basename(a.model), backend=be, prompt=p,
                             error=f"{type(ex).__name__}: {ex}")
                results.append(r)
                print(json.dumps(r), flush=True)
                save()
        save()
        return 0

    import torch
    import transformers
    report["reference"] = f"transformers {transformers.__version__} f32 (torch {torch.__version__})"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.zeros(1, device="cuda")  # loads PyTorch's CUDA libraries
    report["cuda_libraries"] = preload_cuda()
    os.makedirs(a.workdir, exist_ok=True)
    for fi, fam in enumerate([f for f in a.families.split(",") if f]):
        d = os.path.join(a.workdir, fam)
        try:
            model = build_hf(fam, d, seed=100 + fi)
        except Exception as ex:
            results.append(dict(family=fam, error=f"building: {type(ex).__name__}: {ex}"))
            save()
            continue
        for p in range(a.prompts):
            prompt = [1] + [rng.randrange(3, 1024) for _ in range(12 + 17 * p)]
            ref_ids, gaps, lsm = hf_reference(model, prompt, a.new_tokens, device)
            seq = prompt + ref_ids

            def ref_lp(pos, tok, m=lsm):
                return m[pos - 1][tok]  # logits at pos-1 predict token pos
            for be in backends:
                t0 = time.monotonic()
                try:
                    llm, ids = pagellm_run(d, be, prompt, a.new_tokens, {})
                    try:
                        scored = pagellm_score(llm, seq)
                    finally:
                        llm.close()
                    r = dict(family=fam, backend=be, prompt=p, prompt_len=len(prompt),
                             seconds=round(time.monotonic() - t0, 2),
                             **compare(ref_ids, gaps, ref_lp, ids, scored, len(seq)))
                except Exception as ex:
                    r = dict(family=fam, backend=be, prompt=p,
                             error=f"{type(ex).__name__}: {ex}")
                results.append(r)
                print(json.dumps(r), flush=True)
                save()
        del model
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
