"""What agents need from the Python package: vLLM's SamplingParams(structured_outputs=
StructuredOutputsParams(...)) and guided_decoding=GuidedDecodingParams(...) constraining the
output (checked against the schema, regex or choice), pagellm.reply reading replies in each
family's syntax, and LLM.chat(messages, tools=...) returning tool calls, forced ones with
arguments valid against the functions' schemas, and reasoning, on stories260K."""
import json
import re

import pytest

from pagellm import (LLM, GuidedDecodingParams, InvalidArgumentError, NotFoundError,
                     SamplingParams, StructuredOutputsParams, parse_reply)
from pagellm.reply import tool_grammar, tool_parser_for

# Hermes' marker in the template: LLM.chat reads calls as "hermes"; think=True opens the
# reasoning as Qwen3 thinking templates do
TEMPLATE = ("{% if tools %}<tools>{{ tools | length }}</tools><tool_call>{% endif %}"
            "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}<assistant>"
            "{% if think %}<think>\n{% endif %}")
SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "age": {"type": "integer", "minimum": 0,
                                                   "maximum": 99}},
          "required": ["name", "age"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
             "required": ["city"]}}},
         {"type": "function", "function": {"name": "now"}}]


@pytest.fixture(scope="module")
def llm(stories):
    model, tok = stories
    with LLM(model, tokenizer=tok, chat_template=TEMPLATE, threads=1) as llm:
        yield llm


def valid(schema, v):
    if schema.get("type") == "object":
        assert isinstance(v, dict) and set(schema.get("required", [])) <= set(v) <= \
            set(schema.get("properties", {})), v
        for k, x in v.items():
            valid(schema["properties"][k], x)
    elif schema.get("type") == "string":
        assert isinstance(v, str) and len(v) <= schema.get("maxLength", len(v)), v
    elif schema.get("type") == "integer":
        assert isinstance(v, int) and schema["minimum"] <= v <= schema["maximum"], v


@pytest.mark.parametrize("cls", [StructuredOutputsParams, GuidedDecodingParams])
def test_structured_outputs(llm, cls):
    key = "structured_outputs" if cls is StructuredOutputsParams else "guided_decoding"
    cases = [(dict(json=SCHEMA), lambda t: valid(SCHEMA, json.loads(t))),
             (dict(json=json.dumps(SCHEMA)), lambda t: valid(SCHEMA, json.loads(t))),
             (dict(regex="[a-c]{2}[0-9]"), lambda t: re.fullmatch("[a-c]{2}[0-9]", t)),
             (dict(choice=["happy", "sad"]), lambda t: t in ("happy", "sad")),
             (dict(grammar='root ::= "x" [0-9]+ "y"'), lambda t: re.fullmatch("x[0-9]+y", t)),
             # any object: stories260K may fill a string until max_tokens cuts it
             (dict(json_object=True), None)]
    for kw, ok in cases:
        sp = SamplingParams(temperature=0.8, seed=9, n=2, max_tokens=300, **{key: cls(**kw)})
        out = llm.generate("Once upon a time", sp, use_tqdm=False)[0]
        for o in out.outputs:
            if ok is None:
                assert o.text.lstrip().startswith("{") and (
                    o.finish_reason == "length" or isinstance(json.loads(o.text), dict)), o
                continue
            assert o.finish_reason == "stop", (kw, o)
            assert ok(o.text) is not False, (kw, o.text)
    # the two names give the same outputs
    a = llm.generate("Lily", SamplingParams(temperature=0.8, seed=3, max_tokens=200,
                     structured_outputs=StructuredOutputsParams(regex="[a-z]{4}")),
                     use_tqdm=False)[0].outputs[0].text
    b = llm.generate("Lily", SamplingParams(temperature=0.8, seed=3, max_tokens=200,
                     guided_decoding=GuidedDecodingParams(regex="[a-z]{4}")),
                     use_tqdm=False)[0].outputs[0].text
    assert a == b and re.fullmatch("[a-z]{4}", a)


def test_structured_outputs_refusals(llm):
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutputsParams(json=SCHEMA, regex="a")
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutputsParams()
    with pytest.raises(ValueError, match="structural_tag"):
        StructuredOutputsParams(structural_tag="{}")
    with pytest.raises(ValueError, match="not both"):
        SamplingParams(structured_outputs=StructuredOutputsParams(regex="a"),
                       guided_decoding=GuidedDecodingParams(regex="b"))
    with pytest.raises(TypeError):
        SamplingParams(structured_outputs={"regex": "a"})
    bad = SamplingParams(structured_outputs=StructuredOutputsParams(
        json={"type": "object", "properties": {"a": {"not": {}}}}))
    with pytest.raises(InvalidArgumentError, match="/properties/a"):
        llm.generate("Once", bad, use_tqdm=False)
    # the engine goes on
    assert llm.generate("Once", SamplingParams(max_tokens=2), use_tqdm=False)[0].finished


