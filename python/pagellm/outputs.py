"""What generate, chat and LLMEngine return: vLLM's output classes, filled from the library's
completions and stream deltas (copied out of C memory at once)."""
from __future__ import annotations

import ctypes
import dataclasses
import struct
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import _lib


class Logprob:
    """A token's log-probability at one position, its rank (1 = most likely) and its text
    (vLLM's Logprob; a slotted class: a request with logprobs makes thousands)."""

    __slots__ = ("logprob", "rank", "decoded_token")

    def __init__(self, logprob: float, rank: Optional[int] = None,
                 decoded_token: Optional[str] = None):
        self.logprob = logprob
        self.rank = rank
        self.decoded_token = decoded_token

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Logprob) and (self.logprob, self.rank, self.decoded_token) \
            == (other.logprob, other.rank, other.decoded_token)

    def __repr__(self) -> str:
        return (f"Logprob(logprob={self.logprob!r}, rank={self.rank!r}, "
                f"decoded_token={self.decoded_token!r})")


# One position: {token_id: Logprob}, the sampled (or prompt) token first, then the most
# likely tokens.
PositionLogprobs = Dict[int, Logprob]
SampleLogprobs = List[PositionLogprobs]
PromptLogprobs = List[Optional[PositionLogprobs]]


@dataclass
class CompletionOutput:
    """One output sequence of a request."""
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None  # "stop", "length", "abort", "overloaded", "error"
    stop_reason: Union[int, str, None] = None  # the stop string or stop token id; None: EOS
    # LLM.chat's reading of the reply (pagellm.reply), when it reads tool calls or reasoning:
    content: Optional[str] = None  # the text besides them (None: only tool calls)
    reasoning_content: Optional[str] = None
    tool_calls: Optional[List[Dict[str, Any]]] = None  # OpenAI's {"id", "type", "function"}

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """When things happened to a request (time.time() seconds)."""
    arrival_time: float
    last_token_time: float
    first_scheduled_time: Optional[float]
    first_token_time: Optional[float]
    time_in_queue: Optional[float]
    finished_time: Optional[float] = None


@dataclass
class RequestOutput:
    """A request's prompt and its n outputs: whole once finished; from LLMEngine.step(), what
    each output holds so far (vLLM's cumulative outputs) until then."""
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[PromptLogprobs]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Optional[RequestMetrics] = None
    num_cached_tokens: Optional[int] = None


@dataclass
class StreamDelta:
    """What one step added to one output sequence (LLMEngine). A sequence's deltas joined
    give its final text; its last delta has finished True and the finish reason, and, when
    it is the request's last sequence to finish, the whole RequestOutput."""
    request_id: str
    index: int
    text: str
    token_id: Optional[int] = None  # None: held-back text released, or the end
    logprobs: Optional[PositionLogprobs] = None
    finished: bool = False
    finish_reason: Optional[str] = None
    output: Optional[RequestOutput] = None


@dataclass
class StepOutput:
    """One LLMEngine.step_deltas(): new text per sequence and the requests that finished."""
    deltas: List[StreamDelta] = field(default_factory=list)
    finished: List[RequestOutput] = field(default_factory=list)
    num_scheduled_seqs: int = 0
    num_scheduled_tokens: int = 0
    num_preempted: int = 0
    error: Optional[str] = None  # a backend failure: the step's requests finished "error"


def _metrics_class(name: str, ctype, doc: str):
    def pytype(t):
        if issubclass(t, ctypes.Array):
            return Tuple[int, ...]
        return float if t in (ctypes.c_double, ctypes.c_float) else int
    fields = [(f, pytype(t)) for f, t in ctype._fields_ if f != "struct_size"]
    return dataclasses.make_dataclass(name, fields, frozen=True, namespace={"__doc__": doc})


Metrics = _metrics_class("Metrics", _lib.MetricsC,
                         "Counters since the engine was created (pl_metrics: requests, tokens, "
                         "steps, throughput, latency, TTFT/TPOT percentiles, queue and KV "
                         "occupancy, prefix-cache hit rate, preemptions).")


