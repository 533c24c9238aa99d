"""Tokenizer: the engine's tokenizer (LLM.get_tokenizer) or one loaded alone, with the
methods vLLM users call on a Hugging Face tokenizer: encode, decode, apply_chat_template."""
from __future__ import annotations

import json
import os
import weakref
from ctypes import byref, c_size_t, c_void_p
from typing import Any, Dict, List, Optional, Sequence, Union

from . import _fields, _lib

Conversation = Sequence[Dict[str, Any]]


def chat_options(add_generation_prompt: bool = True, tools: Optional[Sequence[Dict]] = None,
                 chat_template: Optional[str] = None,
                 chat_template_kwargs: Optional[Dict[str, Any]] = None) -> _fields.CStruct:
    """A pl_chat_options (close() it after use). tools and chat_template_kwargs go to the
    template as JSON."""
    o = _fields.CStruct("chat_options")
    try:
        o.set("add_generation_prompt", bool(add_generation_prompt))
        if tools is not None:
            o.set_text("tools", json.dumps(list(tools), ensure_ascii=False))
        if chat_template_kwargs:
            o.set_text("chat_template_kwargs", json.dumps(dict(chat_template_kwargs),
                                                          ensure_ascii=False))
        if chat_template is not None:
            o.set_text("chat_template", chat_template)
    except BaseException:
        o.close()
        raise
    return o


def messages_json(conversation: Conversation) -> bytes:
    """OpenAI-shaped messages as the JSON the library reads."""
    if isinstance(conversation, (str, bytes)) or not all(
            isinstance(m, dict) for m in conversation):
        raise TypeError("a conversation is a list of {'role': ..., 'content': ...} dicts")
    return json.dumps(list(conversation), ensure_ascii=False).encode()


class Tokenizer:
    """A pagellm tokenizer: SentencePiece .model, Hugging Face tokenizer.json, or GGUF.

    Get the engine's with LLM.get_tokenizer(), or load one with Tokenizer.load(path). It is
    immutable and may be used from any thread. The engine's tokenizer renders chats with the
    engine's template (LLM(chat_template=...) or the tokenizer's own).
    """

    def __init__(self, ptr: int, engine=None, owned: bool = False):
        """Internal: use Tokenizer.load or LLM.get_tokenizer."""
        self._ptr = ptr
        self._engine = engine  # keeps the engine (which owns ptr) alive
        self._finalizer = None
        if owned:
            self._finalizer = weakref.finalize(self, _lib.lib().pl_tokenizer_free,
                                               c_void_p(ptr))

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "Tokenizer":
        """Loads a tokenizer alone: a .model, a tokenizer.json (tokenizer_config.json read
        beside it), a directory holding either, or a .gguf file."""
        out = c_void_p()
        _lib.check(_lib.lib().pl_tokenizer_load(os.fsencode(path), byref(out)))
        return cls(out.value, owned=True)

    def close(self) -> None:
        """Frees a loaded tokenizer now (the engine's lives as long as the engine)."""
        if self._finalizer is not None:
            self._finalizer()
        self._ptr = None

    def _call(self, fn, *args):
        """fn(tokenizer, *args), with the engine that owns the tokenizer kept open."""
        if self._engine is not None:
            with self._engine:
                return fn(self._ptr, *args)
        if not self._ptr:
            raise ValueError("pagellm: the tokenizer is closed")
        return fn(self._ptr, *args)

    # ---- vocabulary ---------------------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self._call(_lib.lib().pl_tokenizer_vocab_size)

    def __len__(self) -> int:
        return self.vocab_size

    def convert_ids_to_tokens(self, ids: Union[int, Sequence[int]]):
        """The pieces of ids ("▁the", "Ġthe", "<|eot_id|>"); None for an id out of range."""
        one = isinstance(ids, int)
        out = []
        for t in ([ids] if one else ids):
            s = self._call(_lib.lib().pl_tokenizer_piece, t)
            out.append(s.decode("utf-8", "replace") if s is not None else None)
        return out[0] if one else out

    def convert_tokens_to_ids(self, tokens: Union[str, Sequence[str]]):
        """The ids of pieces; None for a piece not in the vocabulary."""
        one = isinstance(tokens, str)
        out = []
        for t in ([tokens] if one else tokens):
            i = self._call(_lib.lib().pl_tokenizer_token_id, t.encode())
            out.append(i if i >= 0 else None)
        return out[0] if one else out

    # ---- text <-> ids -------------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Text to ids as Hugging Face's encode does: special-token text ("<|eot_id|>")
        becomes its id; add_special_tokens applies the tokenizer's BOS/EOS rule."""
        raw = text.encode()
        flags = _lib.ENCODE_PARSE_SPECIAL | (_lib.ENCODE_ADD_SPECIAL if add_special_tokens
                                             else 0)
        ids = _lib.POINTER_INT32()
        n = c_size_t()
        _lib.check(self._call(_lib.lib().pl_tokenizer_encode, raw, len(raw), flags, byref(ids),
                              byref(n)))
        return _lib.take_ids(ids, n.value)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Ids to text (invalid UTF-8 as U+FFFD). ValueError names an id out of range."""
        arr = _lib.ids_array(token_ids)
        text = c_void_p()
        n = c_size_t()
        flags = _lib.DECODE_SKIP_SPECIAL if skip_special_tokens else 0
        _lib.check(self._call(_lib.lib().pl_tokenizer_decode, arr, len(arr), flags, byref(text),
                              byref(n)))
        return _lib.take_text(text, n.value)

    # ---- chats --------------------------------------------------------------------------

    def get_chat_template(self, name: Optional[str] = None) -> Optional[str]:
        """The tokenizer's template text of that name (None: the default), or None."""
        s = self._call(_lib.lib().pl_tokenizer_chat_template, name.encode() if name else None)
        return s.decode() if s is not None else None

    @property
    def chat_template(self) -> Optional[str]:
        return self.get_chat_template()

    def apply_chat_template(self, conversation: Conversation,
                            tools: Optional[Sequence[Dict]] = None,
                            chat_template: Optional[str] = None,
                            add_generation_prompt: bool = False, tokenize: bool = True,
                            chat_template_kwargs: Optional[Dict[str, Any]] = None,
                            **kwargs: Any) -> Union[str, List[int]]:
        """Renders a chat as Hugging Face's apply_chat_template does (same defaults:
        add_generation_prompt False, tokenize True). Extra keyword arguments, and the
        members of chat_template_kwargs, are template variables. tokenize: the ids, with
        special tokens parsed and nothing added (the template writes BOS)."""
        variables = dict(chat_template_kwargs or {})
        variables.update(kwargs)
        text_p = c_void_p()
        n = c_size_t()
        with chat_options(add_generation_prompt, tools, chat_template, variables) as o:
            msgs = messages_json(conversation)
            if self._engine is not None:
                with self._engine as e:
                    st = _lib.lib().pl_engine_apply_chat_template_json(e, msgs, o.ptr,
                                                                       byref(text_p), byref(n))
            else:
                st = self._call(_lib.lib().pl_tokenizer_apply_chat_template, msgs, o.ptr,
                                byref(text_p), byref(n))
            _lib.check(st)
        text = _lib.take_text(text_p, n.value)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def __repr__(self) -> str:
        if not self._ptr:
            return "Tokenizer(closed)"
        return f"Tokenizer(vocab_size={self.vocab_size})"
