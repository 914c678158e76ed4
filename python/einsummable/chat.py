"""einsummable.chat — a checkpoint's chat template (tokenizer_config.json's
"chat_template", or chat_template.jinja beside it) rendered with Jinja2
(Debian: python3-jinja2) the way transformers' apply_chat_template does
(docs/tokenizer.md):

    from einsummable.chat import ChatTemplate
    ct = ChatTemplate.from_dir("Llama-3-8B-Instruct")
    prompt = ct.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    ids = tokenizer.encode(prompt, add_special_tokens=False)   # the template wrote the bos

transformers' conventions: an immutable sandboxed environment with
trim_blocks and lstrip_blocks and the loop controls extension; the globals
raise_exception(msg) (raises ChatTemplateError) and strftime_now(fmt); the
filter tojson as json.dumps (ensure_ascii off, no HTML escaping); the
variables messages, add_generation_prompt, tools, documents, bos_token,
eos_token, unk_token, pad_token, and any extra keyword given to render();
the {% generation %} block renders its body. A chat_template list of named
templates selects "default", or "tool_use" when tools are given and it
exists.
"""

import datetime
import json
import os
from typing import Any, Dict, List, Optional

from ._errors import EIN_EINVAL, EIN_EPARSE, EIN_EUNSUPPORTED, EinError, EinValueError


class ChatTemplateError(EinValueError):
    """raise_exception() in a template, what the sandbox refuses, or a
    template Jinja rejects (.code EIN_EINVAL, .message the reason)."""


def _jinja():
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError:
        raise EinError(EIN_EUNSUPPORTED, "chat templates need Jinja2 (Debian: python3-jinja2)") \
            from None
    return jinja2


def _token_str(v):
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _compile(source: str):
    jinja2 = _jinja()
    from jinja2 import nodes

    class _Generation(jinja2.ext.Extension):
        """{% generation %}...{% endgeneration %}: transformers marks the
        assistant's part with it; here the body is rendered as it is."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise ChatTemplateError(EIN_EINVAL, str(message))

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[_Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(EIN_EINVAL, "chat template: line %s: %s" % (e.lineno, e.message)) \
            from None


class ChatTemplate:
    """One or more named chat templates and the special tokens they see."""

    def __init__(self, templates: Dict[str, str], special_tokens: Optional[Dict[str, Any]] = None):
        if not templates:
            raise EinError(EIN_EINVAL, "chat template: none given")
        self.templates = dict(templates)
        self.special_tokens = {k: _token_str(v) for k, v in (special_tokens or {}).items()}
        self._compiled: Dict[str, Any] = {}

    @classmethod
    def from_config(cls, config: Dict[str, Any], jinja_file: Optional[str] = None
                    ) -> "ChatTemplate":
        """From a parsed tokenizer_config.json (and the text of a
        chat_template.jinja, which wins over the config's, as in
        transformers)."""
        ct = config.get("chat_template")
        if jinja_file is not None:
            templates = {"default": jinja_file}
        elif isinstance(ct, str):
            templates = {"default": ct}
        elif isinstance(ct, list):
            templates = {}
            for t in ct:
                if not (isinstance(t, dict) and isinstance(t.get("name"), str) and
                        isinstance(t.get("template"), str)):
                    raise EinError(EIN_EPARSE, "tokenizer_config.json: chat_template list items "
                                   "must be {\"name\": ..., \"template\": ...}")
                templates[t["name"]] = t["template"]
        elif ct is None:
            raise EinError(EIN_EINVAL, "tokenizer_config.json has no chat_template (a base "
                           "model, not a chat model?)")
        else:
            raise EinError(EIN_EPARSE, "tokenizer_config.json: chat_template must be a string "
                           "or a list of named templates")
        toks = {k: config.get(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
        return cls(templates, toks)

    @classmethod
    def from_dir(cls, folder: str) -> "ChatTemplate":
        """From a checkpoint folder: tokenizer_config.json and, where it
        exists, chat_template.jinja."""
        folder = os.fspath(folder)
        path = os.path.join(folder, "tokenizer_config.json")
        cfg: Dict[str, Any] = {}
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                try:
                    cfg = json.load(f)
                except ValueError as e:
                    raise EinError(EIN_EPARSE, "%s: %s" % (path, e)) from None
            if not isinstance(cfg, dict):
                raise EinError(EIN_EPARSE, "%s: not a JSON object" % path)
        jpath = os.path.join(folder, "chat_template.jinja")
        jinja_file = None
        if os.path.isfile(jpath):
            with open(jpath, encoding="utf-8") as f:
                jinja_file = f.read()
        elif not os.path.isfile(path):
            raise EinError(EIN_EINVAL, "%s: no tokenizer_config.json or chat_template.jinja"
                           % folder)
        return cls.from_config(cfg, jinja_file)

    def render(self, messages: List[Dict[str, Any]], add_generation_prompt: bool = False,
               tools: Optional[List[Any]] = None, documents: Optional[List[Any]] = None,
               template: Optional[str] = None, **kwargs: Any) -> str:
        """The prompt text for `messages` (a list of {"role", "content", ...}).
        Encode it with add_special_tokens=False: the template writes the bos."""
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise EinError(EIN_EINVAL, "chat template: messages must be a list of dicts")
        name = template or ("tool_use" if tools and "tool_use" in self.templates else "default")
        if name not in self.templates:
            if template is None and len(self.templates) == 1:
                name = next(iter(self.templates))
            else:
                raise EinError(EIN_EINVAL, "chat template %r not found (the checkpoint has %s)"
                               % (name, ", ".join(sorted(self.templates))))
        if name not in self._compiled:
            self._compiled[name] = _compile(self.templates[name])
        ctx: Dict[str, Any] = dict(self.special_tokens)
        ctx.update(kwargs)
        ctx.update(messages=messages, tools=tools, documents=documents,
                   add_generation_prompt=bool(add_generation_prompt))
        jinja2 = _jinja()
        try:
            return self._compiled[name].render(**ctx)
        except jinja2.exceptions.SecurityError as e:
            raise ChatTemplateError(EIN_EINVAL, "chat template: refused by the sandbox: %s" % e) \
                from None
        except jinja2.TemplateError as e:
            raise ChatTemplateError(EIN_EINVAL, "chat template: %s" % e) from None
