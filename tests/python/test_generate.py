"""LLM.generate against the command line and the C API on stories260K: greedy outputs equal
`pagellm generate`, logprobs equal the C API's to the bit, seeded samples do not depend on
the batch, stop strings and ids, n > 1, the prompt forms vLLM takes."""
import json
import struct
import subprocess

import pytest

from conftest import tool
from pagellm import LLM, SamplingParams

PROMPTS = ["Once upon a time", "Lily and Tom went to the park", "The cat",
           "One day, a little bird", "Tim had a big red ball. He", "She was sad because",
           "The sun", "Ben and his mom"]


@pytest.fixture(scope="module")
def llm(stories):
    model, tok = stories
    with LLM(model, tokenizer=tok, threads=1) as llm:
        yield llm


def cli_generate(stories, prompts, tmp_path, *flags):
    model, tok = stories
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts))
    out = subprocess.run([tool("PL_PAGELLM_EXE"), "generate", "-m", model, "--tokenizer", tok,
                          "--prompts", str(path), "--json", "--threads", "1", *flags],
                         capture_output=True, text=True, check=True)
    recs = [json.loads(line) for line in out.stdout.splitlines()]
    return sorted(recs, key=lambda r: r["index"])


def test_greedy_outputs_equal_pagellm_generate(llm, stories, tmp_path):
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0, max_tokens=64))
    recs = cli_generate(stories, PROMPTS, tmp_path, "--temperature", "0", "--max-tokens", "64")
    assert len(outs) == len(recs) == len(PROMPTS)
    for prompt, out, rec in zip(PROMPTS, outs, recs):
        assert out.prompt == prompt
        assert out.prompt_token_ids == rec["prompt_token_ids"]
        o = out.outputs[0]
        assert o.token_ids == rec["output_token_ids"], prompt
        assert o.text == rec["text"], prompt
        assert o.finish_reason == rec["finish_reason"]
        assert out.finished


def test_the_done_when_story(llm, stories):
    """The issue's check: the Python one-liner prints what the command line prints."""
    model, tok = stories
    text = llm.generate(["Once upon a time"],
                        SamplingParams(temperature=0, max_tokens=40))[0].outputs[0].text
    cli = subprocess.run([tool("PL_PAGELLM_EXE"), "generate", "-m", model, "--tokenizer", tok,
                          "--prompt", "Once upon a time", "--temperature", "0",
                          "--max-tokens", "40"], capture_output=True, text=True, check=True)
    assert cli.stdout == "Once upon a time" + text + "\n"
    assert text.startswith(", there was a little girl named Lily.")


def test_prompts_as_text_ids_and_dicts_give_the_same_output(llm):
    sp = SamplingParams(temperature=0, max_tokens=12)
    ids = llm.get_tokenizer().encode("Once upon a time")
    assert ids[0] == 1  # BOS, as submit adds it
    forms = ["Once upon a time", {"prompt": "Once upon a time"}, ids, {"prompt_token_ids": ids},
             {"prompt_token_ids": ids, "prompt": "shown only"}]
    outs = [llm.generate(f, sp, use_tqdm=False)[0] for f in forms]
    for o in outs:
        assert o.prompt_token_ids == ids
        assert o.outputs[0].token_ids == outs[0].outputs[0].token_ids
    assert [o.prompt for o in outs] == ["Once upon a time"] * 2 + [None, None, "shown only"]
    # a list of id lists is a batch; request ids are distinct and outputs in input order
    batch = llm.generate([ids, ids[:3]], sp)
    assert [b.prompt_token_ids for b in batch] == [ids, ids[:3]]
    assert batch[0].request_id != batch[1].request_id


def test_logprobs_equal_the_c_apis(llm, stories, tmp_path):
    model, tok = stories
    prompts = PROMPTS[:4]
    path = tmp_path / "prompts.txt"
    path.write_text("\n".join(prompts) + "\n")
    out = subprocess.run([tool("PL_C_API_RUN"), "json", model, tok, str(path), "24", "3", "2",
                          "1"], capture_output=True, text=True, check=True)
    recs = [json.loads(line) for line in out.stdout.splitlines()]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=24, logprobs=3,
                                                prompt_logprobs=2))

    def f32(x):
        return struct.unpack("f", struct.pack("f", x))[0]

    def same(pos, rec):
        token, logprob, rank, top = rec
        items = list(pos.items())
        assert items[0][0] == token  # the sampled (or prompt) token first
        assert items[0][1].logprob == f32(float.fromhex(logprob))
        assert items[0][1].rank == rank
        want = {t: f32(float.fromhex(lp)) for t, lp in top}
        assert {t: lp.logprob for t, lp in items if t in want} == want
        assert len(pos) == len(want) + (token not in want)
        for j, (t, _) in enumerate(top):
            if t != token:
                assert pos[t].rank == j + 1

    for out, rec in zip(outs, recs):
        o = out.outputs[0]
        assert o.token_ids == rec["output_ids"]
        assert len(o.logprobs) == len(o.token_ids) == len(rec["logprobs"])
        for pos, r in zip(o.logprobs, rec["logprobs"]):
            same(pos, r)
        assert o.cumulative_logprob == pytest.approx(
            sum(f32(float.fromhex(r[1])) for r in rec["logprobs"]), rel=1e-6)
        assert out.prompt_logprobs[0] is None
        assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
        for pos, r in zip(out.prompt_logprobs[1:], rec["prompt_logprobs"]):
            same(pos, r)
        # decoded tokens are the tokenizer's text of each id
        tokz = llm.get_tokenizer()
        for pos in o.logprobs:
            for t, lp in pos.items():
                assert lp.decoded_token == tokz.decode([t])
    # without logprobs there are none
    o = llm.generate("The cat", SamplingParams(max_tokens=4))[0]
    assert o.outputs[0].logprobs is None and o.prompt_logprobs is None
    assert o.outputs[0].cumulative_logprob is None