@dataclass(frozen=True)
class ModelInfo:
    """Facts about the loaded model and the engine built around it (pl_model_info)."""
    name: str
    architecture: str
    vocab_size: int
    bos_id: int
    eos_id: int
    eot_id: int
    context_length: int
    max_model_len: int
    weight_dtype: str
    kv_dtype: str
    n_params: int
    weight_bytes: int
    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    hidden_dim: int
    kv_bytes_per_token: int
    block_size: int
    kv_blocks: int
    kv_tokens: int
    max_batch_size: int
    max_num_seqs: int
    max_concurrency: float
    weight_type: str
    tensor_parallel_size: int  # ranks the model is split over (1: none)
    distributed: str           # how they talk ("threads: 2 ranks, ..."); "" with one rank
    kv_sizing: str = ""
    format: str = ""                      # "gguf", "safetensors", "llama2.c", "dummy"
    tokenizer_path: Optional[str] = None  # None: no tokenizer
    tokenizer_kind: Optional[str] = None  # "sentencepiece" or "bpe"
    n_chat_templates: int = 0
    chat_template_override: bool = False
    tied_embeddings: bool = False
    rope_theta: float = 0.0
    norm_eps: float = 0.0
    n_experts: int = 0
    n_experts_used: int = 0
    n_active_params: int = 0


# ---- from C -------------------------------------------------------------------------------

Decoder = Callable[[int], Optional[str]]
FINISH_REASONS = {1: "stop", 2: "length", 3: "abort", 4: "overloaded", 5: "error"}


# pl_token_logprobs and pl_logprob as packed records (sizes and offsets equal to the ctypes
# structs: tests/python/test_layout.py): reading a whole array at once is several times
# faster than going through ctypes' attribute access per entry.
_TOKEN_LOGPROBS = struct.Struct("=ifiiQQ")  # token, logprob, rank, n_top, top, text
_LOGPROB = struct.Struct("=if")            # token, logprob


def _position(token, logprob, rank, n_top, top, text, decode: Decoder) -> PositionLogprobs:
    d = {token: Logprob(logprob, rank, decode(token))}
    if n_top:
        raw = ctypes.string_at(top, n_top * _LOGPROB.size)
        for j, (t, lp) in enumerate(_LOGPROB.iter_unpack(raw), 1):
            if t not in d:
                d[t] = Logprob(lp, j, decode(t))
    return d


def position_logprobs(e: _lib.TokenLogprobs, decode: Decoder) -> PositionLogprobs:
    """One position's {token_id: Logprob}, the position's own token first."""
    return _position(e.token, e.logprob, e.rank, e.n_top,
                     ctypes.cast(e.top, ctypes.c_void_p).value, e.text, decode)


def logprobs_list(ptr, n: int, decode: Decoder) -> List[PositionLogprobs]:
    """n pl_token_logprobs from ptr, copied out."""
    if not n:
        return []
    raw = ctypes.string_at(ptr, n * _TOKEN_LOGPROBS.size)
    return [_position(*rec, decode) for rec in _TOKEN_LOGPROBS.iter_unpack(raw)]


def completion_output(c: _lib.Completion, decode: Decoder, stop_reason=None) -> CompletionOutput:
    """Copies one pl_completion's sample into Python objects."""
    ids = c.output_ids[:c.n_output_ids] if c.n_output_ids else []
    lps = None
    cum = None
    if c.logprobs:
        lps = logprobs_list(c.logprobs, c.n_logprobs, decode)
        cum = sum(next(iter(p.values())).logprob for p in lps)
    text = ctypes.string_at(c.text).decode("utf-8", "replace") if c.text else ""
    return CompletionOutput(index=c.index, text=text, token_ids=ids, cumulative_logprob=cum,
                            logprobs=lps, finish_reason=FINISH_REASONS.get(c.finish_reason),
                            stop_reason=stop_reason)


def prompt_logprobs(c: _lib.Completion, decode: Decoder,
                    asked: bool = True) -> Optional[PromptLogprobs]:
    """vLLM's prompt_logprobs: None when not asked for; else one entry per prompt token, None
    for the first (a one-token prompt gives [None])."""
    if not asked:
        return None
    if not c.prompt_logprobs:
        return [None] if c.n_prompt_ids else None
    out: PromptLogprobs = [None]  # the first prompt token has nothing to predict it
    out += logprobs_list(c.prompt_logprobs, c.n_prompt_logprobs, decode)
    return out

