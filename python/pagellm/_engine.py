"""The engine handle shared by LLM and LLMEngine: the config built from keyword arguments,
create, use from any thread, close once (also on garbage collection), and the copying of
completions into RequestOutputs."""
from __future__ import annotations

import ctypes
import os
import threading
import time
import weakref
from ctypes import byref, c_size_t, c_void_p
from typing import Any, Dict, List, Optional

from . import _fields, _lib, outputs
from .sampling_params import SamplingParams

def engine_config(args: Dict[str, Any], who: str) -> _fields.CStruct:
    """A pl_engine_config from keyword arguments (None: the library's default): vLLM's names
    (the library's aliases: kv_cache_dtype, gpu_memory_utilization, ...) or pagellm's config
    field names. An unknown name is a TypeError naming it; a bad value the library's
    ValueError."""
    cfg = _fields.CStruct("engine_config")
    try:
        t = cfg.table
        for k, v in args.items():
            name = k
            if name not in t:
                hint = ""
                try:
                    cfg.set(name, v)
                except _lib.NotFoundError as e:  # the library suggests the closest name
                    hint = f" ({e})"
                except _lib.PagellmError:
                    pass
                raise TypeError(f"{who}() got an unexpected keyword argument '{k}'{hint}")
            if v is None:
                continue
            if isinstance(v, os.PathLike):
                v = os.fspath(v)
            cfg.set(name, v)
        _lib.check(_lib.lib().pl_engine_config_validate(cfg.ptr))
    except BaseException:
        cfg.close()
        raise
    return cfg


class Handle:
    """A pl_engine. Calls go through `with handle as e:` (e: the pointer), which raises
    EngineClosedError once close() has begun; close() wakes a waiting stepper, waits for the
    calls in flight and destroys the engine. Garbage collection destroys it too."""

    def __init__(self, args: Dict[str, Any], who: str):
        L = _lib.lib()
        with engine_config(args, who) as cfg:
            out = c_void_p()
            _lib.check(L.pl_engine_create(cfg.ptr, byref(out)))
        self._ptr = out.value
        self._cv = threading.Condition()
        self._users = 0
        self._closed = False
        # not at interpreter exit: a daemon thread may still be inside a call then
        self._finalizer = weakref.finalize(self, L.pl_engine_destroy, c_void_p(self._ptr))
        self._finalizer.atexit = False
        self.tokenizer_ptr: Optional[int] = L.pl_engine_tokenizer(self._ptr)
        # the text of each token alone, decoded once (logprobs' decoded_token)
        self.decode_token = _TokenTexts(self.tokenizer_ptr).__getitem__

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> int:
        with self._cv:
            if self._closed:
                raise _lib.EngineClosedError("pagellm: the engine is closed", -1,
                                             "PL_ERR_INVALID_ARGUMENT")
            self._users += 1
        return self._ptr

    def __exit__(self, *exc) -> None:
        with self._cv:
            self._users -= 1
            if not self._users:
                self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            if self._closed:
                return
            self._closed = True
            _lib.lib().pl_engine_wake(self._ptr)
            while self._users:
                self._cv.wait()
        self._finalizer()

    def decode_ids(self, ids: List[int]) -> str:
        if not self.tokenizer_ptr:
            return ""
        arr = _lib.ids_array(ids)
        text = c_void_p()
        n = c_size_t()
        if _lib.lib().pl_tokenizer_decode(self.tokenizer_ptr, arr, len(ids), 0, byref(text),
                                          byref(n)) != 0:
            return ""
        return _lib.take_text(text, n.value)


class _TokenTexts(dict):
    """token id -> its text as the tokenizer decodes it alone (None without a tokenizer),
    filled on first use; a dict so that a hit costs no Python call."""

    def __init__(self, tokenizer_ptr: Optional[int]):
        super().__init__()
        self.tokenizer_ptr = tokenizer_ptr

    def __missing__(self, token: int) -> Optional[str]:
        s = None
        if self.tokenizer_ptr:
            one = (ctypes.c_int32 * 1)(token)
            text = c_void_p()
            n = c_size_t()
            if _lib.lib().pl_tokenizer_decode(self.tokenizer_ptr, one, 1, 0, byref(text),
                                              byref(n)) == 0:
                s = _lib.take_text(text, n.value)
        self[token] = s
        return s


