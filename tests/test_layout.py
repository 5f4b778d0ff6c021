"""The shape of the code: no import cycle between the modules of decoding/, cllm/ and viz/, nor
between the pages and their helpers in app_pages/ (imports inside functions included), no long
function in decoding/, cllm/ and viz/, and a trace module that knows no method by name (it reads
the registry).

They read the source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("decoding", "cllm", "viz")
MAX_LINES = 60  # of one function, its docstring included

# Known cycles to be removed (none now: trace.py reads the method registry, and the methods import
# decoding/records.py, not trace.py). The test fails on any cycle not listed here, and on an edge
# listed here that no longer exists.
PENDING_EDGES: set = set()
PENDING_LONG: set = set()
LENGTH_CHECKED = ("decoding", "cllm", "viz")


def modules(root: Path, packages=PACKAGES) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, whether it is a package's __init__)."""
    out = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _targets(name: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if node.level:
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    # `from pkg import mod` imports the module pkg.mod; `from mod import name` imports mod
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules (of ``packages``) it imports, anywhere in its source."""
    known = modules(root, packages)
    graph = {}
    for name, (path, is_pkg) in known.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _targets(name, is_pkg, node, known):
                    while t and t not in known:  # decoding.trace.Trace -> decoding.trace
                        t = t.rpartition(".")[0]
                    if t and t != name:
                        deps.add(t)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (c := visit(w)):
                return c
        path.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (c := visit(v)):
            return c
    return None


def long_functions(root: Path, packages) -> dict[str, int]:
    """'path::qualified name' -> lines, for each function longer than MAX_LINES."""
    out = {}
    for pkg in packages:
        for p in sorted((root / pkg).rglob("*.py")):
            tree = ast.parse(p.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                for child in ast.iter_child_nodes(node):
                    child.parent = node  # type: ignore[attr-defined]
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > MAX_LINES:
                        owner = getattr(node, "parent", None)
                        qual = f"{owner.name}.{node.name}" if isinstance(owner, ast.ClassDef) else node.name
                        out[f"{p.relative_to(root).as_posix()}::{qual}"] = n
    return out


def test_no_import_cycle():
    graph = import_graph(ROOT)
    assert {"decoding.cli", "decoding.perf.tune", "cllm.cli", "viz.explain"} <= set(graph)
    gone = {(a, b) for a, b in PENDING_EDGES if b not in graph.get(a, ())}
    assert not gone, f"these imports are gone: strike them from PENDING_EDGES: {sorted(gone)}"
    for a, b in PENDING_EDGES:
        graph[a].discard(b)
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycle_in_app_pages():
    """The pages and their helpers (app_pages/common/): ui.py and presets.py imported each other
    (issue 19), one of them inside a function."""
    graph = import_graph(ROOT, ("app_pages",))
    assert {"app_pages.compare", "app_pages.common.presets", "app_pages.common.keys"} <= set(graph)
    assert "app_pages.common.keys" in graph["app_pages.common.presets"]  # the graph sees the helpers' imports
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_cli_depends_on_perf_not_back():
    graph = import_graph(ROOT)
    assert "decoding.perf.tune" in graph["decoding.cli"]
    perf = [m for m in graph if m.startswith("decoding.perf")]
    assert not any("decoding.cli" in graph[m] for m in perf)


def test_the_graph_sees_imports_inside_functions(tmp_path):
    """The checker itself: a cycle closed by an import inside a function is found."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..c import g\n    return g\n")
    (pkg / "c.py").write_text("import os\n\ndef g():\n    from pkg.a import b\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.sub.b"} and graph["pkg.sub.b"] == {"pkg.c"} and graph["pkg.c"] == {"pkg.a"}
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("def g():\n    pass\n")
    assert find_cycle(import_graph(tmp_path, ("pkg",))) is None


@pytest.mark.parametrize("package", LENGTH_CHECKED)
def test_no_long_function(package):
    long = long_functions(ROOT, (package,))
    pending = {k for k in PENDING_LONG if k.startswith(package + "/")}
    assert pending <= set(long), f"now short: strike from PENDING_LONG: {sorted(pending - set(long))}"
    over = {k: n for k, n in long.items() if k not in pending}
    assert not over, f"functions over {MAX_LINES} lines (split them): {over}"


def test_long_functions_are_found(tmp_path):
    (tmp_path / "p").mkdir()
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_LINES))
    (tmp_path / "p" / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n\n\ndef short():\n    pass\n")
    assert long_functions(tmp_path, ("p",)) == {"p/m.py::C.f": MAX_LINES + 1}


def method_names(root: Path) -> set[str]:
    """Every method's registry name and the step key of its record in old traces (the SPECs of
    decoding/methods/, read as text)."""
    names = set()
    for p in (root / "decoding" / "methods").glob("*.py"):
        names |= set(re.findall(r'\b(?:name|legacy_record)="(\w+)"', p.read_text(encoding="utf-8")))
    return names


def words_in(path: Path) -> set[str]:
    """The identifiers and the string constants of a module, lower case (docstrings and comments
    are prose, not code)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            out.add(node.id)
        elif isinstance(node, ast.Attribute):
            out.add(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.add(node.value)
    return {w.lower() for w in out}


@pytest.mark.parametrize("module", ["decoding/trace.py", "decoding/records.py"])
def test_the_trace_knows_no_method_by_name(module):
    """Issue 19: each method owns its record and its validation (MethodSpec.record); the trace
    reads them from the registry, so adding a method does not touch it."""
    names = method_names(ROOT)
    assert {"ar", "jacobi", "lookahead", "pld", "tr", "recycling"} <= names
    found = words_in(ROOT / module) & names
    assert not found, f"{module} names methods: {sorted(found)}"


def test_the_name_check_can_fail(tmp_path):
    (tmp_path / "m.py").write_text('def f(step):\n    """Read it (pld)."""\n    return step.lookahead or {"jacobi": 1}\n')
    assert words_in(tmp_path / "m.py") & {"lookahead", "jacobi", "pld"} == {"lookahead", "jacobi"}


# ---- the package (pyproject.toml) --------------------------------------------------------------
def test_scripts_import_the_package_without_path_hacks():
    """scripts/*.py run as `python scripts/x.py` on the editable install (scripts/setup): none of them
    edits sys.path, and every `decoding`/`cllm`/`viz` module they import is part of the package."""
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packaged = tuple(p.rstrip("*") for p in conf["tool"]["setuptools"]["packages"]["find"]["include"])
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    assert scripts
    for p in scripts:
        text = p.read_text(encoding="utf-8")
        assert "sys.path" not in text, f"{p.name} edits sys.path"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                assert node.module.split(".")[0] in packaged, (p.name, node.module)


def test_console_scripts_name_real_functions():
    import importlib
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    scripts = conf["project"]["scripts"]
    assert {"pdl-decode", "pdl-cllm"} <= set(scripts)
    for name, target in scripts.items():
        module, _, func = target.partition(":")
        assert callable(getattr(importlib.import_module(module), func)), name
    setup = (ROOT / "scripts" / "setup").read_text(encoding="utf-8")
    assert "--no-deps --no-build-isolation -e ." in setup  # offline: nothing downloaded for the install
