"""LLMEngine: the streaming interface for servers written in Python. Requests are added and
aborted from any thread; one thread steps and gets each request's output as it is generated:
step() as vLLM's (a list of RequestOutput, each output's text and ids so far), or
step_deltas() / stream() (only what each step added). The GIL is released inside every library call (ctypes does this for
foreign calls, and no Python code runs inside a step), so other Python threads run while the
engine computes."""
from __future__ import annotations

import ctypes
import random
import threading
from dataclasses import dataclass, field, fields
from ctypes import byref, c_bool, c_size_t, c_uint64, c_void_p
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from . import _lib, outputs
from ._engine import Handle, Pending, metrics, model_info
from .llm import PromptType, parse_prompt
from .sampling_params import SamplingParams
from .tokenizer import Conversation, Tokenizer, chat_options, messages_json


class LLMEngine:
    """An engine for serving: add_request / abort_request from any thread, step() (or
    step_deltas(), stream()) on one. vLLM's loop:

        engine = LLMEngine.from_engine_args(EngineArgs(model="stories260K.bin",
                                                       tokenizer="tok512.model"))
        engine.add_request("a", "Once upon a time", SamplingParams(max_tokens=32))
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    print(out.outputs[0].text)

    or only the new text of each step:

        for d in engine.stream():          # until no request is left
            print(d.request_id, d.text, end="")

    A serving thread runs `for d in engine.stream(until_idle=False)`: between steps it
    sleeps in the library (pl_engine_wait) until a request arrives, and stop() or close()
    ends it. Engine arguments are LLM's (vLLM's names, or pagellm's config fields).
    """

    def __init__(self, model: str, tokenizer: Optional[str] = None, *,
                 seed: Optional[int] = 0, **engine_args: Any):
        args: Dict[str, Any] = {"model": model, "tokenizer": tokenizer}
        args.update(engine_args)
        self._handle = Handle(args, "LLMEngine")
        self._seeds = random.Random(seed) if seed is not None else None
        self._lock = threading.Lock()       # the request tables
        self._step_lock = threading.Lock()  # one stepping thread at a time
        self._by_c: Dict[int, Pending] = {}
        self._by_id: Dict[str, int] = {}
        self._progress: Dict[int, _Progress] = {}  # outputs so far, for step()
        self._stop = False
        self._info: Optional[outputs.ModelInfo] = None
        self.last_step_error: Optional[str] = None

    # ---- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Ends a stream() in progress, waits for calls in flight and frees the engine (and
        every request still in it)."""
        self._stop = True
        self._handle.close()

    @classmethod
    def from_engine_args(cls, engine_args: "EngineArgs") -> "LLMEngine":
        """vLLM's constructor: an engine from an EngineArgs."""
        return cls(**engine_args.to_kwargs())

    def __enter__(self) -> "LLMEngine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- requests -----------------------------------------------------------------------

    def add_request(self, request_id: Optional[str], prompt: PromptType,
                    params: Optional[SamplingParams] = None, priority: int = 0) -> str:
        """Queues a request (thread-safe) and returns its id (request_id, or the library's
        id as a string when None). prompt: text, token ids or a prompt dict."""
        text, ids = parse_prompt(prompt)
        L = _lib.lib()

        def submit(e, cparams, out_id):
            if ids is not None:
                arr = _lib.ids_array(ids)
                return L.pl_engine_submit_tokens(e, arr, len(arr), cparams, byref(out_id))
            return L.pl_engine_submit_request(e, text.encode(), cparams, byref(out_id))

        def prompt_ids(e):
            if ids is not None:
                return list(ids)
            got = _lib.POINTER_INT32()
            n = c_size_t()
            _lib.check(L.pl_engine_tokenize(e, text.encode(), byref(got), byref(n)))
            return _lib.take_ids(got, n.value)

        return self._add(request_id, text, params, priority, submit, prompt_ids)

    def add_chat_request(self, request_id: Optional[str], messages: Conversation,
                         params: Optional[SamplingParams] = None, priority: int = 0,
                         chat_template: Optional[str] = None,
                         add_generation_prompt: bool = True,
                         tools: Optional[Sequence[Dict]] = None,
                         chat_template_kwargs: Optional[Dict[str, Any]] = None) -> str:
        """Queues one conversation rendered with the chat template (as LLM.chat)."""
        L = _lib.lib()
        msgs = messages_json(messages)
        with chat_options(add_generation_prompt, tools, chat_template,
                          chat_template_kwargs) as o:
            with self._handle as e:
                text_p = c_void_p()
                n = c_size_t()
                _lib.check(L.pl_engine_apply_chat_template_json(e, msgs, o.ptr, byref(text_p),
                                                                byref(n)))
                text = _lib.take_text(text_p, n.value)

            def submit(e, cparams, out_id):
                return L.pl_engine_submit_chat_json(e, msgs, o.ptr, cparams, byref(out_id))

            def prompt_ids(e):
                return Tokenizer(self._handle.tokenizer_ptr, engine=self._handle).encode(
                    text, add_special_tokens=False)

            return self._add(request_id, text, params, priority, submit, prompt_ids)

    def _add(self, request_id, text, params, priority, submit, prompt_ids) -> str:
        params = params if params is not None else SamplingParams()
        if request_id is not None:
            request_id = str(request_id)
            with self._lock:
                if request_id in self._by_id:
                    raise ValueError(f"request id {request_id!r} is already in use")
        with self._handle as e:
            with params.to_c() as cs:
                if priority:
                    cs.set("priority", priority)
                out_id = c_uint64()
                # under the lock: the stepping thread must find the request in the tables
                # as soon as the library has it
                with self._lock:
                    if params.seed is None and self._seeds is not None:
                        cs.set("seed", self._seeds.getrandbits(63))
                    if request_id is not None and request_id in self._by_id:
                        raise ValueError(f"request id {request_id!r} is already in use")
                    _lib.check(submit(e, cs.ptr, out_id))
                    rid = request_id if request_id is not None else str(out_id.value)
                    self._by_c[out_id.value] = Pending(rid, text, params)
                    self._by_id[rid] = out_id.value
                    self._progress[out_id.value] = _Progress(params.n, prompt_ids)
        return rid

    def abort_request(self, request_id: Union[str, Iterable[str]]) -> None:
        """Aborts requests wherever they are (thread-safe); each finishes with reason
        "abort" in a later step. Unknown or finished ids are ignored, as in vLLM."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        with self._lock:
            cids = [self._by_id[r] for r in ids if r in self._by_id]
        with self._handle as e:
            for cid in cids:
                _lib.lib().pl_engine_abort(e, cid)

    def has_unfinished_requests(self) -> bool:
        """Whether any added request has not been returned finished yet."""
        with self._lock:
            return bool(self._by_c)

    def get_num_unfinished_requests(self) -> int:
        with self._lock:
            return len(self._by_c)

    # ---- stepping -----------------------------------------------------------------------

    def step(self) -> List[outputs.RequestOutput]:
        """vLLM's step: one scheduling step and forward pass, and a RequestOutput for every
        request it moved on (in the order the library reported them): each output's text, ids
        and logprobs so far, or, with finished=True, the whole request (its last). A backend
        failure finishes the step's requests with reason "error" (last_step_error says why)
        and the engine stays usable; other failures raise."""
        out = self.step_deltas()
        self.last_step_error = out.error
        moved: Dict[str, Optional[outputs.RequestOutput]] = {}
        cids: Dict[str, int] = {}
        for d in out.deltas:
            if d.output is not None:
                moved[d.request_id] = d.output
            elif d.request_id not in moved:
                moved[d.request_id] = None
        with self._lock:
            for rid in moved:
                if moved[rid] is None and rid in self._by_id:
                    cids[rid] = self._by_id[rid]
        result = []
        for rid, done in moved.items():
            if done is not None:
                result.append(done)
                continue
            cid = cids.get(rid)
            with self._lock:
                p, prog = self._by_c.get(cid), self._progress.get(cid)
            if p is None or prog is None:
                continue  # finished meanwhile (an abort from another thread)
            with self._handle as e:
                result.append(prog.output(rid, p, e))
        return result

    def step_deltas(self) -> outputs.StepOutput:
        """One scheduling step and forward pass: each sequence's new text (deltas) and the
        requests that finished. A sequence's last delta has finished=True. A backend failure
        finishes the step's requests with reason "error" (StepOutput.error says why) and the
        engine stays usable; other failures raise."""
        L = _lib.lib()
        res = _lib.StepResult()
        h = self._handle
        with self._step_lock, h as e:
            st = L.pl_engine_step_sized(e, byref(res), ctypes.sizeof(res))
            out = outputs.StepOutput(num_scheduled_seqs=res.n_scheduled_seqs,
                                     num_scheduled_tokens=res.n_scheduled_tokens,
                                     num_preempted=res.n_preempted)
            err = _lib.error(st) if st != 0 else None
            with self._lock:
                for k in range(res.n_deltas):
                    d = res.deltas[k]
                    p = self._by_c.get(d.id)
                    if p is None:
                        continue
                    text = (ctypes.string_at(d.text, d.text_len).decode("utf-8", "replace")
                            if d.text_len else "")
                    lp = (outputs.position_logprobs(d.logprobs[0], h.decode_token)
                          if d.logprobs else None)
                    token = d.token if d.token >= 0 else None
                    out.deltas.append(outputs.StreamDelta(p.request_id, d.index, text, token,
                                                          lp))
                    prog = self._progress.get(d.id)
                    if prog is not None:
                        prog.add(d.index, text, token, lp)
                for k in range(res.n_finished):
                    c = res.finished[k]
                    p = self._by_c.get(c.id)
                    if p is None:
                        continue
                    ro = p.add(h, c)
                    out.deltas.append(outputs.StreamDelta(
                        p.request_id, c.index, "", None, None, True,
                        outputs.FINISH_REASONS.get(c.finish_reason), ro))
                    prog = self._progress.get(c.id)
                    if prog is not None:
                        prog.finish(c.index, outputs.FINISH_REASONS.get(c.finish_reason))
                    if ro is not None:
                        out.finished.append(ro)
                        del self._by_c[c.id]
                        self._by_id.pop(p.request_id, None)
                        self._progress.pop(c.id, None)
        if err is not None:
            if not isinstance(err, _lib.BackendError):
                raise err
            out.error = str(err)
        return out

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Sleeps (in the library, GIL released) until a request is added or aborted, wake()
        or stop() is called, or timeout seconds pass (None: no limit). Returns whether a step
        would do something. Call it from the stepping thread."""
        has = c_bool()
        # not under the step lock: metrics() from another thread must not wait for a request
        with self._handle as e:
            _lib.check(_lib.lib().pl_engine_wait(e, -1.0 if timeout is None else timeout,
                                                 byref(has)))
        return has.value

    def wake(self) -> None:
        """Makes a wait() in progress (or the next one) return at once. Thread-safe."""
        with self._handle as e:
            _lib.lib().pl_engine_wake(e)

    def stop(self) -> None:
        """Makes the running (or the next) stream() return. Thread-safe."""
        self._stop = True
        try:
            self.wake()
        except _lib.EngineClosedError:
            pass

    def stream(self, until_idle: bool = True) -> Iterator[outputs.StreamDelta]:
        """Steps and yields every StreamDelta as it comes. until_idle: return when no request
        is left; else sleep between requests until stop() or close()."""
        while True:
            if self._stop or self._handle.closed:
                self._stop = False
                return
            try:
                if not self.has_unfinished_requests():
                    if until_idle:
                        return
                    self.wait()
                    continue
                deltas = self.step_deltas().deltas
            except _lib.EngineClosedError:
                return  # close() from another thread ends the loop
            for d in deltas:
                yield d

    def __iter__(self) -> Iterator[outputs.StreamDelta]:
        return self.stream()

    # ---- facts --------------------------------------------------------------------------

    @property
    def model_info(self) -> outputs.ModelInfo:
        if self._info is None:
            self._info = model_info(self._handle)
        return self._info

    def get_tokenizer(self) -> Optional[Tokenizer]:
        with self._handle:
            if not self._handle.tokenizer_ptr:
                return None
            return Tokenizer(self._handle.tokenizer_ptr, engine=self._handle)

    def check_health(self) -> None:
        """vLLM's check_health: returns while the engine can run requests, raises BackendError
        once its backend was lost to a device fault (every later step and add_request fails
        the same way; the process must be restarted). Thread-safe."""
        with self._handle as e:
            _lib.check(_lib.lib().pl_engine_health(e))

    def metrics(self) -> outputs.Metrics:
        """Counters since create (thread-safe: taken between steps)."""
        with self._step_lock:
            return metrics(self._handle)

    def capacity(self, prompt_len: int, max_tokens: int) -> int:
        out = c_size_t()
        with self._handle as e:
            _lib.check(_lib.lib().pl_engine_capacity(e, prompt_len, max_tokens, byref(out)))
        return out.value