class Pending:
    """A submitted request until every sample of it has finished."""

    __slots__ = ("request_id", "prompt", "params", "arrival", "outputs", "first", "last_total",
                 "done")

    def __init__(self, request_id: str, prompt: Optional[str], params: SamplingParams):
        self.request_id = request_id
        self.prompt = prompt
        self.params = params
        self.arrival = time.time()
        self.outputs: List[Optional[outputs.CompletionOutput]] = [None] * params.n
        self.first: Optional[_lib.Completion] = None  # sample 0 (prompt ids, logprobs)
        self.last_total = 0.0
        self.done = 0

    def add(self, handle: Handle, c: _lib.Completion) -> Optional[outputs.RequestOutput]:
        """Copies one finished sample out of C memory; the RequestOutput when it was the
        request's last."""
        out = outputs.completion_output(c, handle.decode_token,
                                        _stop_reason(handle, c, self.params))
        self.outputs[c.index] = out
        if c.index == 0 or self.first is None:
            self.first = _Sample0(c, handle.decode_token,
                                  self.params.prompt_logprobs is not None)
        self.last_total = max(self.last_total, c.total_s)
        self.done += 1
        if self.done < len(self.outputs):
            return None
        f = self.first
        end = self.arrival + self.last_total
        metrics = outputs.RequestMetrics(
            arrival_time=self.arrival, last_token_time=end,
            first_scheduled_time=self.arrival + f.queue_s,
            first_token_time=self.arrival + f.ttft_s if f.ttft_s > 0 else None,
            time_in_queue=f.queue_s, finished_time=end)
        return outputs.RequestOutput(
            request_id=self.request_id, prompt=self.prompt, prompt_token_ids=f.prompt_ids,
            prompt_logprobs=f.prompt_logprobs, outputs=self.outputs, finished=True,
            metrics=metrics, num_cached_tokens=f.num_cached)


class _Sample0:
    """What a request's output takes from its sample 0: prompt ids and logprobs, times."""

    __slots__ = ("prompt_ids", "prompt_logprobs", "num_cached", "queue_s", "ttft_s")

    def __init__(self, c: _lib.Completion, decode, asked: bool):
        self.prompt_ids = c.prompt_ids[:c.n_prompt_ids] if c.n_prompt_ids else []
        self.prompt_logprobs = outputs.prompt_logprobs(c, decode, asked)
        self.num_cached = c.n_cached_prompt_ids
        self.queue_s = c.queue_s
        self.ttft_s = c.ttft_s


def _stop_reason(handle: Handle, c: _lib.Completion, params: SamplingParams):
    """vLLM's stop_reason: the stop token id or stop string that ended the sample; None for
    the end of text or another reason."""
    if c.finish_reason != 1:
        return None
    if 0 <= c.stop_string < len(params.stop):
        return params.stop[c.stop_string]
    if c.n_output_ids and c.output_ids[c.n_output_ids - 1] in params.stop_token_ids:
        return c.output_ids[c.n_output_ids - 1]
    return None


def _dtype_names() -> List[str]:
    """pl_dtype's names by value, from the config table's choices ("f32|float32" -> "f32")."""
    f = _fields.table("engine_config").fields["weight_dtype"]
    return [c.split("|")[0] for c in f.choices or []]


def model_info(handle: Handle) -> outputs.ModelInfo:
    info = _lib.ModelInfoC()
    with handle as e:
        _lib.check(_lib.lib().pl_engine_model_info_sized(e, byref(info), ctypes.sizeof(info)))
        names = _dtype_names()
        values = {}
        for f, _ in _lib.ModelInfoC._fields_:
            if f == "struct_size":
                continue
            v = getattr(info, f)
            if f in ("name", "architecture", "weight_type", "distributed",
                     "kv_sizing", "format"):
                v = v.decode("utf-8", "replace") if v is not None else ""
            elif f in ("tokenizer_path", "tokenizer_kind"):
                v = v.decode("utf-8", "replace") if v is not None else None
            elif f in ("weight_dtype", "kv_dtype"):
                v = names[v] if 0 <= v < len(names) else str(v)
            values[f] = v
    return outputs.ModelInfo(**values)


def metrics(handle: Handle) -> outputs.Metrics:
    m = _lib.MetricsC()
    with handle as e:
        _lib.lib().pl_engine_metrics_sized(e, byref(m), ctypes.sizeof(m))
    def value(v):
        return tuple(v) if isinstance(v, ctypes.Array) else v
    return outputs.Metrics(**{f: value(getattr(m, f)) for f, _ in _lib.MetricsC._fields_
                              if f != "struct_size"})
