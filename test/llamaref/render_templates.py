#!/usr/bin/python3
"""Render every llama.cpp reference chat template with Python's jinja2.

The environment copies what Hugging Face transformers' apply_chat_template
builds: an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
the loopcontrols extension and its {% generation %} tag, a tojson filter that keeps non-ASCII text
(ensure_ascii=False) and takes indent, and the raise_exception and
strftime_now globals. strftime_now formats a fixed date so that the output is
reproducible; engine/chattmpl uses the same date.

Usage: /usr/bin/python3 render_templates.py TEMPLATE_DIR CONVERSATIONS_JSON
       /usr/bin/python3 render_templates.py --snippets SNIPPETS_JSON CONVERSATIONS_JSON

CONVERSATIONS_JSON is the file engine/chattmpl's conformance test writes: a
list of {"name", "messages", "add_generation_prompt"} and optionally
"tools" (absent: tools=None, as transformers passes when there are none).
The result, on stdout, is a JSON list of {"template", "conversation", "output"} or
{"template", "conversation", "error"} (the exception text), in template
then conversation order.

With --snippets, the templates are SNIPPETS_JSON's list of {"name",
"template"} instead of TEMPLATE_DIR's *.jinja files.
"""

import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

# The date strftime_now formats; engine/chattmpl.FixedNow must agree.
FIXED_NOW = datetime.datetime(2026, 1, 15, 9, 5, 7)
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"


class AssistantTracker(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %} block.

    transformers uses it to mark the assistant's tokens; the rendered text is
    the body, unchanged, which is all that matters here.
    """

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_render_assistant", [])
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_assistant(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # As transformers: json.dumps with ensure_ascii off; unlike jinja2's own
    # tojson it does not HTML-escape.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def templates(args):
    """Yields (name, source) pairs."""
    if args[0] == "--snippets":
        with open(args[1], encoding="utf-8") as f:
            for s in json.load(f):
                yield s["name"], s["template"]
        return
    for name in sorted(os.listdir(args[0])):
        if name.endswith(".jinja"):
            with open(os.path.join(args[0], name), encoding="utf-8") as f:
                yield name[:-len(".jinja")], f.read()


def main():
    convfile = sys.argv[-1]
    with open(convfile, encoding="utf-8") as f:
        convs = json.load(f)
    env = environment()
    results = []
    for name, src in templates(sys.argv[1:-1]):
        tmpl, compile_err = None, None
        try:
            tmpl = env.from_string(src)
        except Exception as e:  # noqa: BLE001 - any failure is a result
            compile_err = "%s: %s" % (type(e).__name__, e)
        for conv in convs:
            r = {"template": name, "conversation": conv["name"]}
            if compile_err is not None:
                r["error"] = compile_err
            else:
                try:
                    # transformers passes tools and documents as None when
                    # there are none.
                    r["output"] = tmpl.render(
                        messages=conv["messages"],
                        tools=conv.get("tools"),
                        documents=None,
                        add_generation_prompt=conv["add_generation_prompt"],
                        bos_token=BOS_TOKEN,
                        eos_token=EOS_TOKEN)
                except Exception as e:  # noqa: BLE001
                    r["error"] = "%s: %s" % (type(e).__name__, e)
            results.append(r)
    json.dump(results, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
