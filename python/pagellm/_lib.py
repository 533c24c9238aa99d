"""The C library: where libpagellm.so is found, its functions' signatures, the layouts of the
structs it returns, and its errors as Python exceptions.

Only the structs the library fills or allocates are laid out here (tests/python/
test_layout.py checks each against the header through the compiler). The structs the caller
fills (pl_engine_config, pl_sampling_params, pl_chat_options) are never mirrored: they are
sized by the library and set by name (see _fields.py).
"""
from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_size_t, c_uint64, c_void_p)
from typing import List, Optional, Tuple

ENV_VAR = "PAGELLM_LIBRARY"
SONAME = "libpagellm.so.0"

# ---- errors -------------------------------------------------------------------------------


class PagellmError(Exception):
    """A pagellm call failed. str() is the library's message (pl_last_error_as, with fields
    named as keyword arguments: vLLM's names), which names the field, file or value at fault; .status is the pl_status code and .status_name its name."""

    def __init__(self, message: str, status: int = -1, status_name: str = "PL_ERR_UNKNOWN"):
        super().__init__(message)
        self.status = status
        self.status_name = status_name


class InvalidArgumentError(PagellmError, ValueError):
    """PL_ERR_INVALID_ARGUMENT: a value out of range, a malformed prompt or JSON."""


class OutOfMemoryError(PagellmError, MemoryError):
    """PL_ERR_OUT_OF_MEMORY: the model or the KV pool does not fit."""


class PagellmIOError(PagellmError, OSError):
    """PL_ERR_IO: a file could not be opened or read."""


class FormatError(PagellmError, ValueError):
    """PL_ERR_FORMAT: a file or a template is malformed."""


class UnsupportedError(PagellmError, NotImplementedError):
    """PL_ERR_UNSUPPORTED: valid, but not supported by this build or backend."""


class NotFoundError(PagellmError, LookupError):
    """PL_ERR_NOT_FOUND: an unknown file, field, request or template."""


class TooLongError(PagellmError, ValueError):
    """PL_ERR_TOO_LONG: prompt + max_tokens exceeds max_model_len, or the KV pool."""


class QueueFullError(PagellmError):
    """PL_ERR_QUEUE_FULL: the waiting queue is full (reject-newest policy)."""


class BackendError(PagellmError, RuntimeError):
    """PL_ERR_BACKEND: the compute backend failed."""


class EngineClosedError(PagellmError, RuntimeError):
    """The engine was closed (close(), the end of a with block)."""


class LibraryNotFoundError(PagellmError, OSError):
    """libpagellm.so was not found; the message lists every place searched."""


_ERRORS = {-1: InvalidArgumentError, -2: OutOfMemoryError, -3: PagellmIOError, -4: FormatError,
           -5: UnsupportedError, -6: NotFoundError, -7: TooLongError, -8: QueueFullError,
           -9: BackendError}

# ---- structs the library fills ------------------------------------------------------------


class Range(Structure):
    _fields_ = [("min", c_double), ("max", c_double), ("min_open", c_bool),
                ("max_open", c_bool), ("is_set", c_bool)]


class Field(Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int), ("offset", c_size_t),
                ("aux_offset", c_size_t), ("range", Range), ("choices", POINTER(c_char_p)),
                ("flag", c_char_p), ("short_flag", c_char), ("value_name", c_char_p),
                ("help", c_char_p)]


class FieldAlias(Structure):
    _fields_ = [("alias", c_char_p), ("name", c_char_p)]


class LogprobC(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float)]


class TokenLogprobs(Structure):
    _fields_ = [("token", c_int32), ("logprob", c_float), ("rank", c_int32),
                ("n_top", c_int32), ("top", POINTER(LogprobC)), ("text", c_void_p)]


