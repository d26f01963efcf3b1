"""Writes testdata/chattemplate/random_cases.json: random expressions over
Jinja's operators, filters, tests and str/dict/list methods, random
whitespace-control layouts (-, +, trim_blocks, lstrip_blocks, raw, comments)
and random statement nests for scoping (set, namespace, loops with filters,
else, break and continue, macros, with, set blocks), each with Python
jinja2's result as transformers configures it.

Left out, as deliberate differences: results that print a Python generator
or iterator (Jinja's lazy filters), expressions whose result depends on
Jinja's compile-time constant folding (it evaluates constant subscripts
leniently, so a constant bad slice prints "" where a variable one raises),
and ints beyond 64 bits."""
import copy
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(__file__))
import render  # noqa: E402

from jinja2 import meta  # noqa: E402
from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: E402

ATOMS = ["0", "1", "-3", "7", "2.0", "0.5", "-1.25", "1e20", "''", "'a'", "'Hello World'", "' x '", "'한🙂'", "'a,b'", "'AbC'",
         "[]", "[1, 2]", "['b', 'a']", "[{'k': 1}, {'k': 2}]", "{'a': 1, 'b': [1]}", "{}", "none", "true", "false", "u", "s", "l", "d", "n",
         "(1, 'x')"]
FILTERS = ["length", "string", "upper", "lower", "trim", "first", "last", "list", "sort", "join", "join(',')", "int", "float",
           "abs", "round", "round(1)", "tojson", "tojson(indent=1)", "default('D')", "default('D', true)", "capitalize", "title",
           "replace('a', 'X')", "sum", "min", "max", "count", "dictsort", "select('odd')|list", "reject('none')|list",
           "map('string')|list", "map(attribute='k')|list", "selectattr('k')|list", "indent(2)", "safe", "wordcount",
           "float(1.5)", "int(9)", "unique|list", "reverse|list", "items|list"]
TESTS = ["defined", "undefined", "none", "string", "number", "integer", "float", "mapping", "iterable", "sequence", "boolean", "true",
         "false", "odd", "even", "lower", "upper", "eq 1", "in [1, 'a']", "callable", "divisibleby 2", "gt 0"]
OPS = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "in", "not in", "and", "or"]
METHODS = ["strip()", "upper()", "split()", "split(',')", "startswith('a')", "endswith('b')", "replace('a', 'b')", "lstrip()",
           "rstrip()", "title()", "capitalize()", "find('a')", "count('a')", "get('a')", "keys()|list", "values()|list",
           "items()|list", "index(1)", "isdigit()", "splitlines()", "rsplit(none, 1)", "lower()"]
VARS = {"s": "Hi, there", "l": [3, 1, 2], "d": {"k": "v", "n": None}, "n": None}


def expr(d=0):
    r = random.random()
    if d > 2 or r < 0.25:
        return random.choice(ATOMS)
    if r < 0.45:
        return "(" + expr(d + 1) + ")|" + random.choice(FILTERS)
    if r < 0.6:
        return "(" + expr(d + 1) + ") " + random.choice(OPS) + " (" + expr(d + 1) + ")"
    if r < 0.7:
        return "(" + expr(d + 1) + ") is " + random.choice(["", "not "]) + random.choice(TESTS)
    if r < 0.78:
        return "(" + expr(d + 1) + ")." + random.choice(METHODS)
    if r < 0.8:
        return "(" + expr(d + 1) + ")[" + random.choice(["0", "-1", "'a'", "'k'"]) + "]"
    if r < 0.85:
        # Slices only of sequences: Jinja folds constant subexpressions
        # leniently, so a bad slice's result depends on what it can fold.
        return "(" + random.choice(["s", "l", "'Hello World'", "'한🙂'", "[1, 2]", "(1, 'x')", "s|upper", "l|sort"]) + ")[" + random.choice(["1:", ":-1", "::-1", "::2", "-2:", "5:"]) + "]"
    if r < 0.9:
        return "not (" + expr(d + 1) + ")"
    if r < 0.95:
        return "(" + expr(d + 1) + ") if (" + expr(d + 1) + ") else (" + expr(d + 1) + ")"
    return "[" + expr(d + 1) + ", " + expr(d + 1) + "]|tojson"


TEXTS = ["a", " ", "\n", "\t", "  \n  ", "\n\n", " b \n", "x\n  ", "\u3000", "\r\n", ""]


def text():
    return "".join(random.choice(TEXTS) for _ in range(random.randint(0, 3)))


