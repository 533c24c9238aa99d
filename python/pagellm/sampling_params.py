"""SamplingParams: vLLM's per-request sampling parameters, checked by the library."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

from . import _fields, _lib

# vLLM's names: the library's fields, or their aliases (stop_token_ids for stop_ids:
# pagellm.h PL_SAMPLING_PARAMS_ALIASES). priority is an argument of LLM.generate /
# LLMEngine.add_request, as in vLLM.
_C_NAMES = (
    "n", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p",
    "top_k", "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "max_tokens",
    "min_tokens", "logprobs", "prompt_logprobs", "skip_special_tokens",
    "include_stop_str_in_output", "logit_bias",
)
# json_object: any JSON object
_ANY_OBJECT = {"type": "object", "additionalProperties": True}


class StructuredOutputsParams:
    """vLLM's structured outputs: the output must be JSON that the schema `json` accepts (a
    dict, or its JSON text), match `regex` whole, be one of `choice`, follow the GBNF
    `grammar`, or (json_object=True) be any JSON object. Exactly one. The whitespace and
    backend options vLLM has are taken and ignored (pagellm has one grammar engine, which
    bounds whitespace itself); structural_tag is refused."""

    def __init__(self, json: Optional[Union[str, Dict[str, Any]]] = None,
                 regex: Optional[str] = None, choice: Optional[Sequence[str]] = None,
                 grammar: Optional[str] = None, json_object: Optional[bool] = None,
                 disable_fallback: bool = False, disable_any_whitespace: bool = False,
                 disable_additional_properties: bool = False,
                 whitespace_pattern: Optional[str] = None,
                 structural_tag: Optional[str] = None, **kwargs: Any):
        self.json = json
        self.regex = regex
        self.choice = list(choice) if choice is not None else None
        self.grammar = grammar
        self.json_object = json_object
        self.disable_fallback = disable_fallback
        self.disable_any_whitespace = disable_any_whitespace
        self.disable_additional_properties = disable_additional_properties
        self.whitespace_pattern = whitespace_pattern
        self.structural_tag = structural_tag
        self.backend = kwargs.pop("backend", None)  # GuidedDecodingParams' name for it
        if kwargs:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument "
                            f"'{next(iter(kwargs))}'")
        if structural_tag is not None:
            raise ValueError("structured outputs: structural_tag is not supported")
        given = [k for k in ("json", "regex", "choice", "grammar", "json_object")
                 if getattr(self, k) not in (None, False)]
        if len(given) != 1:
            raise ValueError("structured outputs: give exactly one of json, regex, choice, "
                             f"grammar and json_object (given: {', '.join(given) or 'none'})")

    def fields(self) -> Dict[str, Any]:
        """The library's sampling field and value this constraint sets."""
        if self.json is not None:
            return {"json_schema": self.json}
        if self.regex is not None:
            return {"regex": self.regex}
        if self.choice is not None:
            return {"choice": self.choice}
        if self.grammar is not None:
            return {"grammar": self.grammar}
        return {"json_schema": _ANY_OBJECT}

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        k, v = next(iter(self.fields().items()))
        return f"{type(self).__name__}({k}={v!r})"


class GuidedDecodingParams(StructuredOutputsParams):
    """vLLM's older name for StructuredOutputsParams (SamplingParams(guided_decoding=...))."""


