"""The package's layers import only downward: no import circles (function-local imports count),
no module imports a lower layer's caller, and no module uses another module's private names.

The graph is read from the source (``ast``), so a cycle that only shows at run time through a
function-local import is found too. A new module gets a layer in ``LAYERS``.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "src" / "resumable_iterable"
PKG = ROOT.name

#: bottom to top; a module may import modules of its own layer or of a layer before it.
#: A name ending in "." is a package: every module in it.
LAYERS = [
    ("state", ["state", "atomic_files", "state_codec", "state_arrays", "state_times", "state_images", "state_tensors", "state_files", "state_binary", "state_buffers",
               "state_logs", "progress"]),
    ("nodes", ["nodes", "nodes."]),
    ("splits", ["distributed"]),
    ("loader", ["loader", "loader."]),
    ("facade", ["dataset", "dataset_dict", "readers", "constructors", "features", "export", "iteration", "casting", "info"]),
    ("combine", ["combine"]),
    ("integrations", ["integrations", "integrations."]),
    ("cli", ["cli", "cli."]),
    ("package", ["", "__main__"]),  # resumable_iterable/__init__.py: ties the layers together; python -m
]


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


MODULES = _modules()


def _imports(name: str) -> list[tuple[str, str | None, int]]:
    """``(module imported, name taken from it or None, line)`` for every import of a module of
    the package in module ``name`` (relative to the package; ``""`` is the package itself)."""
    path = MODULES[name]
    here = [PKG, *name.split(".")] if name else [PKG]
    if path.name != "__init__.py":
        here = here[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == PKG:
                    out.append((a.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            if src.split(".")[0] != PKG:
                continue
            for a in node.names:
                out.append((src, a.name, node.lineno))
    return out


def _short(full: str) -> str:
    return full[len(PKG) + 1:] if full.startswith(PKG + ".") else ("" if full == PKG else full)


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        out = set()
        for src, taken, _ in _imports(name):
            sub = _short(f"{src}.{taken}") if taken else None
            out.add(sub if sub in MODULES else _short(src))
        out.discard(name)
        edges[name] = out
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _layer(name: str) -> int:
    for rank, (_, members) in enumerate(LAYERS):
        for m in members:
            if name == m or (m.endswith(".") and name.startswith(m)):
                return rank
    raise AssertionError(f"module {name or PKG!r} has no layer: add it to LAYERS in tests/test_layers.py")


def test_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    cycles = [sorted(c) for c in _cycles(_graph())]
    assert not cycles, f"import cycles (function-local imports included): {cycles}"


def test_layers_import_only_downward():
    upward = []
    for name, targets in _graph().items():
        for target in targets:
            if _layer(target) > _layer(name):
                upward.append(f"{name or PKG} ({LAYERS[_layer(name)][0]}) imports {target} "
                              f"({LAYERS[_layer(target)][0]})")
    assert not upward, "imports going up a layer:\n" + "\n".join(sorted(upward))


def test_no_private_names_of_other_modules():
    bad = []
    for name in MODULES:
        aliases = {}  # local name -> module of the package it is bound to
        for src, taken, line in _imports(name):
            if taken is None:
                continue
            full = f"{src}.{taken}"
            if _short(full) in MODULES:
                aliases[taken] = full
            elif taken.startswith("_") and not taken.startswith("__"):
                bad.append(f"{name}:{line} imports {taken} from {src}")
        tree = ast.parse(MODULES[name].read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                for a in node.names:  # `from . import state as _state` binds the alias
                    if a.asname and a.name in aliases:
                        aliases[a.asname] = aliases[a.name]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{name}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert not bad, "private names used across modules:\n" + "\n".join(sorted(bad))


@pytest.mark.parametrize("name", sorted(n for n in MODULES if n))
def test_every_module_says_its_story(name):
    doc = ast.get_docstring(ast.parse(MODULES[name].read_text()))
    if MODULES[name].name == "__init__.py" and not MODULES[name].read_text().strip():
        pytest.skip("empty package marker")
    assert doc, f"{name} has no module docstring"


#: ``(module or package prefix ending in ".", attribute, why)``: the private attributes of another
#: module's objects that a module may still read, each for a reason
ATTRIBUTE_ALLOWED = [
    ("nodes.", "_state_dict", "the node contract (nodes/base.py): a node kind wires its children's state "
                              "dicts into its own and builds the states of its copies (clone, shard)"),
    ("nodes.", "_fresh_state", "the node contract: a copy made by clone/shard gets a fresh state"),
    ("nodes.arrow", "_indices", "HF datasets.Dataset keeps its indices mapping (select/shuffle/filter) only "
                                "there; flatten_indices() would copy the whole table"),
    ("nodes.format_rows", "_consolidate", "HF's numpy / torch formatters stack the formatted items of a list "
                                            "only there; calling it keeps nested lists what HF makes of them"),
    ("loader.hooks", "_initializing", "Python's import system marks a module still being imported only there "
                                      "(ModuleSpec._initializing, read the same way by importlib itself)"),
    ("integrations.torch.arena", "_new_shared", "torch has no public constructor of a storage in shared memory "
                                          "(the worker buffer arena)"),
    ("integrations.torch.arena", "_untyped_storage", "torch's pickle of a tensor hands over a TypedStorage, which "
                                                      "gives its untyped storage without a deprecation warning "
                                                      "only there (untyped() warns)"),
    ("integrations.torch.iterators", "_next_data", "torch's single-process loader iterator collects a batch only "
                                                "there (its fetcher calls next() on the dataset batch_size times): "
                                                "wrapping it rewinds a batch the dataset raised in"),
    ("integrations.torch.iterators", "_dataset_fetcher", "torch's single-process loader iterator holds its fetcher "
                                                      "(the dataset's iterator, its 'ended' flag, the collate_fn "
                                                      "it calls) only there"),
    ("integrations.torch.loader", "_num_yielded", "torch's loader iterator counts the batches of its pass only "
                                                  "there (torchdata restores it from a state): the batch states "
                                                  "kept for a loop that reads ahead are keyed by it"),
    ("integrations.torch.iterators", "_process_data", "torchdata's multiprocessing loader iterator re-raises a "
                                                   "worker's error only there (torch's ExceptionWrapper.reraise, "
                                                   "whose frame, a reference cycle, is cleared as the error leaves)"),
    ("integrations.torch.iterators", "_workers", "torch's multiprocessing loader iterator holds its worker processes "
                                              "only there (an iterator without workers is left as it is)"),
    ("integrations.torch.loader", "_finished", "torchdata's loader iterator marks a pass that has ended only there"),
    ("integrations.torch.snapshots", "_update_snapshot", "torchdata's multiprocessing loader iterator takes its "
                                                          "per-batch snapshot only there (rebuilding every worker's "
                                                          "state): wrapping it keeps the states of the workers that "
                                                          "sent nothing"),
    ("integrations.torch.snapshots", "_worker_snapshots", "torchdata's loader iterator holds the workers' "
                                                          "incremental states only there"),
    ("integrations.torch.buffers", "_workers", "torch's multiprocessing loader iterator holds its worker processes "
                                               "(their pids) only there: what they sent is forgotten when it is freed"),
    ("integrations.torch.workers", "_exit", "os._exit is Python's documented way to end a process at once, "
                                            "without the exit handlers that would block an orphaned worker"),
]


def _owned_attributes(tree: ast.AST) -> set[str]:
    """Attributes a module defines: assigned on ``self`` / ``cls``, or in a class body."""
    owned: set[str] = set()

    def targets(t: ast.AST):
        if isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                yield from targets(e)
        else:
            yield t

    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for e in targets(t):
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id in ("self", "cls"):
                        owned.add(e.attr)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    owned.add(item.name)
                elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                    for t in (item.targets if isinstance(item, ast.Assign) else [item.target]):
                        owned.update(e.id for e in targets(t) if isinstance(e, ast.Name))
    return owned


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_attribute_uses(source: str) -> list[tuple[int, str, str]]:
    """``(line, code, attribute)`` for each ``obj._name`` (or ``getattr(obj, "_name")``) in ``source``
    where ``obj`` is not ``self`` / ``cls`` / ``super()`` and ``_name`` is not an attribute the
    module defines itself (instances of its own classes may touch each other's)."""
    tree = ast.parse(source)
    owned = _owned_attributes(tree)

    def foreign(obj: ast.AST, attr: str) -> bool:
        if not _is_private(attr) or attr in owned:
            return False
        if isinstance(obj, ast.Name) and obj.id in ("self", "cls"):
            return False
        return not (isinstance(obj, ast.Call) and isinstance(obj.func, ast.Name) and obj.func.id == "super")

    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and foreign(node.value, node.attr):
            out.append((node.lineno, ast.unparse(node), node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and foreign(node.args[0], node.args[1].value)):
            out.append((node.lineno, ast.unparse(node), node.args[1].value))
    return out


def test_private_attribute_finder():
    code = '''
class A:
    _mine = 1
    def __init__(self):
        self._x = 1
    def copy(self, other, ds):
        other._x, other._mine = self._x, super()._hidden
        getattr(other, "_x")
        return ds._node, getattr(ds, "_split", None), type(ds).__name__, ds.__dict__
'''
    found = sorted((code_, attr) for _, code_, attr in _private_attribute_uses(code))
    assert found == [("ds._node", "_node"), ("getattr(ds, '_split', None)", "_split")]


def test_no_private_attributes_of_other_modules():
    bad, used = [], set()
    for name, path in MODULES.items():
        for line, code, attr in _private_attribute_uses(path.read_text()):
            allowed = [(m, a) for m, a, _ in ATTRIBUTE_ALLOWED
                       if a == attr and (name == m or (m.endswith(".") and name.startswith(m)))]
            if allowed:
                used.update(allowed)
                continue
            bad.append(f"{name or PKG}:{line} reads {code}")
    assert not bad, ("private attributes of another module's objects (add a public way, or an entry with its "
                     "reason to ATTRIBUTE_ALLOWED):\n" + "\n".join(sorted(bad)))
    stale = [(m, a) for m, a, _ in ATTRIBUTE_ALLOWED if (m, a) not in used]
    assert not stale, f"ATTRIBUTE_ALLOWED entries nothing needs any more: {stale}"
