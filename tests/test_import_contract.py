"""The import contract of ``docs/architecture.md``, read from the source (no import is run):

* the built-in plugins and the example plugin import only ``dsh``, ``dsh.plugin`` (and
  ``dsh.plugin.http``), ``dsh.testing`` and their own package: no core module, no other plugin;
* each layer package of the core imports, at module level, only its own layer and the layers
  below it; the type-only imports that reach up are the few listed in :data:`TYPE_ONLY_UP`;
* the module-level imports of the core have no cycle.

Each rule is checked on the real tree and, to prove it can fail, on a small planted tree.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import attrs

ROOT = Path(__file__).resolve().parent.parent

#: The layers, lowest first; a top-level module outside them sits where this says.
LAYERS = (
    "_lazy",
    "_log",
    "_json",
    "values",
    "hooks",
    "llm",
    "tools",
    "session",
    "loop",
    "app",
    "cluster",
    "cli",
)
TOP = ("__init__", "__main__", "plugin", "testing")  # above every layer: the doors and the kits

#: Type-only imports that reach a higher layer (annotations of hooks and agent protocols).
TYPE_ONLY_UP = {
    ("values", "session"),  # the Agent protocol's ``session`` and inbox
    ("values", "loop"),
    ("hooks", "llm"),  # the hook specs annotate what each hook is given
    ("hooks", "tools"),
    ("hooks", "session"),
    ("hooks", "loop"),
    ("hooks", "app"),
    ("llm", "tools"),  # the system prompt lists the tools' schemas
    ("loop", "app"),  # the loop is handed its harness
}

PLUGIN_DOORS = ("dsh", "dsh.plugin", "dsh.plugin.http")


@attrs.frozen
class Import:
    """One import statement's target, where it is, and how it is reached."""

    module: str  # the importing module, dotted
    target: str  # the module imported from, dotted
    line: int
    kind: str  # "module" (at module level), "type" (under TYPE_CHECKING), "call" (in a function)


def imports(root: Path, package: str) -> Iterator[Import]:
    """Every ``dsh``/``dsh_plugins`` import of every module under ``root / package``."""
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        yield from _walk(tree.body, module, "module", root)


def _walk(body: list[ast.stmt], module: str, kind: str, root: Path) -> Iterator[Import]:
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _walk(node.body, module, "type", root)
            yield from _walk(node.orelse, module, kind, root)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            yield from _targets(node, module, kind, root)
        else:
            inner = "call" if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else kind
            for field in ("body", "orelse", "finalbody", "handlers"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    stmts = [c for c in children if isinstance(c, ast.stmt)]
                    handlers = [c for c in children if isinstance(c, ast.ExceptHandler)]
                    yield from _walk(stmts, module, inner, root)
                    for handler in handlers:
                        yield from _walk(handler.body, module, inner, root)


def _is_module(root: Path, dotted: str) -> bool:
    path = root.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, kind: str, root: Path
) -> Iterator[Import]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif node.level:  # relative: within the importing package
        return
    else:
        assert node.module is not None
        # ``from package import x`` imports the submodule ``package.x`` when there is one.
        subs = [f"{node.module}.{alias.name}" for alias in node.names]
        names = sorted({sub if _is_module(root, sub) else node.module for sub in subs})
    for name in names:
        if name.split(".")[0] in ("dsh", "dsh_plugins"):
            yield Import(module, name, node.lineno, kind)


def plugin_violations(root: Path, package: str) -> list[str]:
    """Imports of a plugin tree that go through no door: a core module, another plugin."""
    found = []
    for item in imports(root, package):
        target = item.target
        own = ".".join(item.module.split(".")[:2])
        if target.startswith("dsh_plugins"):
            ok = target == own or target.startswith(own + ".")
        else:
            ok = target in PLUGIN_DOORS or target.split(".")[:2] == ["dsh", "testing"]
        if not ok:
            found.append(f"{item.module}:{item.line} imports {target}")
    return found


def _layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "dsh":
        return None
    return "__init__" if len(parts) == 1 else parts[1]


def _rank(layer: str) -> int:
    return len(LAYERS) if layer in TOP else LAYERS.index(layer)


