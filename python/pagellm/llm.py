"""LLM: vLLM's offline interface (generate, chat) over one pagellm engine."""
from __future__ import annotations

import ctypes
import os
import random
import threading
from ctypes import byref, c_size_t, c_uint64, c_void_p
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _lib, outputs, reply
from ._engine import Handle, Pending, model_info, metrics
from ._progress import progress
from .sampling_params import SamplingParams
from .tokenizer import Conversation, Tokenizer, chat_options, messages_json

# A prompt: text, token ids, or {"prompt": text} / {"prompt_token_ids": ids}.
PromptType = Union[str, Sequence[int], Dict[str, Any]]


def parse_prompt(p: Any) -> Tuple[Optional[str], Optional[List[int]]]:
    """(text, token ids) of one prompt; token ids win when a dict has both (the text is then
    only reported back)."""
    if isinstance(p, str):
        return p, None
    if isinstance(p, dict):
        unknown = set(p) - {"prompt", "prompt_token_ids"}
        if unknown:
            raise TypeError(f"a prompt dict has 'prompt' or 'prompt_token_ids', not "
                            f"{', '.join(sorted(map(repr, unknown)))}")
        if "prompt_token_ids" in p:
            return p.get("prompt"), list(p["prompt_token_ids"])
        if "prompt" in p:
            return parse_prompt(p["prompt"])[0], None
        raise TypeError("a prompt dict needs 'prompt' or 'prompt_token_ids'")
    if isinstance(p, (list, tuple)) and all(isinstance(t, int) for t in p):
        return None, list(p)
    raise TypeError(f"a prompt is a str, a list of token ids or a dict, not "
                    f"{type(p).__name__}")


def parse_prompts(prompts: Any) -> List[Tuple[Optional[str], Optional[List[int]]]]:
    """One prompt or a list of them, as vLLM takes: a list of ints is one prompt of ids."""
    if isinstance(prompts, (str, dict)):
        return [parse_prompt(prompts)]
    prompts = list(prompts)
    if prompts and all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
        return [parse_prompt(prompts)]
    return [parse_prompt(p) for p in prompts]


def per_prompt(value, n: int, what: str, default):
    """One value for every prompt, or a list with one per prompt."""
    if value is None:
        return [default] * n
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{what}: {len(value)} given for {n} prompts")
        return list(value)
    return [value] * n


def _tool_choice(choice: Union[str, Dict[str, Any]],
                 tools: Optional[Sequence[Dict]]) -> Tuple[bool, Optional[str]]:
    """(forced, the named function) of OpenAI's tool_choice."""
    if choice in ("auto", "none"):
        return False, None
    if choice == "required":
        name = None
    elif isinstance(choice, dict) and isinstance((choice.get("function") or {}).get("name"), str):
        name = choice["function"]["name"]
    else:
        raise ValueError(f"tool_choice: {choice!r} is none of 'auto', 'none', 'required' or "
                         "{'type': 'function', 'function': {'name': ...}}")
    if not tools:
        raise ValueError("tool_choice: a tool call is required but no tools are given")
    return True, name


