"""Lifetimes: 1,000 create/generate/close cycles (and as many left to the garbage collector)
keep the process's RSS bounded; C buffers are copied out and freed at once."""
import gc
import os

import pytest

from pagellm import LLM, LLMEngine, SamplingParams, Tokenizer

CFG = dict(model="dummy:tiny", max_num_blocks=32, threads=1)
SANITIZED = bool(os.environ.get("PL_SANITIZED"))
CYCLES = 200 if SANITIZED else 1000


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def check_bounded(samples, what):
    if SANITIZED:
        pytest.skip("under ASan, RSS measures the allocator's quarantine (the non-sanitized "
                    "run checks the bound)")
    # after the warm-up the process stops growing: what the last cycles add is noise
    mid, end = samples[len(samples) // 5], samples[-1]
    assert end - mid < 2048, f"{what}: RSS grew {end - mid} KiB after the warm-up " \
                             f"({samples[::max(1, len(samples) // 10)]})"


def cycle(i, close=True):
    llm = LLM(**CFG)
    out = llm.generate([[1, 2, 3 + i % 100], [5, 6]],
                       SamplingParams(n=2, max_tokens=6, logprobs=2, prompt_logprobs=1,
                                      stop_token_ids=[7], ignore_eos=True), use_tqdm=False)
    assert len(out) == 2 and len(out[0].outputs) == 2
    llm.metrics()
    assert llm.model_info.vocab_size == 512
    if close:
        llm.close()


def test_create_generate_close_cycles_keep_rss_bounded():
    samples = []
    for i in range(CYCLES):
        cycle(i)
        if i % 10 == 0:
            samples.append(rss_kib())
    check_bounded(samples, "close()")


def test_engines_left_to_the_garbage_collector_are_freed():
    samples = []
    for i in range(CYCLES // 2):
        cycle(i, close=False)
        with LLMEngine(**CFG) as eng:  # the context manager
            eng.add_request("a", [1, 2, 3], SamplingParams(max_tokens=3))
            list(eng.stream())
        if i % 10 == 0:
            gc.collect()
            samples.append(rss_kib())
    check_bounded(samples, "garbage collector")


def test_many_calls_on_one_engine_keep_rss_bounded(stories):
    """The per-call path: completions, logprobs, stream deltas, token ids and texts the
    library hands over are freed (a leak of a few hundred bytes a call shows here)."""
    model, tok = stories
    with LLM(model, tokenizer=tok, threads=1, max_num_blocks=64) as llm, \
            LLMEngine(model, tokenizer=tok, threads=1, max_num_blocks=64,
                      chat_template="{% for m in messages %}{{ m.content }}{% endfor %}") as eng:
        t = llm.get_tokenizer()
        sp = SamplingParams(n=2, max_tokens=4, logprobs=2, prompt_logprobs=1, stop=["zzz"])
        samples = []
        for i in range(CYCLES * 5):
            out = llm.generate(["Once upon a time", [1, 403, 407 + i % 50]], sp)
            assert len(out[1].outputs) == 2
            ids = t.encode(f"Lily {i}")
            assert t.decode(ids, skip_special_tokens=True) == f"Lily {i}"
            eng.add_chat_request(None, [{"role": "user", "content": "Tom"}],
                                 SamplingParams(max_tokens=3, logprobs=1))
            eng.add_request(None, "The cat", SamplingParams(max_tokens=2))
            assert sum(d.finished for d in eng.stream()) == 2
            if i % 50 == 0:
                samples.append(rss_kib())
        check_bounded(samples, "calls")


def test_a_finalized_engine_is_destroyed_exactly_once():
    llm = LLM(**CFG)
    fin = llm._handle._finalizer
    assert fin.alive
    del llm
    gc.collect()
    assert not fin.alive
    llm = LLM(**CFG)
    fin = llm._handle._finalizer
    llm.close()
    assert not fin.alive
    llm.close()


def test_tokenizer_load_and_encode_cycles(stories):
    _, tok_path = stories
    samples = []
    for i in range(CYCLES):
        t = Tokenizer.load(tok_path)
        ids = t.encode("Once upon a time " * 20)
        assert t.decode(ids, skip_special_tokens=True).startswith("Once upon")
        if i % 2:
            t.close()
        if i % 10 == 0:
            gc.collect()
            samples.append(rss_kib())
    check_bounded(samples, "tokenizers")
