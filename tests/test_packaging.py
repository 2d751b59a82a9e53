"""The package as installed: every import is a declared dependency, and the modules form no
import cycle (so each layer can be read and tested on its own)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: installed name -> source folder (pyproject's package-dir)
PACKAGES = {"snpu": ROOT / "snpu", "snpu.rtl": ROOT / "rtl", "snpu.compiler": ROOT / "compiler",
            "snpu.verif": ROOT / "verif"}
#: local script modules the bench and example scripts import from their own folders
LOCAL = {"snpu", "tests", "provenance", "synth", "train", "demo", "sparse_fc", "branchy", "layer_models", "unet"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> dict[str, set[str]]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = lambda req: _norm(re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0])
    out = {"runtime": {name(r) for r in meta["dependencies"]}}
    for extra, reqs in meta.get("optional-dependencies", {}).items():
        out[extra] = {name(r) for r in reqs}
    return out


def _third_party_imports(folders) -> dict[str, set[str]]:
    """Top-level names of every non-stdlib, non-local import (module-level or lazy)."""
    found: dict[str, set[str]] = {}
    for folder in folders:
        for f in folder.rglob("*.py"):
            for n in ast.walk(ast.parse(f.read_text())):
                if isinstance(n, ast.Import):
                    names = [a.name for a in n.names]
                elif isinstance(n, ast.ImportFrom) and n.level == 0:
                    names = [n.module]
                else:
                    continue
                for top in (nm.split(".")[0] for nm in names):
                    if top not in sys.stdlib_module_names and top not in LOCAL:
                        found.setdefault(top, set()).add(str(f.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("what,folders,allowed", [
    ("package", list(PACKAGES.values()), ("runtime",)),
    ("bench", [ROOT / "bench"], ("runtime", "bench")),
    ("examples", [ROOT / "examples"], ("runtime", "examples")),
    ("tests", [ROOT / "tests"], ("runtime", "dev")),
])
def test_every_import_is_declared(what, folders, allowed):
    declared = set().union(*(_declared()[k] for k in allowed))
    dists = packages_distributions()
    missing = {}
    for top, files in _third_party_imports(folders).items():
        provided_by = {_norm(d) for d in dists.get(top, [top])}
        if not provided_by & declared:
            missing[top] = sorted(files)[:3]
    assert not missing, f"{what}: imports not declared in pyproject.toml ({allowed}): {missing}"


def _module_graph() -> dict[str, set[str]]:
    mods = {}
    for pkg, folder in PACKAGES.items():
        for f in folder.rglob("*.py"):
            parts = list(f.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = f
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        base = m if f.name == "__init__.py" else m.rsplit(".", 1)[0]
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.ImportFrom):
                if n.level:
                    parts = base.split(".")
                    target = ".".join(parts[:len(parts) - n.level + 1] + ([n.module] if n.module else []))
                else:
                    target = n.module or ""
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target
                           for a in n.names]
            elif isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            else:
                continue
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != m and not m.startswith(t + "."):
                    graph[m].add(t)
    return graph


def test_no_import_cycles():
    """Counting lazy (function-level) imports too: a cycle means two layers know each other."""
    graph = _module_graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(v, path):
        state[v] = 1
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                cycles.append(path[path.index(w):] + [w])
            elif w not in state:
                visit(w, path + [w])
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v, [v])
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_specification_does_not_import_the_rtl():
    """verif/ is the executable specification; only verif/tb/ (the testbench) sees the RTL."""
    graph = _module_graph()
    bad = sorted(m for m, deps in graph.items()
                 if m.startswith("snpu.verif") and not m.startswith("snpu.verif.tb")
                 and any(d.startswith("snpu.rtl") for d in deps))
    assert not bad, f"verif modules importing the RTL: {bad}"


def test_bench_does_not_import_tests():
    for f in (ROOT / "bench").glob("*.py"):
        assert not re.search(r"^\s*(from|import) tests\b", f.read_text(), re.M), f
