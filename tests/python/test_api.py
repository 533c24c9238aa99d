"""Arguments and errors: bad values raise with the library's message, unknown names are
TypeErrors naming them, a closed engine raises, the library is found (or the error says
where it looked), and the facts (model info, capacity, metrics, tokenizer) are the C API's."""
import os
import subprocess
import sys

import pytest

import pagellm
from pagellm import (LLM, EngineClosedError, InvalidArgumentError, LLMEngine, SamplingParams,
                     TooLongError)

TINY = dict(model="dummy:tiny", max_num_blocks=64, threads=1)


@pytest.fixture(scope="module")
def tiny():
    with LLM(**TINY) as llm:
        yield llm


def test_sampling_params_take_vllms_names_and_defaults():
    sp = SamplingParams()
    assert (sp.n, sp.temperature, sp.top_p, sp.top_k, sp.min_p) == (1, 1.0, 1.0, 0, 0.0)
    assert (sp.max_tokens, sp.min_tokens, sp.seed, sp.logprobs) == (16, 0, None, None)
    assert (sp.stop, sp.stop_token_ids, sp.ignore_eos) == ([], [], False)
    assert SamplingParams(stop="x").stop == ["x"]
    c = SamplingParams(stop_token_ids=[5, 6], seed=7, logprobs=3).to_c()
    assert (c.get("stop_ids"), c.get("seed"), c.get("logprobs"), c.get("max_tokens")) == \
        ([5, 6], 7, 3, 16)
    c.close()


@pytest.mark.parametrize("kwargs, message", [
    (dict(top_p=0), "sampling.top_p = 0: must be in (0, 1]"),
    (dict(temperature=-1), "sampling.temperature = -1: must be in [0, 1000000]"),
    (dict(n=0), "sampling.n = 0: must be in [1, 64]"),
    (dict(max_tokens=0), "sampling.max_tokens = 0: must be in [1, 16777216]"),
    (dict(min_tokens=20, max_tokens=10), "sampling.min_tokens = 20: must be in [0, max_tokens]"),
    (dict(logprobs=21), "sampling.logprobs = 21: must be in [-1, 20]"),
    (dict(stop=[""]), "sampling.stop"),
    (dict(stop_token_ids=[-1]), "sampling.stop_ids"),
    (dict(presence_penalty=3), "sampling.presence_penalty = 3"),
    (dict(temperature="hot"), "sampling.temperature"),
])
def test_bad_sampling_values_raise_valueerror_with_the_librarys_message(kwargs, message):
    with pytest.raises(ValueError) as e:
        SamplingParams(**kwargs)
    assert message in str(e.value)
    assert isinstance(e.value, InvalidArgumentError)
    assert e.value.status_name == "PL_ERR_INVALID_ARGUMENT"


def test_unknown_names_are_typeerrors_naming_them():
    with pytest.raises(TypeError, match="'temprature'.*did you mean 'temperature'"):
        SamplingParams(temprature=0.5)
    with pytest.raises(TypeError, match="'priority'"):
        SamplingParams(priority=1)
    with pytest.raises(TypeError, match="unexpected keyword argument 'blok_size'"):
        LLM("dummy:tiny", blok_size=8)
    with pytest.raises(TypeError, match="'pipeline_parallel_size'"):
        LLMEngine("dummy:tiny", pipeline_parallel_size=2)


def test_tensor_parallel_threads_give_one_rank_s_tokens():
    """vLLM's tensor_parallel_size: the model split over two threads of this process."""
    sp = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    prompts = [{"prompt_token_ids": [1, 5, 9, 200]}, {"prompt_token_ids": [1, 77]}]
    with LLM("dummy:tiny", threads=1) as one, \
            LLM("dummy:tiny", threads=1, tensor_parallel_size=2) as two:
        a = [o.outputs[0].token_ids for o in one.generate(prompts, sp)]
        b = [o.outputs[0].token_ids for o in two.generate(prompts, sp)]
        info = two.model_info
    assert a == b and len(a[0]) == 12
    assert info.tensor_parallel_size == 2 and info.distributed.startswith("threads: 2 ranks")


@pytest.mark.parametrize("kwargs, message", [
    (dict(block_size=24), "config.block_size = 24: must be a power of two"),
    (dict(gpu_memory_utilization=0), "config.memory_threshold = 0: must be in (0, 1]"),
    (dict(dtype="float8"), "config.weight_dtype"),
    (dict(backend="tpu"), "config.backend"),
    (dict(max_num_seqs=-1), "config.max_num_seqs = -1"),
])
def test_bad_engine_values_raise_valueerror_with_the_librarys_message(kwargs, message):
    with pytest.raises(ValueError) as e:
        LLM("dummy:tiny", **kwargs)
    assert message in str(e.value)