def test_reply_parsing_per_syntax():
    r = parse_reply('Sure.\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
                    "hermes")
    assert r.content == "Sure." and r.tool_calls[0]["function"] == {"name": "f",
                                                                    "arguments": '{"a": 1}'}
    assert r.tool_calls[0]["id"].startswith("call_") and r.tool_calls[0]["type"] == "function"
    r = parse_reply('{"name": "f", "parameters": {}}; {"name": "g", "parameters": {"x": 2}}',
                    "llama3_json")
    assert [c["function"]["name"] for c in r.tool_calls] == ["f", "g"] and r.content is None
    r = parse_reply('[TOOL_CALLS] [{"name": "f", "arguments": {}}]', "mistral")
    assert len(r.tool_calls[0]["id"]) == 9
    r = parse_reply("<think>hmm</think>\n\nDone.", None, "qwen3")
    assert (r.reasoning_content, r.content, r.tool_calls) == ("hmm", "Done.", [])
    assert parse_reply("plain\n").content == "plain\n"
    with pytest.raises(NotFoundError, match="hermes"):
        parse_reply("x", "hermez")
    assert tool_parser_for(TEMPLATE) == "hermes" and tool_parser_for("{{ x }}") is None
    assert 'call ::= "<tool_call>' in tool_grammar(TOOLS)
    with pytest.raises(InvalidArgumentError, match="no function named"):
        tool_grammar(TOOLS, name="later")


def test_chat_tool_calls(llm):
    conv = [{"role": "user", "content": "What is the weather?"}]
    sp = SamplingParams(temperature=0.7, seed=4, max_tokens=400)
    out = llm.chat(conv, sp, tools=TOOLS, tool_choice="required", use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.content is None and out.tool_calls, out
    for c in out.tool_calls:
        f = next(t["function"] for t in TOOLS if t["function"]["name"] == c["function"]["name"])
        valid(f.get("parameters", {"type": "object"}), json.loads(c["function"]["arguments"]))
    named = llm.chat(conv, sp, tools=TOOLS, tool_choice={"type": "function", "function":
                     {"name": "get_weather"}}, parallel_tool_calls=False,
                     use_tqdm=False)[0].outputs[0]
    assert [c["function"]["name"] for c in named.tool_calls] == ["get_weather"], named
    # auto: stories260K writes no calls, its text is the content
    auto = llm.chat(conv, SamplingParams(temperature=0, max_tokens=16), tools=TOOLS,
                    use_tqdm=False)[0].outputs[0]
    assert auto.tool_calls == [] and auto.content == auto.text
    # none: the template gets no tools, nothing is read
    none = llm.chat(conv, SamplingParams(temperature=0, max_tokens=4), tools=TOOLS,
                    tool_choice="none", use_tqdm=False)[0]
    assert "<tools>" not in none.prompt and none.outputs[0].tool_calls is None
    # the history an agent sends next
    nxt = conv + [{"role": "assistant", "content": None, "tool_calls": out.tool_calls}] + [
        {"role": "tool", "tool_call_id": c["id"], "content": "sunny"} for c in out.tool_calls]
    assert llm.chat(nxt, SamplingParams(max_tokens=4), use_tqdm=False)[0].finished
    with pytest.raises(ValueError, match="no tools"):
        llm.chat(conv, tool_choice="required")
    with pytest.raises(ValueError, match="both constrain"):
        llm.chat(conv, SamplingParams(structured_outputs=StructuredOutputsParams(regex="a")),
                 tools=TOOLS, tool_choice="required")


def test_chat_reasoning(llm):
    conv = [{"role": "user", "content": "Once"}]
    sp = SamplingParams(temperature=0, max_tokens=30)
    plain = llm.chat(conv, sp, use_tqdm=False)[0].outputs[0]
    assert plain.reasoning_content is None and plain.content is None  # nothing read
    opened = llm.chat(conv, sp, chat_template_kwargs={"think": True}, reasoning_parser="qwen3",
                      use_tqdm=False)[0].outputs[0]
    assert opened.reasoning_content and opened.content == ""
    assert opened.reasoning_content in opened.text
