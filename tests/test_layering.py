"""The import graph of rawrcl/, cli/ and calibration/ runs one way (docs/architecture.md).

Every module is parsed with ``ast``; every ``import``/``from … import`` counts, wherever it sits (module
level, inside a function, under ``if TYPE_CHECKING``), because a function-level import is still a
dependency. The test fails on

- an import cycle between modules (a strongly connected component of more than one module);
- an upward edge: a module importing a module of a higher layer, or of another group of its own layer
  (siblings stay independent; the exceptions are listed in ``SIDEWAYS``);
- any import of ``rawrcl.cli`` from the library or from ``calibration/``.

Modules map to a group by their first name under ``rawrcl`` (``rawrcl.train.engine`` → ``train``); the
installed names are used (``cli/`` is ``rawrcl.cli``, ``calibration/`` is ``rawrcl.calibration``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: source folder → installed package name
PACKAGES = {"rawrcl": "rawrcl", "cli": "rawrcl.cli", "calibration": "rawrcl.calibration"}

#: low → high; a module may import groups of lower layers only
LAYERS: list[tuple[str, ...]] = [
    ("errors",),  # (the package root rawrcl/__init__.py counts here: it only re-exports RawrclError)
    ("cfa", "colour", "device"),
    ("io",),
    ("isp", "noise", "demosaic", "defects", "banding", "burst_align"),
    ("calibration",),
    ("tasks", "data", "simulate", "sample_data", "gat"),
    ("models",),
    ("losses",),
    ("methods",),
    ("train",),
    ("export",),
    ("infer", "eval", "inspect"),
    ("bench",),
    ("demo", "weights"),
    ("cli",),
]

#: allowed imports between two groups of the same layer
SIDEWAYS = {("eval", "infer")}

#: known violations in files this change could not touch, each with a TODO naming the file (empty: none)
EXPECTED: set[tuple[str, str]] = set()


def _modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for folder, pkg in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = path
    return mods


def _targets(mod: str, path: Path, node: ast.AST, mods: dict[str, Path]) -> list[str]:
    """The project modules an import statement loads (the deepest existing module of each name)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
            base = ".".join(pkg[: len(pkg) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    out = []
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name and name != mod:
            out.append(name)
    return out


def import_graph() -> dict[str, dict[str, int]]:
    """module → {imported project module: line of the first such import}."""
    mods = _modules()
    graph: dict[str, dict[str, int]] = {m: {} for m in mods}
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in _targets(mod, path, node, mods):
                graph[mod].setdefault(target, node.lineno)
    return graph


def group(mod: str) -> str:
    parts = mod.split(".")
    return "errors" if len(parts) == 1 else parts[1]


def _layer() -> dict[str, int]:
    return {g: i for i, groups in enumerate(LAYERS) for g in groups}


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph[w])))
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
                    out.append(sorted(comp))
    return out


def test_every_module_has_a_layer():
    layer = _layer()
    missing = sorted({group(m) for m in import_graph()} - set(layer))
    assert not missing, f"groups without a layer in LAYERS (add them, and to docs/architecture.md): {missing}"


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles (function-level imports count): " + "; ".join(
        " ↔ ".join(c) for c in found
    )


def test_imports_run_one_way():
    layer = _layer()
    bad = []
    for mod, targets in import_graph().items():
        for target, line in targets.items():
            ga, gb = group(mod), group(target)
            if ga == gb or (ga, gb) in SIDEWAYS or (mod, target) in EXPECTED:
                continue
            if layer[gb] >= layer[ga]:
                bad.append(f"{mod}:{line} imports {target} ({ga} → {gb})")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_core_never_imports_the_cli():
    bad = [
        f"{mod}:{line} imports {target}"
        for mod, targets in import_graph().items()
        if group(mod) != "cli"
        for target, line in targets.items()
        if group(target) == "cli"
    ]
    assert not bad, "\n".join(bad)


def test_checker_sees_function_level_imports_and_cycles():
    """The checker itself: a function-level import is an edge, and a two-module loop is a cycle."""
    graph = import_graph()
    # export.backend imports rawrcl.device inside a function
    assert "rawrcl.device" in graph["rawrcl.export.backend"]
    toy = {"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}
    assert cycles(toy) == [["a", "b", "c"]]
