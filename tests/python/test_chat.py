"""tests/python/test_chat.py — einsummable.chat (issue 37): chat templates in
the styles of Llama 3, Llama 3.1 (tools, tojson, strftime_now) and Mistral,
written here, rendered with Jinja2 under transformers' conventions; the
expected prompts of the simple ones are written out by hand, and all are
compared with @huggingface/jinja (the JavaScript Jinja of transformers.js)
where it is installed (npm ci --prefix tests/js)."""

import datetime
import json
import os

import pytest

import tokgen
from einsummable import EinError
from einsummable.chat import ChatTemplate, ChatTemplateError
from einsummable.tokenizer import Tokenizer

pytest.importorskip("jinja2", reason="python3-jinja2 is not installed")

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}")

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}")

# Multi-line, with whitespace control, trim_blocks/lstrip_blocks at work,
# tools through tojson, strftime_now and a system message.
LLAMA31 = """{{- bos_token }}
{%- if not date_string is defined %}
    {%- set date_string = strftime_now("%d %b %Y") %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {%- for t in tools %}
        {{- t | tojson }}
        {{- "\\n\\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role == 'tool' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\\n\\n" + message.content | tojson + "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# trim_blocks / lstrip_blocks without "-": the newline after a block tag and
# the indentation before it go.
PLAIN_BLOCKS = """{% for m in messages %}
    {% if m.role == 'user' %}
U: {{ m.content }}
    {% else %}
