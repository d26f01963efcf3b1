"""Renders testdata/chattemplate/cases.json with every template in
testdata/chattemplate/templates/ the way transformers' apply_chat_template
does (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols,
tojson without ASCII escaping, raise_exception, strftime_now) and writes
golden/<template>.json. strftime_now reads a fixed clock (FIXED_NOW) that the
Go tests use as well."""
import datetime
import glob
import json
import os
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2026, 3, 7, 9, 5, 4)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


class AssistantTracker(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def continue_final(rendered, chat):
    """transformers' continue_final_message post-processing."""
    final_message = chat[-1]["content"]
    if isinstance(final_message, (list, tuple)):
        for content_block in reversed(final_message):
            if "text" in content_block:
                final_message = content_block["text"]
                break
        else:
            raise ValueError("continue_final_message is set but we could not find any text to continue in the final message!")
    if final_message.strip() not in rendered:
        raise ValueError("continue_final_message is set but the final message does not appear in the chat")
    final_msg_loc = rendered.rindex(final_message.strip())
    if rendered[final_msg_loc: final_msg_loc + len(final_message.lstrip())] == final_message:
        return rendered[: final_msg_loc + len(final_message.lstrip())]
    return rendered[: final_msg_loc + len(final_message.strip())]


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main(out):
    cases = json.load(open(os.path.join(out, "cases.json"), encoding="utf-8"))
    # The benchmark's ~8k-token request is a case too.
    long_request = json.load(open(os.path.join(out, "long_request.json"), encoding="utf-8"))
    cases.append(dict(long_request, name="long_request"))
    env = environment()
    os.makedirs(os.path.join(out, "golden"), exist_ok=True)
    for path in sorted(glob.glob(os.path.join(out, "templates", "*.jinja"))):
        name = os.path.basename(path)[: -len(".jinja")]
        src = open(path, encoding="utf-8", newline="").read()
        tokens_path = path[: -len(".jinja")] + ".tokens.json"
        tokens = json.load(open(tokens_path, encoding="utf-8")) if os.path.exists(tokens_path) else {}
        tmpl = env.from_string(src)
        results = {}
        for case in cases:
            kwargs = dict(tokens)
            kwargs.update(case.get("extra", {}))
            try:
                if case.get("continue_final_message") and case.get("add_generation_prompt"):
                    raise ValueError("continue_final_message and add_generation_prompt are not compatible")
                text = tmpl.render(
                    messages=case["messages"],
                    tools=case.get("tools"),
                    documents=case.get("documents"),
                    add_generation_prompt=case.get("add_generation_prompt", False),
                    **kwargs,
                )
                if case.get("continue_final_message"):
                    text = continue_final(text, case["messages"])
                results[case["name"]] = {"text": text}
            except Exception as e:  # the Go side must fail too
                results[case["name"]] = {"error": type(e).__name__ + ": " + str(e)}
        with open(os.path.join(out, "golden", name + ".json"), "w", encoding="utf-8") as f:
            json.dump(results, f, ensure_ascii=False, indent=1)
            f.write("\n")
        ok = sum(1 for r in results.values() if "text" in r)
        print(f"{name}: {ok} rendered, {len(results) - ok} errors")


def features(out):
    """Renders features.json (one small template per Jinja feature) into
    features_table.json."""
    env = environment()
    cases = json.load(open(os.path.join(out, "features.json"), encoding="utf-8"))
    results = {}
    for case in cases:
        try:
            tmpl = env.from_string(case["template"])
            # As apply_chat_template: messages, tools and add_generation_prompt
            # are always passed.
            kwargs = {"messages": [], "tools": None, "documents": None, "add_generation_prompt": False}
            kwargs.update(case.get("vars", {}))
            results[case["name"]] = {"text": tmpl.render(**kwargs)}
        except Exception as e:
            results[case["name"]] = {"error": type(e).__name__ + ": " + str(e)}
    with open(os.path.join(out, "features_table.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"features: {sum(1 for r in results.values() if 'text' in r)} rendered, {sum(1 for r in results.values() if 'error' in r)} errors")


if __name__ == "__main__":
    main(sys.argv[1])
    features(sys.argv[1])