class SamplingParams:
    """How to sample one request's output, with vLLM's names and defaults.

    Args:
        n: output sequences per prompt (they share the prompt's KV blocks).
        presence_penalty: subtracted from the logits of tokens already in the output.
        frequency_penalty: subtracted once per occurrence in the output.
        repetition_penalty: divides positive (multiplies negative) logits of tokens in the
            prompt or the output; 1 is off.
        temperature: 0 is greedy (the lowest id on ties).
        top_p: nucleus sampling; 1 is off.
        top_k: keep the k most likely tokens; 0 or -1 is off.
        min_p: drop tokens less likely than min_p times the most likely; 0 is off.
        seed: a seed makes this request's draws independent of the batch it runs in.
        stop: strings that end the output (not included in it).
        stop_token_ids: token ids that end the output (the id is kept in token_ids).
        ignore_eos: keep generating past the end of text.
        max_tokens: output tokens at most (vLLM's default 16); None: as many as
            max_model_len leaves.
        min_tokens: EOS and stop ids are ignored before this many output tokens.
        logprobs: per output token, the log-probabilities of the sampled token and of the
            `logprobs` most likely ones (0..20); None: none.
        prompt_logprobs: the same for every prompt token after the first.
        skip_special_tokens: special tokens in the output add no text (vLLM's default).
        include_stop_str_in_output: keep the stop string that ended the output in its text.
        logit_bias: {token id: bias} added to the logits before sampling, each in
            [-100, 100] (OpenAI's logit_bias).
        skip_special_tokens: special tokens add no text to the output (False keeps it).
        structured_outputs: a StructuredOutputsParams: JSON of a schema, a regex, a choice
            or a GBNF grammar (vLLM's); guided_decoding: the same, vLLM's older name.
        **kwargs: any other field of pagellm's sampling table by its name.

    Invalid values raise ValueError with the library's message, e.g.
    "top_p = 0: must be in (0, 1]". Priority is not a field here: it is an
    argument of LLM.generate and LLMEngine.add_request, as in vLLM.
    """

    def __init__(self, n: int = 1, presence_penalty: float = 0.0,
                 frequency_penalty: float = 0.0, repetition_penalty: float = 1.0,
                 temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
                 min_p: float = 0.0, seed: Optional[int] = None,
                 stop: Optional[Union[str, Sequence[str]]] = None,
                 stop_token_ids: Optional[Sequence[int]] = None, ignore_eos: bool = False,
                 max_tokens: Optional[int] = 16, min_tokens: int = 0,
                 logprobs: Optional[int] = None, prompt_logprobs: Optional[int] = None,
                 skip_special_tokens: bool = True, include_stop_str_in_output: bool = False,
                 logit_bias: Optional[Dict[int, float]] = None,
                 structured_outputs: Optional[StructuredOutputsParams] = None,
                 guided_decoding: Optional[StructuredOutputsParams] = None, **kwargs: Any):
        self.n = n
        self.presence_penalty = presence_penalty
        self.frequency_penalty = frequency_penalty
        self.repetition_penalty = repetition_penalty
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k
        self.min_p = min_p
        self.seed = seed
        self.stop: List[str] = [stop] if isinstance(stop, str) else list(stop or [])
        self.stop_token_ids: List[int] = list(stop_token_ids or [])
        self.ignore_eos = ignore_eos
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens < 1:
            # the library's 0 ("what the context leaves") is None here, as in vLLM
            raise _lib.InvalidArgumentError(
                f"max_tokens = {max_tokens}: must be >= 1 (None: as many as max_model_len "
                f"leaves)", -1, "PL_ERR_INVALID_ARGUMENT")
        self.max_tokens = max_tokens
        self.min_tokens = min_tokens
        self.logprobs = logprobs
        self.prompt_logprobs = prompt_logprobs
        self.skip_special_tokens = skip_special_tokens
        self.include_stop_str_in_output = include_stop_str_in_output
        self.logit_bias: Optional[Dict[int, float]] = (
            {int(k): float(v) for k, v in logit_bias.items()} if logit_bias else None)
        for name, v in (("structured_outputs", structured_outputs),
                        ("guided_decoding", guided_decoding)):
            if v is not None and not isinstance(v, StructuredOutputsParams):
                raise TypeError(f"SamplingParams({name}=...): expected StructuredOutputsParams, "
                                f"got {type(v).__name__}")
        if structured_outputs is not None and guided_decoding is not None:
            raise ValueError("SamplingParams: give structured_outputs or guided_decoding, "
                             "not both")
        self.structured_outputs = structured_outputs
        self.guided_decoding = guided_decoding
        t = _fields.table("sampling_params")
        mapped = {t.field_name(k) for k in _C_NAMES} | {"priority"}
        self.extra: Dict[str, Any] = {}
        for k, v in kwargs.items():
            if k == "priority":
                raise TypeError("SamplingParams() got an unexpected keyword argument "
                                "'priority' (give it to LLM.generate or "
                                "LLMEngine.add_request, as in vLLM)")
            if k not in t or t.field_name(k) in mapped:
                hint = ""
                if k not in t:  # the library's message suggests the closest name
                    try:
                        _fields.CStruct("sampling_params").set(k, v)
                    except _lib.PagellmError as e:
                        hint = f" ({e})"
                raise TypeError(f"SamplingParams() got an unexpected keyword argument "
                                f"'{k}'{hint}")
            self.extra[k] = v
        self.to_c().close()  # checks every value as submit would

    def to_c(self) -> _fields.CStruct:
        """This as a pl_sampling_params (close() it after the submit that copies it). A None
        max_tokens is the library's 0: as many as max_model_len leaves after the prompt."""
        s = _fields.CStruct("sampling_params")
        try:
            for py in _C_NAMES:
                c = py
                v = getattr(self, py)
                if py == "max_tokens" and v is None:
                    v = 0
                elif py in ("logprobs", "prompt_logprobs") and v is None:
                    v = -1
                elif py in ("stop", "stop_token_ids"):
                    v = list(v) if v else None
                elif py == "logit_bias":
                    v = {str(k): b for k, b in v.items()} if v else None
                s.set(c, v)
            for k, v in self.extra.items():
                s.set(k, v)
            so = self.structured_outputs or self.guided_decoding
            for k, v in (so.fields() if so else {}).items():
                if k in self.extra:
                    raise ValueError(f"SamplingParams: {k} is given twice (as a keyword and "
                                     "by structured outputs)")
                s.set(k, v)
            _lib.check(_lib.lib().pl_sampling_params_validate(s.ptr))
        except BaseException:
            s.close()
            raise
        return s

    def clone(self) -> "SamplingParams":
        c = SamplingParams.__new__(SamplingParams)
        c.__dict__.update({k: (list(v) if isinstance(v, list) else
                               dict(v) if isinstance(v, dict) else v)
                           for k, v in self.__dict__.items()})
        return c

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SamplingParams) and self.__dict__ == other.__dict__

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in _C_NAMES)
        extra = "".join(f", {k}={v!r}" for k, v in self.extra.items())
        for k in ("structured_outputs", "guided_decoding"):
            if getattr(self, k) is not None:
                extra += f", {k}={getattr(self, k)!r}"
        return f"SamplingParams({args}{extra})"