class Completion(Structure):
    _fields_ = [("id", c_uint64), ("index", c_int), ("prompt_ids", POINTER(c_int32)),
                ("n_prompt_ids", c_size_t), ("output_ids", POINTER(c_int32)),
                ("n_output_ids", c_size_t), ("text", c_void_p), ("finish_reason", c_int),
                ("stop_string", c_int32), ("n_cached_prompt_ids", c_size_t), ("n_preemptions", c_int),
                ("queue_s", c_double), ("ttft_s", c_double), ("total_s", c_double),
                ("logprobs", POINTER(TokenLogprobs)), ("n_logprobs", c_size_t),
                ("prompt_logprobs", POINTER(TokenLogprobs)), ("n_prompt_logprobs", c_size_t),
                ("prompt_logits", POINTER(c_float)), ("n_prompt_logits", c_size_t)]


class StreamDeltaC(Structure):
    _fields_ = [("id", c_uint64), ("index", c_int), ("token", c_int32), ("text", c_void_p),
                ("text_len", c_size_t), ("logprobs", POINTER(TokenLogprobs))]


class StepResult(Structure):
    _fields_ = [("struct_size", c_size_t), ("deltas", POINTER(StreamDeltaC)),
                ("n_deltas", c_size_t), ("finished", POINTER(Completion)),
                ("n_finished", c_size_t), ("n_scheduled_seqs", c_int),
                ("n_scheduled_tokens", c_int), ("n_preempted", c_int)]


class MetricsC(Structure):
    _fields_ = [("struct_size", c_size_t), ("requests_finished", c_uint64),
                ("samples_finished", c_uint64), ("prompt_tokens", c_uint64),
                ("prompt_tokens_computed", c_uint64), ("output_tokens", c_uint64),
                ("steps", c_uint64), ("preemptions", c_uint64), ("elapsed_s", c_double),
                ("mean_batch_seqs", c_double), ("mean_batch_tokens", c_double),
                ("throughput_tok_s", c_double), ("output_tok_s", c_double),
                ("mean_latency_s", c_double), ("ttft_mean_s", c_double),
                ("ttft_p50_s", c_double), ("ttft_p99_s", c_double), ("tpot_mean_s", c_double),
                ("tpot_p50_s", c_double), ("tpot_p99_s", c_double), ("n_waiting", c_int),
                ("n_running", c_int), ("n_preempted", c_int), ("kv_blocks_total", c_int),
                ("kv_blocks_free", c_int), ("kv_blocks_used", c_int), ("kv_usage", c_double),
                ("kv_usage_peak", c_double), ("prefix_cache_hit_rate", c_double),
                ("block_size", c_int), ("max_model_len", c_int), ("vocab_size", c_int),
                ("prefix_cache_queries", c_uint64), ("prefix_cache_hits", c_uint64),
                ("samples_by_reason", c_uint64 * 8), ("tensor_parallel_size", c_int),
                ("tp_all_reduce_calls", c_uint64), ("tp_all_reduce_bytes", c_uint64),
                ("tp_all_gather_calls", c_uint64), ("tp_all_gather_bytes", c_uint64),
                ("tp_broadcast_calls", c_uint64), ("tp_broadcast_bytes", c_uint64),
                ("tp_comm_s", c_double), ("tp_comm_last_step_s", c_double),
                ("tokens_computed", c_uint64)]


class ModelInfoC(Structure):
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("architecture", c_char_p),
                ("vocab_size", c_int), ("bos_id", c_int), ("eos_id", c_int),
                ("eot_id", c_int), ("context_length", c_int), ("max_model_len", c_int),
                ("weight_dtype", c_int), ("kv_dtype", c_int), ("n_params", c_uint64),
                ("weight_bytes", c_uint64), ("n_layers", c_int), ("dim", c_int),
                ("n_heads", c_int), ("n_kv_heads", c_int), ("head_dim", c_int),
                ("hidden_dim", c_int), ("kv_bytes_per_token", c_size_t),
                ("block_size", c_int), ("kv_blocks", c_int), ("kv_tokens", c_uint64),
                ("max_batch_size", c_int), ("max_num_seqs", c_int),
                ("max_concurrency", c_double), ("weight_type", c_char_p),
                ("tensor_parallel_size", c_int), ("distributed", c_char_p),
                ("kv_sizing", c_char_p), ("format", c_char_p), ("tokenizer_path", c_char_p),
                ("tokenizer_kind", c_char_p), ("n_chat_templates", c_int),
                ("chat_template_override", c_bool), ("tied_embeddings", c_bool),
                ("rope_theta", c_double), ("norm_eps", c_double),
                ("n_experts", c_int), ("n_experts_used", c_int),
                ("n_active_params", c_uint64)]


