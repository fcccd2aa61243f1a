"""The package layout follows the pipeline (docs/architecture.md): no import cycles between
modules, and no import running back up the layers. Imports inside functions count (a lazy
import is still a dependency); imports under ``if TYPE_CHECKING:`` do not (annotations only)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "peregrine"

# Each top-level part of the package and its layer: a module may import its own part and any
# part of a lower layer, nothing above. frontends, kernels, passes and sources sit side by side
# (layer 2) and may not import one another; backends build on kernels.
LAYERS = {
    "_version": 0, "errors": 0, "options": 0, "config": 0, "registry": 0,
    "torch_step": 0,  # peregrine.TorchStep: a leaf the torch frontend recognises by type
    "ir": 1, "formats": 1,  # formats: saved-model files Peregrine parses itself
    "frontends": 2, "kernels": 2, "passes": 2, "sources": 2,
    "backends": 3, "export": 3,  # export lowers the IR for other runtimes, as a backend
    "runtime": 4,
    "api": 5,
    "<root>": 6,  # peregrine/__init__.py: the public names
    "bench": 7, "tools": 7, "demo": 7, "deploy": 7,  # benchmarking, serving: libraries on top
    "cli": 8, "dask": 8, "spark": 8,  # what users call, built on those
}
# Inside backends/, each backend is its own world: shared code lives in kernels/ or ir/.
BACKEND_PEERS = {"torchscript": {"torch"}}  # TorchScript scripts the torch backend's module


def _modules() -> dict[str, Path]:
    out = {}
    for path in (SRC / ROOT).rglob("*.py"):
        parts = path.relative_to(SRC).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and \
                node.test.id == "TYPE_CHECKING":
            skip.update(id(n) for n in ast.walk(node))
    return skip


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_nodes(tree)
    is_pkg = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for alias in node.names:
                full = f"{mod}.{alias.name}"
                found.add(full if full in MODULES else mod)
    deps = {_resolve(n) for n in found if n == ROOT or n.startswith(ROOT + ".")}
    return {d for d in deps if d and d != module}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


def test_every_part_has_a_layer():
    parts = {_part(m) for m in MODULES}
    assert not parts - set(LAYERS), f"add these to LAYERS: {sorted(parts - set(LAYERS))}"


def test_no_import_cycles():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_point_down_the_layers(module):
    mine = _part(module)
    if mine not in LAYERS:
        pytest.skip("part without a layer (see test_every_part_has_a_layer)")
    up = [d for d in GRAPH[module] if _part(d) != mine
          and LAYERS.get(_part(d), 99) >= LAYERS[mine]]
    assert not up, f"{module} imports {up}: same or higher layer than {mine!r}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith(f"{ROOT}.backends.")))
def test_backends_do_not_import_each_other(module):
    def backend(m: str) -> str | None:
        parts = m.split(".")
        return parts[2] if len(parts) > 2 and parts[2] not in ("base", "__init__") else None

    mine = backend(module)
    others = {backend(d) for d in GRAPH[module] if d.startswith(f"{ROOT}.backends.")}
    others -= {None, mine} | BACKEND_PEERS.get(mine or "", set())
    assert not others, f"{module} imports the {sorted(others)} backend(s)"
