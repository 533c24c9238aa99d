"""LLMEngine: the streaming interface for servers written in Python. Requests are added and
aborted from any thread; one thread steps (or iterates stream()) and gets each request's new
text as it is generated. The GIL is released inside every library call (ctypes does this for
foreign calls, and no Python code runs inside a step), so other Python threads run while the
engine computes."""
from __future__ import annotations

import ctypes
import random
import threading
from ctypes import byref, c_bool, c_size_t, c_uint64, c_void_p
from typing import Any, Dict, Iterable, Iterator, Optional, Sequence, Union

from . import _lib, outputs
from ._engine import Handle, Pending, metrics, model_info
from .llm import PromptType, parse_prompt
from .sampling_params import SamplingParams
from .tokenizer import Conversation, Tokenizer, chat_options, messages_json


class LLMEngine:
    """An engine for serving: add_request / abort_request from any thread, step() or
    stream() on one.

        engine = LLMEngine("stories260K.bin", tokenizer="tok512.model")
        engine.add_request("a", "Once upon a time", SamplingParams(max_tokens=32))
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
        self._stop = False
        self._info: Optional[outputs.ModelInfo] = None

    # ---- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Ends a stream() in progress, waits for calls in flight and frees the engine (and
        every request still in it)."""
        self._stop = True
        self._handle.close()

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

        def prompt_len(e):
            if ids is not None:
                return len(ids)
            got = _lib.POINTER_INT32()
            n = c_size_t()
            _lib.check(L.pl_engine_tokenize(e, text.encode(), byref(got), byref(n)))
            _lib.take_ids(got, n.value)
            return n.value

        return self._add(request_id, text, params, priority, submit, prompt_len)

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

            def prompt_len(e):
                return len(Tokenizer(self._handle.tokenizer_ptr, engine=self._handle)
                           .encode(text, add_special_tokens=False))

            return self._add(request_id, text, params, priority, submit, prompt_len)

    def _add(self, request_id, text, params, priority, submit, prompt_len) -> str:
        params = params if params is not None else SamplingParams()
        if request_id is not None:
            request_id = str(request_id)
            with self._lock:
                if request_id in self._by_id:
                    raise ValueError(f"request id {request_id!r} is already in use")
        with self._handle as e:
            override = None
            if params.max_tokens is None:
                override = max(1, self.model_info.max_model_len - prompt_len(e))
            with params.to_c(max_tokens=override) as cs:
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

    def step(self) -> outputs.StepOutput:
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
                    out.deltas.append(outputs.StreamDelta(
                        p.request_id, d.index, text, d.token if d.token >= 0 else None, lp))
                for k in range(res.n_finished):
                    c = res.finished[k]
                    p = self._by_c.get(c.id)
                    if p is None:
                        continue
                    ro = p.add(h, c)
                    out.deltas.append(outputs.StreamDelta(
                        p.request_id, c.index, "", None, None, True,
                        outputs.FINISH_REASONS.get(c.finish_reason), ro))
                    if ro is not None:
                        out.finished.append(ro)
                        del self._by_c[c.id]
                        self._by_id.pop(p.request_id, None)
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
                deltas = self.step().deltas
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