# Which ctypes struct mirrors which C struct (for the layout test).
class ReplyOptions(Structure):
    """pl_reply_options: small and plain (no field table), so mirrored here and checked
    against the header with the returned structs."""
    _fields_ = [("struct_size", c_size_t), ("tool_parser", c_char_p),
                ("reasoning_parser", c_char_p), ("prompt", c_char_p), ("id_seed", c_uint64)]


class ToolCallC(Structure):
    _fields_ = [("id", c_void_p), ("name", c_void_p), ("arguments", c_void_p)]


class ReplyC(Structure):
    _fields_ = [("content", c_void_p), ("reasoning_content", c_void_p),
                ("tool_calls", POINTER(ToolCallC)), ("n_tool_calls", c_size_t)]


LAYOUTS = {"pl_range": Range, "pl_field": Field, "pl_logprob": LogprobC,
           "pl_token_logprobs": TokenLogprobs, "pl_completion": Completion,
           "pl_stream_delta": StreamDeltaC, "pl_step_result": StepResult,
           "pl_metrics": MetricsC, "pl_model_info": ModelInfoC,
           "pl_reply_options": ReplyOptions, "pl_tool_call": ToolCallC, "pl_reply": ReplyC}

# ---- functions ----------------------------------------------------------------------------

POINTER_INT32 = POINTER(c_int32)
_p = c_void_p
_ids = POINTER_INT32
_SIGNATURES = {
    # name: (restype, argtypes)
    "pl_version": (c_char_p, []),
    "pl_status_name": (c_char_p, [c_int]),
    "pl_status_string": (c_char_p, [c_int]),
    "pl_last_error": (c_char_p, []),
    "pl_last_error_as": (c_char_p, [c_int]),
    "pl_engine_config_aliases": (POINTER(FieldAlias), [POINTER(c_size_t)]),
    "pl_sampling_params_aliases": (POINTER(FieldAlias), [POINTER(c_size_t)]),
    "pl_finish_reason_name": (c_char_p, [c_int]),
    "pl_free_ids": (None, [_p]),
    "pl_free_text": (None, [_p]),
    "pl_field_to_json": (c_size_t, [POINTER(Field), _p, c_char_p, c_size_t]),
    # the caller-filled structs, by name
    "pl_engine_config_struct_size": (c_size_t, []),
    "pl_engine_config_init": (None, [_p, c_size_t]),
    "pl_engine_config_deinit": (None, [_p]),
    "pl_engine_config_fields": (POINTER(Field), [POINTER(c_size_t)]),
    "pl_engine_config_set": (c_int, [_p, c_char_p, c_char_p]),
    "pl_engine_config_set_json": (c_int, [_p, c_char_p, c_char_p]),
    "pl_engine_config_validate": (c_int, [_p]),
    "pl_sampling_params_struct_size": (c_size_t, []),
    "pl_sampling_params_init": (None, [_p, c_size_t]),
    "pl_sampling_params_deinit": (None, [_p]),
    "pl_sampling_params_fields": (POINTER(Field), [POINTER(c_size_t)]),
    "pl_sampling_params_set": (c_int, [_p, c_char_p, c_char_p]),
    "pl_sampling_params_set_json": (c_int, [_p, c_char_p, c_char_p]),
    "pl_sampling_params_validate": (c_int, [_p]),
    "pl_chat_options_struct_size": (c_size_t, []),
    "pl_chat_options_init": (None, [_p, c_size_t]),
    "pl_chat_options_deinit": (None, [_p]),
    "pl_chat_options_fields": (POINTER(Field), [POINTER(c_size_t)]),
    "pl_chat_options_set": (c_int, [_p, c_char_p, c_char_p]),
    "pl_chat_options_set_json": (c_int, [_p, c_char_p, c_char_p]),
    # the engine
    "pl_engine_create": (c_int, [_p, POINTER(c_void_p)]),
    "pl_engine_destroy": (None, [_p]),
    "pl_engine_submit_request": (c_int, [_p, c_char_p, _p, POINTER(c_uint64)]),
    "pl_engine_submit_tokens": (c_int, [_p, _ids, c_size_t, _p, POINTER(c_uint64)]),
    "pl_engine_submit_chat_json": (c_int, [_p, c_char_p, _p, _p, POINTER(c_uint64)]),
    "pl_engine_abort": (c_int, [_p, c_uint64]),
    "pl_engine_step_sized": (c_int, [_p, POINTER(StepResult), c_size_t]),
    "pl_engine_run": (c_int, [_p, POINTER(POINTER(Completion)), POINTER(c_size_t)]),
    "pl_completions_free": (None, [POINTER(Completion), c_size_t]),
    "pl_engine_has_pending_work": (c_bool, [_p]),
    "pl_engine_health": (c_int, [_p]),
    "pl_engine_wait": (c_int, [_p, c_double, POINTER(c_bool)]),
    "pl_engine_wake": (None, [_p]),
    "pl_engine_metrics_sized": (None, [_p, POINTER(MetricsC), c_size_t]),
    "pl_engine_capacity": (c_int, [_p, c_size_t, c_size_t, POINTER(c_size_t)]),
    "pl_engine_model_info_sized": (c_int, [_p, POINTER(ModelInfoC), c_size_t]),
    "pl_engine_tokenize": (c_int, [_p, c_char_p, POINTER(_ids), POINTER(c_size_t)]),
    "pl_engine_detokenize": (c_int, [_p, _ids, c_size_t, POINTER(c_void_p),
                                     POINTER(c_size_t)]),
    "pl_engine_apply_chat_template_json": (c_int, [_p, c_char_p, _p, POINTER(c_void_p),
                                                   POINTER(c_size_t)]),
    # tokenizers
    "pl_engine_tokenizer": (c_void_p, [_p]),
    "pl_tokenizer_load": (c_int, [c_char_p, POINTER(c_void_p)]),
    "pl_tokenizer_free": (None, [_p]),
    "pl_tokenizer_vocab_size": (c_int, [_p]),
    "pl_tokenizer_piece": (c_char_p, [_p, c_int32]),
    "pl_tokenizer_token_id": (c_int32, [_p, c_char_p]),
    "pl_tokenizer_encode": (c_int, [_p, c_char_p, c_size_t, ctypes.c_uint, POINTER(_ids),
                                    POINTER(c_size_t)]),
    "pl_tokenizer_decode": (c_int, [_p, _ids, c_size_t, ctypes.c_uint, POINTER(c_void_p),
                                    POINTER(c_size_t)]),
    "pl_tokenizer_chat_template": (c_char_p, [_p, c_char_p]),
    "pl_tokenizer_apply_chat_template": (c_int, [_p, c_char_p, _p, POINTER(c_void_p),
                                                 POINTER(c_size_t)]),
    # chat replies
    "pl_reply_parse": (c_int, [c_char_p, c_size_t, POINTER(ReplyOptions),
                               POINTER(POINTER(ReplyC))]),
    "pl_reply_free": (None, [POINTER(ReplyC)]),
    "pl_reply_tool_parser_for": (c_char_p, [c_char_p]),
    "pl_reply_tool_grammar": (c_int, [c_char_p, c_char_p, c_bool, POINTER(ReplyOptions),
                                      POINTER(c_void_p)]),
}