def block(d=0):
    left = lambda: random.choice(["{%", "{%-", "{%+"])  # noqa: E731
    right = lambda: random.choice(["%}", "-%}", "+%}"])  # noqa: E731
    out = text()
    for _ in range(random.randint(1, 4)):
        k = random.random()
        if d < 3 and k < 0.25:
            out += left() + " if " + random.choice(["true", "false"]) + " " + right() + block(d + 1)
            if random.random() < 0.5:
                out += left() + " else " + right() + block(d + 1)
            out += left() + " endif " + right()
        elif d < 3 and k < 0.4:
            out += left() + " for i in [1, 2] " + right() + block(d + 1) + left() + " endfor " + right()
        elif k < 0.6:
            out += random.choice(["{{", "{{-"]) + " " + random.choice(["'x'", "i | default('u')", "'\\n'", "' '"]) + " " + random.choice(["}}", "-}}"])
        elif k < 0.7:
            out += random.choice(["{#", "{#-"]) + " c " + random.choice(["#}", "-#}", "+#}"])
        elif k < 0.8:
            out += left() + " set y = 1 " + right()
        elif k < 0.85:
            out += left() + " raw " + random.choice(["%}", "-%}"]) + text() + "{{ z }}" + text() + left() + " endraw " + right()
        out += text()
    return out


SCOPE_VALUES = ["x", "y", "i", "1", "'a'", "ns.c", "loop.index", "x ~ '+'", "(x|string) ~ y", "m1()", "m2(x)", "z is defined",
                "ns.c + 1"]


def scoped(d=0):
    """A statement for the scoping family: set, namespaces, loops (with
    filters, else, break, continue), if, macros, with, set blocks."""
    k = random.random()
    val = lambda: random.choice(SCOPE_VALUES)  # noqa: E731
    body = lambda: "".join(scoped(d + 1) for _ in range(random.randint(1, 4)))  # noqa: E731
    if k < 0.25:
        return "{% set " + random.choice(["x", "y", "i", "z"]) + " = " + val() + " %}"
    if k < 0.35:
        return "{% set ns.c = " + random.choice(["ns.c + 1", "x", "1"]) + " %}"
    if k < 0.55:
        return "[{{ " + val() + " }}]"
    if d < 3 and k < 0.7:
        return ("{% for " + random.choice(["i", "x", "j"]) + " in " + random.choice(["[1, 2]", "range(3)", "'ab'", "[]"]) +
                (" if " + val() if random.random() < 0.2 else "") + " %}" + body() +
                ("{% else %}" + body() if random.random() < 0.2 else "") + "{% endfor %}")
    if d < 3 and k < 0.82:
        return "{% if " + val() + " %}" + body() + ("{% else %}" + body() if random.random() < 0.5 else "") + "{% endif %}"
    if d < 3 and k < 0.88:
        return "{% macro m" + random.choice(["1", "2"]) + "(x=" + random.choice(["1", "y", "'d'"]) + ") %}" + body() + "{% endmacro %}"
    if d < 3 and k < 0.92:
        return "{% with y = " + val() + " %}" + body() + "{% endwith %}"
    if k < 0.96:
        return "{% if " + val() + " %}{% " + random.choice(["break", "continue"]) + " %}{% endif %}"
    return "{% set " + random.choice(["x", "y", "i"]) + " %}" + body() + "{% endset %}"


def run(env, src, kwargs):
    try:
        return {"text": env.from_string(src).render(**copy.deepcopy(kwargs))}
    except Exception as e:  # the Go side must fail too
        return {"error": type(e).__name__ + ": " + str(e)}


LAZY = ("<generator", "iterator object", "reversed object", "dict_values(", "dict_keys(", "dict_items(", "generator")


def main(out):
    env = render.environment()
    unfolded = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, optimized=False,
                                             extensions=[render.AssistantTracker, "jinja2.ext.loopcontrols"])
    unfolded.filters["tojson"] = render.tojson
    unfolded.globals.update(env.globals)
    base = {"messages": [], "tools": None, "documents": None, "add_generation_prompt": False}
    cases = []
    random.seed(8)
    while len(cases) < 600:
        src = "{{ " + expr() + " }}"
        if not meta.find_undeclared_variables(env.parse(src)):
            continue  # an all-constant output is evaluated at compile time
        kwargs = dict(base, **VARS)
        res = run(env, src, kwargs)
        if res != run(unfolded, src, kwargs):
            continue  # constant folding decides the result
        shown = res["text"] if "text" in res else res["error"]
        if any(m in shown for m in LAZY) or "1e20" in src and "int" in src:
            continue
        cases.append({"template": src, **res})
    random.seed(9)
    for _ in range(400):
        src = block()
        cases.append({"template": src, **run(env, src, base)})
    random.seed(10)
    scope_cases = 0
    while scope_cases < 400:
        src = ("{% set ns = namespace(c=0) %}{% set x = 'X' %}{% set y = 'Y' %}" +
               "".join(scoped() for _ in range(random.randint(1, 4))) + "|{{ x }}{{ y }}{{ ns.c }}{{ z is defined }}")
        res = run(env, src, base)
        if "error" in res and res["error"].startswith("SyntaxError"):
            continue  # break or continue outside a loop: fails in both
        cases.append({"template": src, **res})
        scope_cases += 1
    with open(os.path.join(out, "random_cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"random cases: {sum(1 for c in cases if 'text' in c)} rendered, {sum(1 for c in cases if 'error' in c)} errors")


if __name__ == "__main__":
    main(sys.argv[1])