def test_engine_arguments_reach_the_config(tiny):
    with LLM("dummy:tiny", block_size=8, max_num_seqs=4, max_model_len=100, threads=1,
             num_gpu_blocks_override=40, kv_cache_dtype="float32",
             max_num_batched_tokens=64) as llm:
        i = llm.model_info
        assert (i.block_size, i.max_num_seqs, i.max_batch_size, i.max_model_len) == \
            (8, 4, 4, 100)
        assert (i.kv_blocks, i.kv_dtype, i.weight_dtype) == (40, "f32", "f32")
        assert i.weight_type == "f32"
        assert llm.capacity(16, 16) == 40 // 4  # 4 blocks of 8 per request
    assert tiny.model_info.name == "dummy:tiny"
    assert tiny.model_info.architecture == "llama"


def test_files_that_do_not_exist_name_the_path(tmp_path):
    missing = str(tmp_path / "nope.bin")
    with pytest.raises(pagellm.PagellmError) as e:
        LLM(missing)
    assert missing in str(e.value)
    assert isinstance(e.value, OSError)


def test_requests_the_engine_refuses_raise_and_leave_nothing_behind(tiny):
    with pytest.raises(TooLongError, match="max_model_len"):
        tiny.generate([[1] * 500], SamplingParams(max_tokens=100))
    with pytest.raises(ValueError, match="outside the vocabulary|vocab"):
        tiny.generate([[1, 2, 999999]])
    with pytest.raises(ValueError, match="no tokenizer"):
        tiny.generate("text needs a tokenizer")
    # a refused prompt among good ones: the good ones were aborted and drained
    with pytest.raises(ValueError):
        tiny.generate([[1, 2, 3], [1, 99999]], SamplingParams(max_tokens=4))
    assert tiny.metrics().n_waiting == 0 and tiny.metrics().n_running == 0
    out = tiny.generate([[1, 2, 3]], SamplingParams(max_tokens=4, temperature=0))
    assert len(out[0].outputs[0].token_ids) == 4
    with pytest.raises(ValueError, match="3 given for 2 prompts"):
        tiny.generate([[1], [2]], [SamplingParams()] * 3)
    with pytest.raises(TypeError, match="a prompt is"):
        tiny.generate([3.5])
    with pytest.raises(ValueError, match="capacity|max_model_len|too long|TOO"):
        tiny.capacity(1000, 1000)


def test_a_closed_engine_raises():
    llm = LLM(**TINY)
    tok = llm.get_tokenizer()
    assert tok is None  # dummy models run on ids
    llm.close()
    llm.close()  # twice is fine
    for call in (lambda: llm.generate([[1, 2]]), lambda: llm.metrics(),
                 lambda: llm.capacity(4, 4), lambda: llm.model_info):
        with pytest.raises(EngineClosedError, match="closed"):
            call()
    e = LLMEngine(**TINY)
    with e:
        e.add_request("a", [1, 2, 3])
    with pytest.raises(EngineClosedError):
        e.add_request("b", [1, 2, 3])
    with pytest.raises(EngineClosedError):
        e.step()


def test_the_library_not_found_names_where_it_looked(tmp_path):
    env = dict(os.environ, PAGELLM_LIBRARY=str(tmp_path / "libnothere.so"))
    out = subprocess.run([sys.executable, "-c", "import pagellm; pagellm.LLM('dummy:tiny')"],
                         env=env, capture_output=True, text=True)
    assert out.returncode != 0
    assert "LibraryNotFoundError" in out.stderr
    assert "$PAGELLM_LIBRARY" in out.stderr and "libnothere.so (no such file)" in out.stderr
    # without the variable, the package's folder and the loader path are searched
    env.pop("PAGELLM_LIBRARY")
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", "import pagellm; pagellm.LLM('dummy:tiny')"],
                         env=env, capture_output=True, text=True)
    if out.returncode == 0:
        pytest.skip("a libpagellm is installed on this machine's loader path")
    assert "beside the package" in out.stderr and "system loader path" in out.stderr


def test_the_loaded_library_is_the_one_asked_for():
    assert os.path.realpath(pagellm.library_path()) == \
        os.path.realpath(os.environ["PAGELLM_LIBRARY"])
    assert pagellm.library_version() == pagellm.__version__


def test_metrics_count_what_ran(tiny):
    before = tiny.metrics()
    tiny.generate([[1, 2, 3], [4, 5]], SamplingParams(max_tokens=5, ignore_eos=True))
    after = tiny.metrics()
    assert after.requests_finished - before.requests_finished == 2
    assert after.output_tokens - before.output_tokens == 10
    assert after.prompt_tokens - before.prompt_tokens == 5
    assert after.kv_blocks_total == 64