# pl_tokenizer_encode / _decode flags (pagellm.h)
ENCODE_ADD_SPECIAL = 1
ENCODE_PARSE_SPECIAL = 2
DECODE_SKIP_SPECIAL = 4

# ---- finding and loading the library ------------------------------------------------------


def _candidates() -> List[Tuple[str, str]]:
    """(where, path) in the order tried: PAGELLM_LIBRARY, beside the package (the path meson
    install recorded, then the package's own folder), then the system loader's search."""
    out: List[Tuple[str, str]] = []
    env = os.environ.get(ENV_VAR)
    if env:
        if os.path.isdir(env):
            env = os.path.join(env, "libpagellm.so")
        out.append((f"${ENV_VAR}", env))
        return out  # an explicit choice is never silently replaced by another library
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _install  # written by meson install: the library relative to us
        out.append(("the path meson install recorded",
                    os.path.normpath(os.path.join(here, _install.LIBRARY))))
    except ImportError:
        pass
    for name in (SONAME, "libpagellm.so"):
        out.append(("beside the package", os.path.join(here, name)))
    for name in (SONAME, "libpagellm.so"):
        out.append(("the system loader path (LD_LIBRARY_PATH, ld.so.cache, /usr/lib)", name))
    return out


def _load() -> ctypes.CDLL:
    tried = []
    for where, path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(f"  {where}: {path} (no such file)")
            continue
        try:
            # CDLL, not PyDLL: every call releases the GIL while the library works
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"  {where}: {path} ({e})")
    raise LibraryNotFoundError(
        "pagellm: libpagellm.so was not found; looked in\n" + "\n".join(tried) +
        f"\nInstall pagellm (meson install), or set {ENV_VAR} to the library's path.")


