"""LLMEngine: streamed deltas add up to the outputs, abort, request ids, the serving loop
(wait/wake/stop), and the GIL released while the library computes."""
import threading
import time

import pytest

from pagellm import LLM, LLMEngine, SamplingParams

TINY = dict(model="dummy:tiny", max_num_blocks=256, threads=1, kv_cache_dtype="float32")


def test_deltas_add_up_to_the_outputs(stories):
    model, tok = stories
    sp = SamplingParams(n=2, temperature=0.8, seed=11, max_tokens=40, logprobs=2,
                        stop=[" park"])
    with LLMEngine(model, tokenizer=tok, threads=1) as eng:
        eng.add_request("a", "Once upon a time", sp)
        eng.add_request("b", "The cat", SamplingParams(temperature=0, max_tokens=20))
        texts, tokens, lps, outs = {}, {}, {}, {}
        for d in eng.stream():
            key = (d.request_id, d.index)
            texts[key] = texts.get(key, "") + d.text
            if d.token_id is not None:
                tokens.setdefault(key, []).append(d.token_id)
                lps.setdefault(key, []).append(d.logprobs)
            if d.output is not None:
                outs[d.request_id] = d.output
        assert not eng.has_unfinished_requests()
        assert set(outs) == {"a", "b"}
        for rid, out in outs.items():
            for o in out.outputs:
                assert texts[(rid, o.index)] == o.text
                assert tokens[(rid, o.index)] == o.token_ids
                if rid == "a":
                    assert lps[(rid, o.index)] == o.logprobs
        with LLM(model, tokenizer=tok, threads=1) as llm:
            ref = llm.generate(["Once upon a time", "The cat"],
                               [sp, SamplingParams(temperature=0, max_tokens=20)])
        assert [o.token_ids for o in outs["a"].outputs] == \
            [o.token_ids for o in ref[0].outputs]
        assert outs["b"].outputs[0].text == ref[1].outputs[0].text


def test_step_deltas_reports_deltas_and_finished_requests():
    with LLMEngine(**TINY) as eng:
        assert eng.add_request(None, [1, 2, 3],
                               SamplingParams(max_tokens=3, ignore_eos=True)) == "1"
        rid = eng.add_request("x", {"prompt_token_ids": [4, 5]},
                              SamplingParams(max_tokens=2, ignore_eos=True))
        assert rid == "x" and eng.get_num_unfinished_requests() == 2
        with pytest.raises(ValueError, match="already in use"):
            eng.add_request("x", [1])
        first = eng.step_deltas()
        assert first.num_scheduled_seqs == 2 and first.num_scheduled_tokens == 5
        assert sorted(d.request_id for d in first.deltas) == ["1", "x"]
        finished = []
        while eng.has_unfinished_requests():
            finished += eng.step_deltas().finished
        assert [f.request_id for f in finished] == ["x", "1"]
        assert [len(f.outputs[0].token_ids) for f in finished] == [2, 3]
        assert eng.step_deltas().deltas == []  # nothing to do: returns at once


def test_check_health_passes_on_a_working_engine_and_fails_once_closed():
    """A lost backend (a device fault) is shown on the emulated CUDA backend in C
    (tests/cuda/test_cuda_engine_pool.c); here: the call, and a closed engine refusing it."""
    eng = LLMEngine(**TINY)
    assert eng.check_health() is None
    eng.close()
    with pytest.raises(Exception, match="closed"):
        eng.check_health()


def test_abort_finishes_a_request_wherever_it_is():
    with LLMEngine(**TINY) as eng:
        eng.add_request("long", [1, 2, 3], SamplingParams(max_tokens=400, ignore_eos=True))
        eng.add_request("waiting", [1, 2], SamplingParams(max_tokens=400), priority=5)
        eng.add_request("short", [7, 8], SamplingParams(max_tokens=4, ignore_eos=True))
        outs = {}
        for _ in range(5):
            for o in eng.step():
                if o.finished:
                    outs[o.request_id] = o
        eng.abort_request(["long", "waiting", "unknown"])
        eng.abort_request("long")  # twice: ignored
        for d in eng.stream():
            if d.output is not None:
                outs[d.request_id] = d.output
        assert outs["long"].outputs[0].finish_reason == "abort"
        assert 0 < len(outs["long"].outputs[0].token_ids) < 400
        assert outs["waiting"].outputs[0].finish_reason == "abort"
        assert outs["short"].outputs[0].finish_reason == "length"
        assert not eng.has_unfinished_requests()
        assert eng.metrics().kv_blocks_used == 0


def test_a_serving_loop_sleeps_between_requests_and_stops():
    with LLMEngine(**TINY) as eng:
        got = {}
        done = threading.Event()

        def serve():
            for d in eng.stream(until_idle=False):
                if d.output is not None:
                    got[d.request_id] = d.output
                    if len(got) == 3:
                        done.set()

        t = threading.Thread(target=serve)
        t.start()
        time.sleep(0.05)  # the loop is asleep in pl_engine_wait
        for i in range(3):
            eng.add_request(f"r{i}", [1, 2, 3 + i], SamplingParams(max_tokens=6,
                                                                    temperature=0))
            time.sleep(0.01)
        assert done.wait(30)
        eng.stop()
        t.join(10)
        assert not t.is_alive()
        assert sorted(got) == ["r0", "r1", "r2"]
        with LLM(**TINY) as llm:
            ref = llm.generate([[1, 2, 3 + i] for i in range(3)],
                               SamplingParams(max_tokens=6, temperature=0))
        assert [got[f"r{i}"].outputs[0].token_ids for i in range(3)] == \
            [r.outputs[0].token_ids for r in ref]