def layer_violations(root: Path) -> list[str]:
    """Core imports that reach a higher layer: at module level, or by type where not allowed."""
    found = []
    for item in imports(root, "dsh"):
        source, target = _layer(item.module), _layer(item.target)
        if source is None or target is None or source == target or source in TOP:
            continue
        if item.kind == "call" or _rank(target) < _rank(source):
            continue
        if item.kind == "type" and (source, target) in TYPE_ONLY_UP:
            continue
        found.append(f"{item.module}:{item.line} ({item.kind}) imports {item.target}")
    return sorted(found)


def cycles(root: Path) -> list[list[str]]:
    """The cycles of the core's module-level import graph (each as its modules, once)."""
    modules = {item.module for item in imports(root, "dsh")}
    graph: dict[str, set[str]] = {module: set() for module in modules}
    for item in imports(root, "dsh"):
        if item.kind == "module" and item.target in modules and item.target != item.module:
            graph[item.module].add(item.target)
    found: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                found.append(path[path.index(target) :])
            elif target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)
    return found


def test_plugins_import_only_the_doors_and_themselves() -> None:
    assert plugin_violations(ROOT, "dsh_plugins") == []
    example = ROOT / "examples" / "dsh-plugin-example" / "src"
    assert list(imports(example, "dsh_example")), "the example plugin was not found"
    assert plugin_violations(example, "dsh_example") == []


def test_each_layer_imports_only_the_layers_below() -> None:
    assert layer_violations(ROOT) == []


def test_the_core_has_no_module_level_import_cycle() -> None:
    assert cycles(ROOT) == []


def test_every_core_module_sits_in_a_layer() -> None:
    tops = {path.stem for path in (ROOT / "dsh").glob("*.py")}
    packages = {path.parent.name for path in (ROOT / "dsh").glob("*/__init__.py")}
    assert tops | packages <= set(LAYERS) | set(TOP)
    inside = [p for layer in LAYERS for p in (ROOT / "dsh" / layer).glob("*.py")]
    public = [p.name for p in inside if not p.name.startswith("_")]
    assert public == [], "a layer's modules are private; plugins use dsh.plugin"


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_rules_fail_on_planted_violations(tmp_path: Path) -> None:
    root = plant(
        tmp_path,
        {
            "dsh/__init__.py": "",
            "dsh/values/__init__.py": "",
            "dsh/values/_a.py": (
                "from dsh.loop._b import x\nfrom typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from dsh.app._h import H\n"
            ),
            "dsh/loop/__init__.py": "",
            "dsh/loop/_b.py": (
                "from typing import TYPE_CHECKING\nfrom dsh.values._a import y\n"
                "if TYPE_CHECKING:\n    from dsh.app._h import H\n"
                "def late():\n    from dsh.app._h import H\n"
            ),
            "dsh/app/__init__.py": "",
            "dsh/app/_h.py": "import dsh.values._a\n",
            "dsh_plugins/__init__.py": "",
            "dsh_plugins/one/__init__.py": (
                "from dsh.plugin import Harness\nfrom dsh.testing import MockServer\n"
                "from dsh_plugins.one.x import y\nfrom . import z\n"
                "from dsh.values._events import TurnEnd\n"
                "try:\n    import dsh_plugins.two\nexcept ImportError:\n    pass\n"
            ),
            "dsh_plugins/one/x.py": "def f():\n    from dsh import keys\n",
            "dsh/keys.py": "",
        },
    )
    assert plugin_violations(root, "dsh_plugins") == [
        "dsh_plugins.one:5 imports dsh.values._events",
        "dsh_plugins.one:7 imports dsh_plugins.two",
        "dsh_plugins.one.x:2 imports dsh.keys",
    ]
    assert layer_violations(root) == [
        "dsh.values._a:1 (module) imports dsh.loop._b",
        "dsh.values._a:4 (type) imports dsh.app._h",
    ]
    assert cycles(root) == [["dsh.values._a", "dsh.loop._b"]]


def test_every_name_a_door_offers_is_there() -> None:
    import dsh
    import dsh.plugin
    import dsh.plugin.http

    for door in (dsh, dsh.plugin, dsh.plugin.http):
        missing = [name for name in door.__all__ if getattr(door, name, None) is None]
        assert missing == [], door.__name__
    assert dsh.plugin.resolve_alias.__name__ == "resolve"  # offered under another name
