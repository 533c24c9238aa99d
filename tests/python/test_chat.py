"""LLM.chat and the tokenizer's apply_chat_template: a template given as text on stories260K
(which has none), tools and chat_template_kwargs reaching the template, the errors; and the
real Llama 3 and Qwen3 templates rendered byte for byte as the npm oracle rendered them
(tests/data/templates/*-real.expected.json)."""
import json
import os

import pytest

from conftest import model_file
from pagellm import (LLM, FormatError, LLMEngine, NotFoundError, SamplingParams, Tokenizer,
                     UnsupportedError)

TEMPLATE = ("{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
            "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}")
TOOLS_TEMPLATE = ("{% if tools %}[{{ tools | length }} tools: {{ tools[0].function.name }}]"
                  "{% endif %}{{ greeting }}|{% for m in messages %}{{ m.content }}{% endfor %}"
                  "{% if add_generation_prompt %}>{% endif %}")
CONV = [{"role": "system", "content": "Be kind."},
        {"role": "user", "content": "Tell me a story about a cat."}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


@pytest.fixture(scope="module")
def llm(stories):
    model, tok = stories
    with LLM(model, tokenizer=tok, chat_template=TEMPLATE, threads=1) as llm:
        yield llm


def test_chat_renders_the_template_and_generates_from_it(llm):
    sp = SamplingParams(temperature=0, max_tokens=24)
    out = llm.chat(CONV, sp)
    assert len(out) == 1
    want = "<s>system: Be kind.\nuser: Tell me a story about a cat.\nassistant:"
    assert out[0].prompt == want
    tok = llm.get_tokenizer()
    ids = tok.encode(want, add_special_tokens=False)
    assert ids[0] == 1  # "<s>" is the BOS id: special tokens parsed, nothing added
    assert out[0].prompt_token_ids == ids
    same = llm.generate({"prompt_token_ids": ids}, sp)[0]
    assert out[0].outputs[0].token_ids == same.outputs[0].token_ids
    assert out[0].outputs[0].text == same.outputs[0].text
    assert tok.apply_chat_template(CONV, add_generation_prompt=True, tokenize=False) == want
    assert tok.apply_chat_template(CONV, add_generation_prompt=True) == ids
    assert tok.apply_chat_template(CONV, tokenize=False) == want[:-len("assistant:")]


def test_a_list_of_conversations_answers_each_in_order(llm):
    convs = [[{"role": "user", "content": f"Story {i}"}] for i in range(4)]
    outs = llm.chat(convs, SamplingParams(temperature=0, max_tokens=8),
                    add_generation_prompt=False)
    assert [o.prompt for o in outs] == [f"<s>user: Story {i}\n" for i in range(4)]


def test_tools_kwargs_and_a_template_per_call(llm):
    out = llm.chat(CONV, SamplingParams(max_tokens=4), chat_template=TOOLS_TEMPLATE,
                   tools=TOOLS, chat_template_kwargs={"greeting": "hi"})[0]
    assert out.prompt == "[1 tools: get_weather]hi|Be kind.Tell me a story about a cat.>"
    out = llm.chat(CONV, SamplingParams(max_tokens=4), chat_template=TOOLS_TEMPLATE)[0]
    assert out.prompt == "|Be kind.Tell me a story about a cat.>"


def test_template_errors(llm, stories):
    model, tok = stories
    with pytest.raises(FormatError, match="line 1"):
        llm.chat(CONV, chat_template="{% if %}")
    with pytest.raises(ValueError, match="no roles here"):
        llm.chat(CONV, chat_template="{{ raise_exception('no roles here') }}")
    with pytest.raises(TypeError, match="conversation"):
        llm.chat(["not a message"])
    with LLM(model, tokenizer=tok, threads=1) as plain:  # stories260K has no template
        with pytest.raises(NotFoundError, match="template"):
            plain.chat(CONV)
        assert plain.get_tokenizer().chat_template is None
    with pytest.raises(FormatError):
        LLM(model, tokenizer=tok, chat_template="{% for %}")
    # the engine still works after a refused chat
    assert llm.generate("The cat", SamplingParams(max_tokens=2))[0].finished


def test_llmengine_chat_requests(stories):
    model, tok = stories
    sp = SamplingParams(temperature=0, max_tokens=16)
    with LLMEngine(model, tokenizer=tok, chat_template=TEMPLATE, threads=1) as eng, \
            LLM(model, tokenizer=tok, chat_template=TEMPLATE, threads=1) as llm:
        eng.add_chat_request("c", CONV, sp)
        text = "".join(d.text for d in eng.stream())
        assert text == llm.chat(CONV, sp)[0].outputs[0].text


def fixture_cases(family):
    root = os.environ.get("PL_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(root, "tests", "data", "templates", f"{family}.expected.json"),
              encoding="utf-8") as f:
        return json.load(f)["cases"]


@pytest.mark.parametrize("family, folder", [("llama3-real", "llama3"), ("qwen3-real", "qwen3")])
def test_real_templates_render_as_the_oracle(family, folder):
    tok = Tokenizer.load(os.path.dirname(model_file(os.path.join(folder, "tokenizer.json"))))
    n = 0
    for case in fixture_cases(family):
        kwargs = dict(tools=case.get("tools"), add_generation_prompt=case["add_generation_prompt"],
                      chat_template_kwargs=case.get("extra"), tokenize=False)
        if "expect" in case:
            assert tok.apply_chat_template(case["messages"], **kwargs) == case["expect"], \
                case["name"]
            n += 1
        elif any(m.get("content", "") is None for m in case["messages"]):
            # the oracle fails on content null; the library gives it "" first, as vLLM does
            # (tests/e2e/test_e2e_chat.c checks those renderings)
            tok.apply_chat_template(case["messages"], **kwargs)
        else:
            with pytest.raises((ValueError, UnsupportedError)):
                tok.apply_chat_template(case["messages"], **kwargs)
    assert n > 20
    # tokenize=True: the text's ids with special tokens parsed and nothing added
    conv = [{"role": "user", "content": "Hello!"}]
    text = tok.apply_chat_template(conv, add_generation_prompt=True, tokenize=False)
    ids = tok.apply_chat_template(conv, add_generation_prompt=True)
    assert ids == tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text
    special = "<|im_start|>" if folder == "qwen3" else "<|eot_id|>"
    assert tok.convert_tokens_to_ids(special) in ids
    assert tok.convert_ids_to_tokens(tok.convert_tokens_to_ids(special)) == special
    tok.close()
