"""The package's own structure: modules import each other at the top only
(no import inside a function: no hidden circle), none takes another's
underscore names, and the mask keyword table of _masks.py covers every
field of the C attn_mask and every mask keyword of the public functions."""

import ast
import inspect
import os

import attn
from attn import _lib, _masks

PKG = os.path.dirname(attn.__file__)
MODULES = sorted(f for f in os.listdir(PKG) if f.endswith(".py"))


def trees():
    for f in MODULES:
        with open(os.path.join(PKG, f)) as fh:
            yield f, ast.parse(fh.read(), f)


def test_imports_are_at_module_level_only():
    late = []
    for f, tree in trees():
        top = set(map(id, tree.body))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                late.append("%s:%d" % (f, node.lineno))
    assert not late, "imports inside functions: %s" % late


def test_no_module_takes_another_modules_underscore_names():
    bad = []
    for f, tree in trees():
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                bad += ["%s imports %s.%s" % (f, node.module, a.name)
                        for a in node.names if a.name.startswith("_")]
        imported = {a.asname or a.name for node in tree.body
                    if isinstance(node, ast.ImportFrom) and node.level == 1
                    and node.module is None for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and \
                    not node.attr.startswith("__") and \
                    isinstance(node.value, ast.Name) and node.value.id in imported:
                bad.append("%s:%d uses %s.%s" % (f, node.lineno, node.value.id,
                                                 node.attr))
    assert not bad, bad


def test_the_import_graph_has_no_cycle():
    graph = {}
    for f, tree in trees():
        deps = set()
        for node in ast.walk(tree):  # lazy imports count too
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0] + ".py")
                else:
                    deps.update(a.name + ".py" for a in node.names)
        graph[f] = deps - {f}
    seen, stack = set(), []

    def visit(n):
        assert n not in stack, "import cycle: %s" % " -> ".join(stack + [n])
        if n in seen:
            return
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            visit(d)
        stack.pop()
        seen.add(n)
    for n in graph:
        visit(n)


def test_mask_keyword_table_covers_the_c_mask():
    fields = {name for name, _ in _lib.Mask._fields_}
    named = set(_masks.NOT_KEYWORDS)
    for kw, fs in _masks.KEYWORDS.items():
        unknown = set(fs) - fields
        assert not unknown, "%s fills %s, not fields of attn_mask" % (kw, unknown)
        named |= set(fs)
    missing = fields - named
    assert not missing, "attn_mask fields no keyword fills: %s" % sorted(missing)


def test_mask_keywords_are_taken_where_the_table_says():
    # MaskArgs takes each keyword (the score modifiers through score_mods)
    taken = set(inspect.signature(_masks.MaskArgs).parameters) | \
        set(inspect.signature(_masks.MaskArgs.score_mods).parameters)
    assert set(_masks.KEYWORDS) <= taken, set(_masks.KEYWORDS) - taken
    # and the public functions take every one of them
    for fn in (attn.scaled_dot_product_attention, attn.sdpa_backward):
        params = set(inspect.signature(fn).parameters)
        assert set(_masks.KEYWORDS) <= params, (fn.__name__,
                                                set(_masks.KEYWORDS) - params)