def test_wait_times_out_and_wake_ends_it():
    with LLMEngine(**TINY) as eng:
        t0 = time.monotonic()
        assert eng.wait(0.05) is False
        assert time.monotonic() - t0 >= 0.04
        threading.Timer(0.05, eng.wake).start()
        t0 = time.monotonic()
        assert eng.wait() is False
        assert time.monotonic() - t0 < 10
        eng.add_request("a", [1, 2])
        assert eng.wait(0) is True


def test_close_ends_a_serving_loop():
    eng = LLMEngine(**TINY)
    ended = []
    t = threading.Thread(target=lambda: ended.append(list(eng.stream(until_idle=False))))
    t.start()
    time.sleep(0.05)
    eng.close()
    t.join(10)
    assert not t.is_alive()
    assert ended == [[]]  # returned, not raised


def test_the_gil_is_released_while_the_library_computes():
    """A long prefill: another Python thread keeps running while the step computes. With
    the GIL held through the call, that thread would stop for the whole step."""
    with LLMEngine("dummy:stories15m", threads=1, max_num_blocks=64,
                   max_num_batched_tokens=512) as eng:
        for r in ("p", "q"):
            eng.add_request(r, list(range(1, 250)), SamplingParams(max_tokens=1))
        window = [float("inf")]
        longest = [0.0]
        stop = threading.Event()

        def spin():
            last = time.monotonic()
            while not stop.is_set():
                now = time.monotonic()
                if now > window[0]:
                    longest[0] = max(longest[0], now - last)
                last = now

        t = threading.Thread(target=spin)
        t.start()
        time.sleep(0.02)
        window[0] = time.monotonic()
        eng.step()  # one call into the library for both prefills
        spent = time.monotonic() - window[0]
        time.sleep(0.02)
        stop.set()
        t.join()
        assert spent > 0.05, "the step was too short to tell"
        assert longest[0] < spent / 2, \
            f"the other thread stopped for {longest[0]:.3f} s of a {spent:.3f} s step"


def test_step_is_vllms_loop():
    """vLLM's `for out in engine.step(): if out.finished:` loop: every request comes out
    finished exactly once, equal to LLM.generate's output; before that each step's output
    holds the ids so far (a prefix of the final ones) with the prompt's ids."""
    from pagellm import EngineArgs
    args = EngineArgs(model="dummy:tiny", kv_cache_dtype="float32", threads=1,
                      extra={"max_num_blocks": 256})
    params = SamplingParams(n=2, temperature=0.7, seed=5, max_tokens=6, ignore_eos=True)
    prompts = {"a": [1, 2, 3], "b": [4, 5, 6, 7]}
    with LLMEngine.from_engine_args(args) as eng:
        for rid, ids in prompts.items():
            eng.add_request(rid, ids, params)
        done, partial = {}, {}
        steps = 0
        while eng.has_unfinished_requests():
            steps += 1
            for out in eng.step():
                assert out.request_id not in done, "a request came out finished twice"
                assert out.prompt_token_ids == prompts[out.request_id]
                if out.finished:
                    done[out.request_id] = out
                else:
                    assert len(out.outputs) == 2
                    partial.setdefault(out.request_id, []).append(
                        [list(o.token_ids) for o in out.outputs])
        assert sorted(done) == ["a", "b"] and steps >= 6
    with LLM(**args.to_kwargs()) as llm:
        ref = llm.generate([prompts["a"], prompts["b"]], params, use_tqdm=False)
    for rid, r in zip("ab", ref):
        assert [o.token_ids for o in done[rid].outputs] == [o.token_ids for o in r.outputs]
        for snapshot in partial[rid]:
            for got, final in zip(snapshot, done[rid].outputs):
                assert final.token_ids[:len(got)] == got
        # the snapshots grow one token a step
        lens = [len(s[0]) for s in partial[rid]]
        assert lens == list(range(1, len(lens) + 1))


def test_engine_args_are_vllms_names():
    from pagellm import EngineArgs
    with pytest.raises(ValueError, match="model"):
        EngineArgs().to_kwargs()
    a = EngineArgs(model="dummy:tiny", max_num_batched_tokens=64, gpu_memory_utilization=0.5,
                   extra={"max_num_blocks": 32})
    kw = a.to_kwargs()
    assert kw["max_num_batched_tokens"] == 64 and kw["max_num_blocks"] == 32
    assert "tokenizer" not in kw  # None: the library's default
    with LLMEngine.from_engine_args(a) as eng:
        assert eng.capacity(8, 8) > 0


def test_prompt_logprobs_of_a_one_token_prompt_is_a_list():
    """vLLM gives [None] (the first token has nothing to predict it), not None."""
    with LLM(**TINY) as llm:
        one = llm.generate([[7]], SamplingParams(max_tokens=1, prompt_logprobs=1),
                           use_tqdm=False)[0]
        two = llm.generate([[7, 8]], SamplingParams(max_tokens=1, prompt_logprobs=1),
                           use_tqdm=False)[0]
        none = llm.generate([[7]], SamplingParams(max_tokens=1), use_tqdm=False)[0]
    assert one.prompt_logprobs == [None]
    assert two.prompt_logprobs[0] is None and 8 in two.prompt_logprobs[1]
    assert none.prompt_logprobs is None
