"""The package's layers point one way: a module imports only modules of its own layer or of a layer
below, and no modules import each other in a circle.

The import graph is read from the sources with ``ast`` (nothing is imported): every ``import`` and
``from … import`` of a ``pyllama_spec`` module, absolute or relative, at module level or inside a
function. Imports under ``if TYPE_CHECKING:`` are left out: they name types for the checker and are
never run. ``from pkg import name`` is an edge to the module ``pkg.name`` when there is one, else to
``pkg`` (its ``__init__``).
"""
from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

PACKAGE = "pyllama_spec"
# the package that the tests import (the source tree, or an installed wheel when the tests run from a copy,
# as benchmarks/h200.sh does): found without importing it
ROOT = Path(importlib.util.find_spec(PACKAGE).origin).parent

#: The layers, bottom to top (the README's "What is in the box" lists them in this order). A module
#: may import modules of its own layer (without a circle) and of the layers below it. An entry names
#: a module or a package (then it holds the package and every module under it that no more specific
#: entry names); ``__init__`` is the package's own ``__init__.py``.
LAYERS: list[tuple[str, list[str]]] = [
    ("foundation: the exception tree, argument checks, atomic file writes, locks, the log ring, settings values",
     ["_pin", "_version", "_logring", "errors", "_check", "_files", "_locks", "_bin", "sampling_params"]),
    ("GGUF files in Python: the header reader, the test models' writers, reduced draft vocabularies, the shipped "
     "assets", ["gguf_file", "fixtures", "drafter_fixtures", "draft_vocab", "assets"]),
    ("the cffi binding", ["_native", "_llama", "_ffi"]),
    ("process-wide llama.cpp state: init, log routing, the device table", ["backend"]),
    ("wrappers that own llama.cpp objects",
     ["rpc", "placement", "vocab", "model", "pairing", "batch", "memory", "sampler", "chat", "context"]),
    ("the loop's numpy parts: settings, sampling and verify math, statistics, timing, the cost model",
     ["speculative.config", "speculative.sampling", "speculative.verify", "speculative.stats",
      "speculative.timing", "speculative.costmodel", "speculative.tree", "speculative.tree_verify"]),
    ("drafters", ["speculative.drafters"]),
    ("the loops and their report; llama.cpp's reference programs",
     ["speculative.loop", "speculative.tree_step", "speculative.batch_loop", "speculative.report", "speculative",
      "native"]),
    ("sessions: the Generator, its batches and the caches it keeps; drafter arguments as text; where runs part",
     ["cache_reuse", "batching", "generator", "drafter_specs", "divergence"]),
    ("the bake-off", ["study"]),
    ("the package's public names", ["__init__"]),
    ("command lines and drafter training", ["cli", "train"]),
]


def _modules() -> dict[str, Path]:
    """``{dotted name relative to the package: file}``; a package's ``__init__.py`` is the package."""
    out = {}
    for p in sorted(ROOT.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts) or "__init__"] = p
    return out