A: {{ m.content }}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}A:{% endif %}"""

L3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
MI = {"bos_token": "<s>", "eos_token": "</s>"}

CHATS = [
    [{"role": "user", "content": "Hi"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
     {"role": "user", "content": "  Tell me about 東京 and émojis 😀\n"}],
    [{"role": "user", "content": "a <b> & \"c\" 'd'"}, {"role": "assistant", "content": "ok"}],
]


def test_llama3_by_hand():
    ct = ChatTemplate({"default": LLAMA3}, L3)
    assert ct.render(CHATS[0], add_generation_prompt=True) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert ct.render(CHATS[1]) == (
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nTell me about 東京 and émojis 😀<|eot_id|>")


def test_mistral_by_hand():
    ct = ChatTemplate({"default": MISTRAL}, MI)
    assert ct.render(CHATS[1]) == (
        "<s>[INST] Hi [/INST]Hello!</s>[INST]   Tell me about 東京 and émojis 😀\n [/INST]")
    with pytest.raises(ChatTemplateError, match="roles must alternate"):
        ct.render([{"role": "assistant", "content": "x"}])
    with pytest.raises(EinError, match="Only user and assistant"):
        ct.render([{"role": "user", "content": "x"}, {"role": "system", "content": "y"}])


def test_llama31_tools_and_date():
    ct = ChatTemplate({"default": LLAMA31}, L3)
    tools = [{"name": "get_weather", "parameters": {"city": {"type": "string",
                                                             "description": "Ville <où> il fait"}}}]
    out = ct.render([{"role": "system", "content": " Be brief. "}] + CHATS[0], tools=tools,
                    add_generation_prompt=True)
    today = datetime.datetime.now().strftime("%d %b %Y")
    assert out == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
        "Environment: ipython\nToday Date: " + today + "\n\n" +
        json.dumps(tools[0], ensure_ascii=False) + "\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert "<où>" in out  # tojson: no \\u escapes, no HTML escaping
    assert ct.render(CHATS[0], date_string="26 Jul 2024").count("26 Jul 2024") == 1


def test_plain_blocks():
    ct = ChatTemplate({"default": PLAIN_BLOCKS}, {})
    assert ct.render(CHATS[1][:2], add_generation_prompt=True) == "U: Hi\nA: Hello!\nA:"


def test_sandbox_and_errors():
    ct = ChatTemplate({"default": "{{ messages.append(1) }}"}, {})
    with pytest.raises(ChatTemplateError, match="sandbox|unsafe|immutable|not safely"):
        ct.render(CHATS[0])
    ct = ChatTemplate({"default": "{{ ''.__class__.__mro__ }}"}, {})
    with pytest.raises(ChatTemplateError):
        ct.render(CHATS[0])
    with pytest.raises(ChatTemplateError, match="line 1"):
        ChatTemplate({"default": "{% if %}"}, {}).render(CHATS[0])
    with pytest.raises(EinError, match="no chat_template"):
        ChatTemplate.from_config({"bos_token": "<s>"})
    with pytest.raises(EinError, match="messages must be"):
        ChatTemplate({"default": LLAMA3}, L3).render("Hi")


def test_named_templates_and_files(tmp_path):
    cfg = {"chat_template": [{"name": "default", "template": "D{{ bos_token }}"},
                             {"name": "tool_use", "template": "T{{ tools | length }}"}],
           "bos_token": {"content": "<s>", "lstrip": False}}
    ct = ChatTemplate.from_config(cfg)
    assert ct.render(CHATS[0]) == "D<s>"
    assert ct.render(CHATS[0], tools=[{"name": "f"}]) == "T1"
    with open(tmp_path / "tokenizer_config.json", "w") as f:
        json.dump({"chat_template": LLAMA3, "bos_token": "<|begin_of_text|>"}, f)
    assert ChatTemplate.from_dir(str(tmp_path)).render(CHATS[0]).startswith("<|begin_of_text|>")
    (tmp_path / "chat_template.jinja").write_text("J{{ messages | length }}")
    assert ChatTemplate.from_dir(str(tmp_path)).render(CHATS[1]) == "J3"


def test_prompt_tokens(tmp_path):
    """A rendered Llama 3 prompt encodes with its specials as single ids and
    one bos (add_special_tokens=False: the template wrote it)."""
    texts = tokgen.corpus(200, 3)
    tok = Tokenizer.from_str(json.dumps(tokgen.bytelevel(texts, 100, "llama3")))
    ids = tok.encode(ChatTemplate({"default": LLAMA3}, L3).render(CHATS[1], True),
                     add_special_tokens=False)
    bos = tok.token_to_id("<|begin_of_text|>")
    assert ids[0] == bos and ids.count(bos) == 1
    assert ids.count(tok.token_to_id("<|eot_id|>")) == 3
    assert ids.count(tok.token_to_id("<|start_header_id|>")) == 4


def test_against_jinja_js(tmp_path):
    """The same prompts from @huggingface/jinja, transformers.js's Jinja."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("sanitizer run: this comparison runs no C code of ours (einsummable.chat is "
                    "Python on jinja2, the reference JavaScript); the plain run makes it")
    cases = []
    for tpl, toks in ((LLAMA3, L3), (MISTRAL, MI), (LLAMA31, L3), (PLAIN_BLOCKS, {})):
        for chat in CHATS:
            for gen in (False, True):
                ctx = dict(toks, messages=chat, add_generation_prompt=gen,
                           date_string="26 Jul 2024", tools=None)
                cases.append((tpl, ctx))
    ctx = dict(L3, messages=CHATS[0], add_generation_prompt=True, date_string="1 Jan 2025",
               tools=[{"name": "f", "parameters": {"x": {"type": "integer"}}}])
    cases.append((LLAMA31, ctx))
    out = run_js_chats(cases, tmp_path)
    for (tpl, ctx), ref in zip(cases, out):
        c = {k: v for k, v in ctx.items() if k not in ("messages", "add_generation_prompt",
                                                       "tools")}
        mine = ChatTemplate({"default": tpl}, {}).render(
            ctx["messages"], add_generation_prompt=ctx["add_generation_prompt"],
            tools=ctx["tools"], **c)
        assert mine == ref, (tpl[:40], ctx, mine, ref)


def run_js_chats(cases, tmp_path):
    out = tokgen.run_js({"chats": [{"template": t, "context": c} for t, c in cases]}, tmp_path)
    if "jinja" not in out["engines"]:
        pytest.skip("@huggingface/jinja is not installed (npm ci --prefix tests/js)")
    errs = [o for o in out["chats"] if isinstance(o, dict)]
    assert not errs, errs[:3]
    return out["chats"]
