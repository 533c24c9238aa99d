"""Threads: one stepping thread per LLMEngine while other threads submit and abort, the
outputs equal to running each request alone; a shared LLM's tokenizer used from threads."""
import random
import threading

from pagellm import LLM, LLMEngine, SamplingParams

CFG = dict(model="dummy:tiny", max_num_blocks=512, threads=1, kv_cache_dtype="float32")
N_ENGINES, N_SUBMITTERS, PER_SUBMITTER = 3, 4, 12


def prompt(k):
    rng = random.Random(k)
    return [rng.randrange(3, 512) for _ in range(rng.randrange(1, 40))]


def params(k):
    return SamplingParams(max_tokens=4 + k % 13, temperature=0 if k % 2 else 0.7, seed=k,
                          ignore_eos=True)


def test_a_thread_per_engine_steps_while_others_submit_and_abort():
    engines = [LLMEngine(**CFG) for _ in range(N_ENGINES)]
    results = [dict() for _ in engines]
    errors = []

    def serve(i):
        try:
            for d in engines[i].stream(until_idle=False):
                if d.output is not None:
                    results[i][d.request_id] = d.output
        except BaseException as e:  # noqa: a failure must fail the test, not vanish
            errors.append(e)

    def submit(s):
        try:
            for j in range(PER_SUBMITTER):
                k = s * PER_SUBMITTER + j
                eng = engines[k % N_ENGINES]
                eng.add_request(f"k{k}", prompt(k), params(k))
                if k % 7 == 0:
                    eng.abort_request(f"k{k}")
        except BaseException as e:  # noqa
            errors.append(e)

    servers = [threading.Thread(target=serve, args=(i,)) for i in range(N_ENGINES)]
    submitters = [threading.Thread(target=submit, args=(s,)) for s in range(N_SUBMITTERS)]
    for t in servers + submitters:
        t.start()
    for t in submitters:
        t.join(60)
    # every request comes back once
    total = N_SUBMITTERS * PER_SUBMITTER
    for _ in range(600):
        if sum(len(r) for r in results) == total or errors:
            break
        threading.Event().wait(0.05)
    for e in engines:
        e.stop()
    for t in servers:
        t.join(30)
    for e in engines:
        e.close()
    assert not errors, errors
    assert sum(len(r) for r in results) == total

    with LLM(**CFG) as llm:
        for i, res in enumerate(results):
            for rid, out in res.items():
                k = int(rid[1:])
                assert k % N_ENGINES == i
                o = out.outputs[0]
                if o.finish_reason == "abort":
                    assert k % 7 == 0
                    continue
                assert o.finish_reason == "length"
                alone = llm.generate([prompt(k)], params(k), use_tqdm=False)[0]
                assert o.token_ids == alone.outputs[0].token_ids, rid


def test_the_tokenizer_from_many_threads(stories):
    model, tok = stories
    with LLM(model, tokenizer=tok, threads=1) as llm:
        t = llm.get_tokenizer()
        texts = [f"Once upon a time there were {i} cats." for i in range(40)]
        want = [t.encode(x) for x in texts]
        got = [None] * len(texts)

        def work(lo):
            for i in range(lo, len(texts), 4):
                got[i] = t.encode(texts[i])
                assert t.decode(got[i], skip_special_tokens=True) == texts[i]

        ts = [threading.Thread(target=work, args=(lo,)) for lo in range(4)]
        for x in ts:
            x.start()
        for x in ts:
            x.join()
        assert got == want


def test_generate_from_several_threads_takes_turns():
    with LLM(**CFG) as llm:
        want = [o.outputs[0].token_ids for o in
                llm.generate([prompt(k) for k in range(8)], [params(k) for k in range(8)])]
        got = [None] * 8
        errors = []

        def work(k):
            try:
                got[k] = llm.generate([prompt(k)], params(k))[0].outputs[0].token_ids
            except BaseException as e:  # noqa
                errors.append(e)

        ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors and got == want
