"""Chat replies read into their parts (the library's pl_reply_*): reasoning, content and tool
calls in OpenAI's shape, and the grammar of a reply that must call tools.

    from pagellm.reply import parse_reply
    r = parse_reply('<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', "hermes")
    r.tool_calls  # [{"id": "call_...", "type": "function",
                  #   "function": {"name": "f", "arguments": '{"a": 1}'}}]

Tool-call syntaxes: "hermes" (Hermes, Qwen2.5, Qwen3), "llama3_json" (Llama 3.1/3.2),
"mistral"; reasoning syntaxes: "qwen3", "deepseek_r1".
"""
from __future__ import annotations

import ctypes
import json
from ctypes import POINTER, byref, c_void_p
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from . import _lib


@dataclass
class Reply:
    """A reply's parts: content (None when there are only tool calls), reasoning_content
    (None when none), tool_calls (OpenAI's {"id", "type", "function": {"name",
    "arguments"}}, arguments as JSON text)."""
    content: Optional[str]
    reasoning_content: Optional[str] = None
    tool_calls: List[Dict[str, Any]] = field(default_factory=list)


def _options(tool_parser: Optional[str], reasoning_parser: Optional[str],
             prompt: Optional[str], id_seed: int) -> _lib.ReplyOptions:
    o = _lib.ReplyOptions()
    o.struct_size = ctypes.sizeof(_lib.ReplyOptions)
    o.tool_parser = tool_parser.encode() if tool_parser else None
    o.reasoning_parser = reasoning_parser.encode() if reasoning_parser else None
    o.prompt = prompt.encode() if prompt is not None else None
    o.id_seed = id_seed & 0xFFFFFFFFFFFFFFFF
    return o


def _text(p) -> Optional[str]:
    return ctypes.string_at(p).decode("utf-8", "replace") if p else None


def parse_reply(text: str, tool_parser: Optional[str] = None,
                reasoning_parser: Optional[str] = None, prompt: Optional[str] = None,
                id_seed: int = 0) -> Reply:
    """The parts of a whole reply. prompt: the rendered prompt (a template that ends inside
    <think> makes the reply start in its reasoning). A call that does not parse stays in the
    content. Unknown syntax names raise NotFoundError listing the known ones."""
    raw = text.encode()
    o = _options(tool_parser, reasoning_parser, prompt, id_seed)
    out = POINTER(_lib.ReplyC)()
    L = _lib.lib()
    _lib.check(L.pl_reply_parse(raw, len(raw), byref(o), byref(out)))
    try:
        r = out.contents
        calls = []
        for i in range(r.n_tool_calls):
            c = r.tool_calls[i]
            calls.append({"id": _text(c.id), "type": "function",
                          "function": {"name": _text(c.name), "arguments": _text(c.arguments)}})
        return Reply(content=_text(r.content), reasoning_content=_text(r.reasoning_content),
                     tool_calls=calls)
    finally:
        L.pl_reply_free(out)


def tool_parser_for(chat_template: Optional[str]) -> Optional[str]:
    """The tool-call syntax a chat template writes calls in, from its markers; None."""
    if not chat_template:
        return None
    s = _lib.lib().pl_reply_tool_parser_for(chat_template.encode())
    return s.decode() if s else None


def tool_grammar(tools: Sequence[Dict[str, Any]], name: Optional[str] = None,
                 parallel: bool = True, tool_parser: Optional[str] = None,
                 reasoning_parser: Optional[str] = None, prompt: Optional[str] = None) -> str:
    """The GBNF grammar of a reply that must call one of tools (or `name`), in tool_parser's
    syntax (None: hermes), each call's arguments valid against its parameters schema."""
    o = _options(tool_parser, reasoning_parser, prompt, 0)
    out = c_void_p()
    _lib.check(_lib.lib().pl_reply_tool_grammar(
        json.dumps(list(tools), ensure_ascii=False).encode(),
        name.encode() if name else None, bool(parallel), byref(o), byref(out)))
    return _lib.take_text(out, None)