def test_seeded_samples_do_not_depend_on_the_batch(stories):
    model, tok = stories
    sp = SamplingParams(temperature=0.9, top_p=0.95, seed=1234, max_tokens=48)
    others = SamplingParams(temperature=1.0, max_tokens=40)
    with LLM(model, tokenizer=tok, kv_cache_dtype="float32", threads=1) as llm:
        alone = llm.generate(["Once upon a time"], sp)[0].outputs[0].token_ids
        batch = llm.generate(PROMPTS[1:5] + ["Once upon a time"] + PROMPTS[5:],
                             [others] * 4 + [sp] + [others] * 3)
        assert batch[4].outputs[0].token_ids == alone
        small = llm.generate(["The cat", "Once upon a time"], [others, sp])
        assert small[1].outputs[0].token_ids == alone
        again = llm.generate(["Once upon a time"], sp)[0].outputs[0].token_ids
        assert again == alone


def test_the_llm_seed_makes_unseeded_runs_repeat(stories):
    model, tok = stories
    sp = SamplingParams(temperature=1.0, max_tokens=48)

    def run(seed):
        with LLM(model, tokenizer=tok, seed=seed, threads=1) as llm:
            return [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:3], sp)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_stop_strings_and_stop_ids(llm):
    base = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=60))[0]
    text = base.outputs[0].text
    stop = " named"
    assert stop in text
    o = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=60,
                                                        stop=[" zebra", stop]))[0].outputs[0]
    assert o.text == text[:text.index(stop)]
    assert (o.finish_reason, o.stop_reason) == ("stop", stop)
    stop_id = base.outputs[0].token_ids[5]
    o = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=60,
                                                        stop_token_ids=[stop_id]))[0].outputs[0]
    first = base.outputs[0].token_ids.index(stop_id)
    assert o.token_ids == base.outputs[0].token_ids[:first + 1]
    assert (o.finish_reason, o.stop_reason) == ("stop", stop_id)
    # min_tokens holds the stop id back
    o = llm.generate("Once upon a time", SamplingParams(temperature=0, max_tokens=60,
                                                        min_tokens=first + 2,
                                                        stop_token_ids=[stop_id]))[0]
    assert len(o.outputs[0].token_ids) > first + 1


def test_n_samples_of_one_prompt(llm):
    out = llm.generate("Once upon a time", SamplingParams(n=4, temperature=1.0, seed=5,
                                                          max_tokens=32, logprobs=1,
                                                          prompt_logprobs=0))[0]
    assert [o.index for o in out.outputs] == [0, 1, 2, 3]
    assert len({tuple(o.token_ids) for o in out.outputs}) > 1
    for o in out.outputs:
        assert len(o.logprobs) == len(o.token_ids) > 0
        assert o.finish_reason in ("stop", "length")
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
    again = llm.generate("Once upon a time", SamplingParams(n=4, temperature=1.0, seed=5,
                                                            max_tokens=32))[0]
    assert [o.token_ids for o in again.outputs] == [o.token_ids for o in out.outputs]


def test_max_tokens_none_fills_max_model_len(stories):
    model, tok = stories
    with LLM(model, tokenizer=tok, max_model_len=48, threads=1) as llm:
        out = llm.generate("Once upon a time", SamplingParams(max_tokens=None, ignore_eos=True,
                                                              temperature=0))[0]
        assert len(out.prompt_token_ids) + len(out.outputs[0].token_ids) == 48
        assert out.outputs[0].finish_reason == "length"


def test_priorities_cached_prefixes_and_times(llm):
    long_prompt = "Once upon a time, there was a little girl named Lily. She loved to play"
    sp = SamplingParams(temperature=0, max_tokens=8)
    first = llm.generate(long_prompt, sp)[0]
    outs = llm.generate([long_prompt, "The cat"], sp, priority=[5, -5])
    assert outs[0].prompt == long_prompt and outs[1].prompt == "The cat"
    assert outs[0].outputs[0].token_ids == first.outputs[0].token_ids
    assert outs[0].num_cached_tokens >= 16  # a full block came from the prefix cache
    for o in outs:
        m = o.metrics
        assert m.arrival_time <= m.first_scheduled_time <= m.first_token_time <= \
            m.finished_time
        assert m.time_in_queue >= 0


def test_an_empty_prompt_generates_from_bos(llm, stories):
    """As llama2.c and vLLM: "" is BOS alone, and the story starts a text (no leading space),
    the same in Python and on the command line; an empty id list has nothing to start from."""
    model, tok = stories
    out = llm.generate([""], SamplingParams(temperature=0, max_tokens=40))[0]
    assert out.prompt_token_ids == [1]
    assert out.outputs[0].text.startswith("Once upon a time, there was a little girl named Lily.")
    cli = subprocess.run([tool("PL_PAGELLM_EXE"), "generate", "-m", model, "--tokenizer", tok,
                          "--prompt", "", "--temperature", "0", "--max-tokens", "40"],
                         capture_output=True, text=True, check=True)
    assert cli.stdout == out.outputs[0].text + "\n"
    with pytest.raises(ValueError):
        llm.generate([[]], SamplingParams(max_tokens=4))