class _Lib:
    """The loaded library with typed functions; loaded on first use."""

    def __init__(self, dll: ctypes.CDLL):
        self.dll = dll
        missing = []
        for name, (res, args) in _SIGNATURES.items():
            try:
                fn = getattr(dll, name)
            except AttributeError:
                missing.append(name)
                continue
            fn.restype = res
            fn.argtypes = args
            setattr(self, name, fn)
        if missing:
            raise LibraryNotFoundError(
                f"pagellm: {dll._name} lacks {', '.join(missing)}: an older libpagellm than "
                "this package needs")


_lib: Optional[_Lib] = None
_lib_lock = threading.Lock()


def lib() -> _Lib:
    """The library, loaded (and its functions typed) on first call."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                _lib = _Lib(_load())
    return _lib


class _DlInfo(Structure):
    _fields_ = [("dli_fname", c_char_p), ("dli_fbase", c_void_p), ("dli_sname", c_char_p),
                ("dli_saddr", c_void_p)]


def library_path() -> str:
    """The file the library was loaded from (found by the loader when it was a bare name)."""
    L = lib()
    try:
        dladdr = ctypes.CDLL(None).dladdr
        dladdr.argtypes = [c_void_p, POINTER(_DlInfo)]
        info = _DlInfo()
        if dladdr(ctypes.cast(L.pl_version, c_void_p), ctypes.byref(info)) and info.dli_fname:
            return os.fsdecode(info.dli_fname)
    except (AttributeError, OSError):
        pass
    return L.dll._name


PL_NAMING_JSON = 2  # pl_naming: fields named as keyword arguments (vLLM's names)


def error(status: int) -> PagellmError:
    """The exception for a failed call, with this thread's pl_last_error (read at once: the
    message is per OS thread and the next pagellm call replaces it)."""
    L = lib()
    msg = (L.pl_last_error_as(PL_NAMING_JSON) or b"").decode("utf-8", "replace")
    name = L.pl_status_name(status).decode()
    if not msg:
        msg = L.pl_status_string(status).decode()
    return _ERRORS.get(status, PagellmError)(msg, status, name)


def check(status: int) -> None:
    if status != 0:
        raise error(status)


def take_text(ptr: c_void_p, n: Optional[int] = None) -> str:
    """A library-allocated string as str, freed at once."""
    if not ptr.value:
        return ""
    try:
        raw = ctypes.string_at(ptr, n) if n is not None else ctypes.string_at(ptr)
        return raw.decode("utf-8", "replace")
    finally:
        lib().pl_free_text(ptr)


def take_ids(ptr, n: int) -> List[int]:
    """A library-allocated id array as a list, freed at once."""
    try:
        return ptr[:n] if n else []
    finally:
        lib().pl_free_ids(ptr)


def ids_array(ids) -> "ctypes.Array[c_int32]":
    """A Python sequence of ints as an int32 array (ValueError for what is not an int)."""
    ids = list(ids)
    for i, t in enumerate(ids):
        if not isinstance(t, int) or isinstance(t, bool):
            raise TypeError(f"token id {i} is {type(t).__name__} {t!r}, not int")
        if not -2**31 <= t < 2**31:
            raise ValueError(f"token id {i} = {t}: outside int32")
    return (c_int32 * len(ids))(*ids)