class LLM:
    """A model loaded into a pagellm engine, with vLLM's offline interface.

        llm = LLM("stories260K.bin", tokenizer="tok512.model")
        out = llm.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=40))
        print(out[0].outputs[0].text)

    Engine arguments take vLLM's names where vLLM has one and pagellm's otherwise (any field
    of pagellm's engine config, e.g. max_num_blocks, memory_limit_bytes, kv_dtype); an
    unknown name is a TypeError naming it and a bad value a ValueError with the library's
    message. None leaves the library's default.

    Args:
        model: a llama2.c .bin file, a Hugging Face directory, or dummy:NAME.
        tokenizer: a tokenizer.json, a directory holding one, or a SentencePiece .model;
            None: the one beside the model.
        dtype: weight storage: "auto" (as stored), "float32", "float16", "bfloat16".
        kv_cache_dtype: "auto" (f16) or a dtype as above ("float32" makes greedy output
            independent of batching).
        block_size: token slots per KV block (a power of two).
        max_num_seqs: sequences running at once (the batch follows: min(32, this)).
        max_num_batched_tokens: new tokens per step (pagellm's max_total_tokens).
        max_model_len: prompt + output tokens at most; None: the model's.
        enable_prefix_caching: requests sharing a prompt prefix share its KV blocks.
        seed: requests without a seed of their own get one drawn from a generator seeded
            with this, so a script gives the same samples run after run (as vLLM's seed);
            None: such requests are random.
        backend: "cpu", "ref" (the slow oracle) or "cuda".
        threads: CPU threads; 0: all cores.
        chat_template: a Jinja chat template (a file, or the text) used instead of the
            tokenizer's.
        **kwargs: other engine arguments (gpu_memory_utilization, enable_chunked_prefill,
            num_gpu_blocks_override, or pagellm's own field names).

    The engine is freed by close(), at the end of a with block, or by the garbage
    collector; using a closed LLM raises EngineClosedError.
    """

    def __init__(self, model: Union[str, "os.PathLike[str]"],
                 tokenizer: Optional[Union[str, "os.PathLike[str]"]] = None, *,
                 dtype: str = "auto", kv_cache_dtype: str = "auto", block_size: int = 16,
                 max_num_seqs: Optional[int] = None,
                 max_num_batched_tokens: Optional[int] = None,
                 max_model_len: Optional[int] = None, enable_prefix_caching: bool = True,
                 seed: Optional[int] = 0, backend: str = "cpu", threads: int = 0,
                 chat_template: Optional[str] = None, **kwargs: Any):
        args: Dict[str, Any] = dict(
            model=model, tokenizer=tokenizer, dtype=dtype, kv_cache_dtype=kv_cache_dtype,
            block_size=block_size, max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens, max_model_len=max_model_len,
            enable_prefix_caching=enable_prefix_caching, backend=backend, threads=threads,
            chat_template=chat_template)
        args.update(kwargs)
        self._handle = Handle(args, "LLM")
        self._chat_template = chat_template  # which syntax its tool calls come in
        # the engine is stepped by one thread at a time: generate/chat from several threads
        # take turns (a server that submits from many threads uses LLMEngine)
        self._step_lock = threading.Lock()
        self._seeds = random.Random(seed) if seed is not None else None
        self._info: Optional[outputs.ModelInfo] = None

    # ---- lifetime -----------------------------------------------------------------------

    def close(self) -> None:
        """Frees the engine now (waiting for calls in flight on other threads)."""
        self._handle.close()

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- facts --------------------------------------------------------------------------

    @property
    def model_info(self) -> outputs.ModelInfo:
        """The loaded model and the engine's resolved limits (pl_engine_model_info)."""
        if self._info is None:
            self._info = model_info(self._handle)
        return self._info

    def get_tokenizer(self) -> Optional[Tokenizer]:
        """The engine's tokenizer; None when the engine runs on token ids only."""
        with self._handle:
            if not self._handle.tokenizer_ptr:
                return None
            return Tokenizer(self._handle.tokenizer_ptr, engine=self._handle)

    def capacity(self, prompt_len: int, max_tokens: int) -> int:
        """How many requests of this shape the KV pool holds at once."""
        out = c_size_t()
        with self._handle as e:
            _lib.check(_lib.lib().pl_engine_capacity(e, prompt_len, max_tokens, byref(out)))
        return out.value

    def metrics(self) -> outputs.Metrics:
        """Counters since the engine was created."""
        with self._step_lock:
            return metrics(self._handle)

    # ---- generation ---------------------------------------------------------------------

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Optional[Union[SamplingParams,
                                                 Sequence[SamplingParams]]] = None,
                 use_tqdm: bool = True,
                 priority: Optional[Sequence[int]] = None) -> List[outputs.RequestOutput]:
        """Completes every prompt and returns one RequestOutput per prompt, in input order.

        Args:
            prompts: a str, a list of token ids, a {"prompt": ...} or
                {"prompt_token_ids": ...} dict, or a list of these.
            sampling_params: one for every prompt or one per prompt; None: SamplingParams().
            use_tqdm: a progress bar on standard error when it is a terminal.
            priority: one per prompt; lower runs first (vLLM's priority scheduling).
        """
        items = parse_prompts(prompts)
        params = per_prompt(sampling_params, len(items), "sampling_params", None)
        params = [p if p is not None else SamplingParams() for p in params]
        prios = per_prompt(priority, len(items), "priority", 0)
        L = _lib.lib()

        def submit(e, i, cparams, out_id):
            text, ids = items[i]
            if ids is not None:
                arr = _lib.ids_array(ids)
                return L.pl_engine_submit_tokens(e, arr, len(arr), cparams, byref(out_id))
            if not isinstance(text, str):
                raise TypeError(f"prompt {i}: not a str")
            return L.pl_engine_submit_request(e, text.encode(), cparams, byref(out_id))

        return self._run([t for t, _ in items], params, prios, submit, use_tqdm)

    def chat(self, messages: Union[Conversation, Sequence[Conversation]],
             sampling_params: Optional[Union[SamplingParams,
                                             Sequence[SamplingParams]]] = None,
             use_tqdm: bool = True, chat_template: Optional[str] = None,
             add_generation_prompt: bool = True, tools: Optional[Sequence[Dict]] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None,
             priority: Optional[Sequence[int]] = None, *,
             tool_choice: Union[str, Dict[str, Any]] = "auto",
             parallel_tool_calls: bool = True, tool_parser: Optional[str] = "auto",
             reasoning_parser: Optional[str] = None) -> List[outputs.RequestOutput]:
        """Answers one conversation (a list of {"role", "content", ...} dicts) or a list of
        them, rendered with the chat template: chat_template (the text) if given, else the
        LLM's chat_template, else the tokenizer's. tools (OpenAI's function definitions) and
        chat_template_kwargs ({"enable_thinking": False}) reach the template. Returns one
        RequestOutput per conversation, whose prompt is the rendered text.

        Replies are read as the server reads them (pagellm.reply): with tools, tool calls in
        tool_parser's syntax ("hermes", "llama3_json", "mistral"; "auto": the one the
        template shows; None: not read) fill each output's tool_calls (OpenAI's shape) and
        content (None when there are only calls); with reasoning_parser ("qwen3",
        "deepseek_r1") the <think> part fills reasoning_content. tool_choice: "auto", "none"
        (the template gets no tools), "required" or {"type": "function", "function":
        {"name": ...}}: the last two constrain the reply to calls (one unless
        parallel_tool_calls) whose arguments follow the functions' parameters schemas."""
        single = isinstance(messages, (list, tuple)) and all(isinstance(m, dict)
                                                              for m in messages)
        convs = [messages] if single else list(messages)
        params = per_prompt(sampling_params, len(convs), "sampling_params", None)
        params = [p if p is not None else SamplingParams() for p in params]
        prios = per_prompt(priority, len(convs), "priority", 0)
        forced, name = _tool_choice(tool_choice, tools)
        template_tools = tools if tools is not None and tool_choice != "none" else None
        parser = None
        if template_tools is not None and tool_parser is not None:
            parser = tool_parser
            if tool_parser == "auto":
                t = chat_template or self._chat_template
                if t is not None and os.path.isfile(t):
                    with open(t, encoding="utf-8") as f:
                        t = f.read()
                if t is None:
                    tok = self.get_tokenizer()
                    t = tok.get_chat_template("tool_use") or tok.chat_template
                parser = reply.tool_parser_for(t)
            if forced and parser is None:
                parser = "hermes"  # the template shows no syntax: Hermes' is the default
        L = _lib.lib()
        with chat_options(add_generation_prompt, template_tools, chat_template,
                          chat_template_kwargs) as o, self._handle as e:
            jsons = [messages_json(c) for c in convs]
            texts = []
            for j in jsons:
                text = c_void_p()
                n = c_size_t()
                _lib.check(L.pl_engine_apply_chat_template_json(e, j, o.ptr, byref(text),
                                                                byref(n)))
                texts.append(_lib.take_text(text, n.value))
            if forced or parser == "mistral":
                params = [p.clone() for p in params]
            for i, p in enumerate(params):
                if parser == "mistral":
                    p.skip_special_tokens = False  # its [TOOL_CALLS] marker is a special token
                if forced:
                    if p.structured_outputs or p.guided_decoding or any(
                            k in p.extra for k in ("json_schema", "grammar", "regex", "choice")):
                        raise ValueError("chat: a forced tool call and the sampling params' "
                                         "structured outputs both constrain the output")
                    p.extra["grammar"] = reply.tool_grammar(tools, name, parallel_tool_calls,
                                                            parser, reasoning_parser, texts[i])

            def submit(e, i, cparams, out_id):
                return L.pl_engine_submit_chat_json(e, jsons[i], o.ptr, cparams,
                                                    byref(out_id))

            results = self._run(texts, params, prios, submit, use_tqdm)
        if parser or reasoning_parser:
            for i, r in enumerate(results):
                for out in r.outputs:
                    rep = reply.parse_reply(out.text, parser, reasoning_parser, texts[i],
                                            random.getrandbits(64))
                    out.content = rep.content
                    out.reasoning_content = rep.reasoning_content
                    out.tool_calls = rep.tool_calls[:1] if not parallel_tool_calls \
                        else rep.tool_calls
        return results

    # ---- the batch loop -----------------------------------------------------------------

    def _tokenize(self, e: int, text: str) -> List[int]:
        ids = _lib.POINTER_INT32()
        n = c_size_t()
        _lib.check(_lib.lib().pl_engine_tokenize(e, text.encode(), byref(ids), byref(n)))
        return _lib.take_ids(ids, n.value)

    def _run(self, texts: List[Optional[str]], params: List[SamplingParams], prios: List[int],
             submit: Callable, use_tqdm: bool) -> List[outputs.RequestOutput]:
        """Submits every prompt, steps until all finished, and returns their outputs in
        order. On any failure (a refused prompt, Ctrl-C) what was submitted is aborted and
        drained, so the engine is left empty."""
        h = self._handle
        n = len(texts)
        results: List[Optional[outputs.RequestOutput]] = [None] * n
        pending: Dict[int, Tuple[int, Pending]] = {}
        structs: Dict[int, Any] = {}
        prio_of: Dict[int, int] = {}
        bar = None
        with self._step_lock, h as e:
            try:
                for i in range(n):
                    sp = params[i]
                    # one C struct per distinct SamplingParams (submit copies it): the
                    # per-request fields are set on it before each submit
                    key = id(sp)
                    cs = structs.get(key)
                    if cs is None:
                        cs = structs[key] = sp.to_c()
                        prio_of[key] = 0
                    if prios[i] != prio_of[key]:
                        cs.set("priority", prios[i])
                        prio_of[key] = prios[i]
                    if sp.seed is None and self._seeds is not None:
                        cs.set("seed", self._seeds.getrandbits(63))
                    out_id = c_uint64()
                    st = submit(e, i, cs.ptr, out_id)
                    if st != 0:
                        raise _lib.error(st)
                    pending[out_id.value] = (i, Pending(str(out_id.value), texts[i], sp))
                bar = progress(use_tqdm, n)
                if bar is None:
                    self._run_all(e, pending, results)
                else:
                    self._step_all(e, pending, results, bar)
            except BaseException:
                self._drain(e, pending)
                raise
            finally:
                for cs in structs.values():
                    cs.close()
                if bar is not None:
                    bar.close()
        return results  # type: ignore[return-value]

    def _collect(self, c: _lib.Completion, pending, results) -> Optional[outputs.RequestOutput]:
        entry = pending.get(c.id)
        if entry is None:
            return None
        i, p = entry
        out = p.add(self._handle, c)
        if out is not None:
            results[i] = out
            del pending[c.id]
        return out

    def _run_all(self, e: int, pending, results) -> None:
        """pl_engine_run: one call steps until everything finished."""
        L = _lib.lib()
        comps = ctypes.POINTER(_lib.Completion)()
        nc = c_size_t()
        st = L.pl_engine_run(e, byref(comps), byref(nc))
        try:
            for k in range(nc.value):
                self._collect(comps[k], pending, results)
        finally:
            L.pl_completions_free(comps, nc.value)
        _lib.check(st)

    def _step_all(self, e: int, pending, results, bar) -> None:
        """Step by step, so the bar moves as requests finish."""
        L = _lib.lib()
        res = _lib.StepResult()
        while pending:
            st = L.pl_engine_step_sized(e, byref(res), ctypes.sizeof(res))
            for k in range(res.n_finished):
                out = self._collect(res.finished[k], pending, results)
                if out is not None:
                    bar.update(1, sum(len(o.token_ids) for o in out.outputs))
            _lib.check(st)
            if not res.n_finished and not res.n_deltas and not L.pl_engine_has_pending_work(e):
                raise RuntimeError("pagellm: requests vanished from the engine")

    def _drain(self, e: int, pending) -> None:
        """Aborts what is still pending and steps until the engine reported it all."""
        L = _lib.lib()
        for cid in list(pending):
            L.pl_engine_abort(e, cid)
        pending.clear()
        comps = ctypes.POINTER(_lib.Completion)()
        nc = c_size_t()
        for _ in range(1000):
            if not L.pl_engine_has_pending_work(e):
                break
            L.pl_engine_run(e, byref(comps), byref(nc))
            L.pl_completions_free(comps, nc.value)

    def __repr__(self) -> str:
        if self._handle.closed:
            return "LLM(closed)"
        i = self.model_info
        return f"LLM(model={i.name!r}, architecture={i.architecture!r}, " \
               f"max_model_len={i.max_model_len})"