def _layer_of(mod: str) -> int | None:
    """The index of the layer whose most specific entry covers ``mod`` (None: no entry does)."""
    best, best_len = None, -1
    for i, (_, entries) in enumerate(LAYERS):
        for e in entries:
            if (mod == e or (e != "__init__" and mod.startswith(e + "."))) and len(e) > best_len:
                best, best_len = i, len(e)
    return best


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` bodies (not their ``else``)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for stmt in node.body:
                out.update(id(n) for n in ast.walk(stmt))
    return out


def _imports(mod: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """``[(imported module, line)]`` of the package modules ``mod`` imports (TYPE_CHECKING left out)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = _type_checking_nodes(tree)
    is_pkg = path.name == "__init__.py"
    here = [] if mod == "__init__" else mod.split(".")
    package = here if is_pkg else here[:-1]  # what a relative import is relative to

    def known(parts: list[str]) -> str:
        # the longest prefix that is a module of ours ("__init__" for the package itself)
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if name in modules:
                return name
        return "__init__"

    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE:
                    out.append((known(parts[1:]), node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - (node.level - 1)] if node.level > 1 else list(package)
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == PACKAGE:
                parts = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:
                sub = ".".join(parts + [alias.name])
                out.append((sub if sub in modules else known(parts), node.lineno))
    return [(m, line) for m, line in out if m != mod]


def _graph() -> tuple[dict[str, Path], dict[str, list[tuple[str, int]]]]:
    modules = _modules()
    modules_and_ext = dict(modules)
    modules_and_ext.setdefault("_llama", ROOT / "_llama")  # the compiled extension (no .py file)
    return modules, {m: _imports(m, p, modules_and_ext) for m, p in modules.items()}


def _where(modules: dict[str, Path], mod: str, line: int) -> str:
    return f"{modules[mod].relative_to(ROOT.parent)}:{line}"


def test_every_module_has_a_layer_and_every_entry_a_module():
    modules = _modules()
    missing = sorted(m for m in modules if _layer_of(m) is None)
    assert not missing, f"modules in no layer of tests/test_layers.py LAYERS (add each where it belongs): {missing}"
    stale = [e for _, entries in LAYERS for e in entries
             if e != "_llama" and not any(m == e or m.startswith(e + ".") for m in modules)]
    assert not stale, f"LAYERS names modules that do not exist: {stale}"


def test_no_import_points_up_a_layer():
    modules, graph = _graph()
    bad = []
    for mod, edges in graph.items():
        lo = _layer_of(mod)
        for target, line in edges:
            hi = _layer_of(target)
            if lo is not None and hi is not None and hi > lo:
                bad.append(f"{_where(modules, mod, line)}: {mod} (layer {lo}, {LAYERS[lo][0]}) imports {target} "
                           f"(layer {hi}, {LAYERS[hi][0]})")
    assert not bad, ("imports from a lower layer to a higher one (move the name down, or pass it in):\n  "
                     + "\n  ".join(bad))


def test_no_import_circle():
    modules, graph = _graph()
    lines = {(m, t): line for m, edges in graph.items() for t, line in edges}
    succ = {m: sorted({t for t, _ in edges if t in graph}) for m, edges in graph.items()}
    # Tarjan's strongly connected components, iteratively; a component of two or more is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in sorted(succ):
        if root in index:
            continue
        work = [(root, iter(succ[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    circles.append(sorted(comp))
    msgs = []
    for comp in circles:  # one shortest circle through the component's first module, edge by edge
        start, inside = comp[0], set(comp)
        prev: dict[str, str] = {}  # breadth first from start, until start is reached again
        frontier = [start]
        while start not in prev and frontier:
            nxt = []
            for v in frontier:
                for w in succ[v]:
                    if w in inside and w not in prev:
                        prev[w] = v
                        nxt.append(w)
            frontier = nxt
        path = [start, prev[start]]
        while path[-1] != start:
            path.append(prev[path[-1]])
        path.reverse()
        edges = [f"{_where(modules, a, lines[a, b])}: {a} imports {b}" for a, b in zip(path, path[1:])]
        msgs.append(f"{len(comp)} modules, e.g.:\n    " + "\n    ".join(edges))
    assert not circles, "import circles (break each at the edge that points up):\n  " + "\n  ".join(msgs)


def test_the_check_sees_relative_function_local_and_type_checking_imports(tmp_path):
    """The reader itself: relative and function-local imports are edges, TYPE_CHECKING ones are not."""
    src = tmp_path / "m.py"
    src.write_text("from typing import TYPE_CHECKING\nfrom . import errors\nif TYPE_CHECKING:\n"
                   "    from .generator import Generator\nelse:\n    import pyllama_spec.cli\n"
                   "def f():\n    from .speculative.drafters import Draft\n")
    modules = _modules()
    assert sorted(_imports("backend", src, modules)) == [("cli", 6), ("errors", 2), ("speculative.drafters", 8)]
    # in a subpackage, ".." climbs one package; "from . import x" is the module x when there is one
    src.write_text("from ..timing import StageTimer\nfrom . import base\nfrom ... import errors\n")
    assert sorted(_imports("speculative.drafters.ngram", src, modules)) == [
        ("errors", 3), ("speculative.drafters.base", 2), ("speculative.timing", 1)]