class _Progress:
    """A request's outputs so far, from its deltas: what step() reports until it finishes."""

    __slots__ = ("texts", "ids", "logprobs", "reasons", "prompt_ids_of", "prompt_ids")

    def __init__(self, n: int, prompt_ids_of):
        self.texts: List[List[str]] = [[] for _ in range(n)]
        self.ids: List[List[int]] = [[] for _ in range(n)]
        self.logprobs: List[Optional[list]] = [None] * n
        self.reasons: List[Optional[str]] = [None] * n
        self.prompt_ids_of = prompt_ids_of  # (engine pointer) -> ids, computed when first asked
        self.prompt_ids: Optional[List[int]] = None

    def add(self, index: int, text: str, token: Optional[int], lp) -> None:
        self.texts[index].append(text)
        if token is not None:
            self.ids[index].append(token)
            if lp is not None:
                if self.logprobs[index] is None:
                    self.logprobs[index] = []
                self.logprobs[index].append(lp)

    def finish(self, index: int, reason: Optional[str]) -> None:
        self.reasons[index] = reason

    def output(self, request_id: str, p: Pending, e) -> outputs.RequestOutput:
        if self.prompt_ids is None:
            self.prompt_ids = list(self.prompt_ids_of(e))
        outs = []
        for i in range(len(self.texts)):
            lps = self.logprobs[i]
            cum = sum(next(iter(x.values())).logprob for x in lps) if lps else None
            outs.append(outputs.CompletionOutput(
                index=i, text="".join(self.texts[i]), token_ids=list(self.ids[i]),
                cumulative_logprob=cum, logprobs=list(lps) if lps else None,
                finish_reason=self.reasons[i]))
        return outputs.RequestOutput(request_id=request_id, prompt=p.prompt,
                                     prompt_token_ids=list(self.prompt_ids),
                                     prompt_logprobs=None, outputs=outs, finished=False)


@dataclass
class EngineArgs:
    """vLLM's engine arguments, for LLMEngine.from_engine_args (and LLM(**vars(args))).
    None leaves the library's default; pagellm's own config fields go in `extra` by name
    (max_num_blocks, memory_limit_bytes, ...)."""
    model: str = ""
    tokenizer: Optional[str] = None
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    block_size: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    max_model_len: Optional[int] = None
    enable_prefix_caching: Optional[bool] = None
    enable_chunked_prefill: Optional[bool] = None
    gpu_memory_utilization: Optional[float] = None
    num_gpu_blocks_override: Optional[int] = None
    long_prefill_token_threshold: Optional[int] = None
    seed: Optional[int] = 0
    chat_template: Optional[str] = None
    backend: str = "cpu"
    threads: Optional[int] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_kwargs(self) -> Dict[str, Any]:
        """The arguments LLMEngine and LLM take: the fields set, and extra's."""
        if not self.model:
            raise ValueError("EngineArgs.model is required")
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name != "extra" and getattr(self, f.name) is not None}
        out.update(self.extra)
        return out
