"""The package's layers, checked from its imports: lower layers never import higher ones, no cycles.

The layers, lowest first (README, "Where things are"): a module may import from its own package and
from packages of lower layers, never from a higher layer and never sideways into another package of
its own layer. Imports inside functions count too (a lazy import is still a dependency), and so do
imports under ``if TYPE_CHECKING:`` (a type-only import still ties the two modules: a reader follows it,
and a cycle through it is a cycle of ideas).

The repository's development package ``logstore_dev`` (local services, the test environment, the demo)
sits above the whole package and outside the wheel: it may import ``airflow_logstore``, never the reverse.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_logstore"

#: Lowest first. ``__init__``, the package's own module (its version, provider info and the public API it
#: re-exports from the layers below), is the top: nothing inside the package imports it.
LAYERS: list[set[str]] = [
    {"exceptions"},  # the errors users see: every layer raises them (pause's KillPointError too)
    {"versions", "pause"},
    {"settings", "tempdirs"},
    {"jars", "javac"},
    {"core"},
    {"log"},
    {"table"},
    {"spark"},
    {"publish"},  # below the writer: a writer may publish right after its own commit
    {"read", "write"},
    {"reconcile", "compaction"},
    {"health"},
    {"spark_apps"},
    {"hooks"},
    {"triggers"},
    {"sensors", "operators", "plugins"},
    {"task_group"},
    {"cli", "example_dags"},  # example_dags: the DAGs shipped in the package
    {"__init__"},
]
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}

Graph = Mapping[str, set[str]]


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, modules: set[str]) -> set[str]:
    """The package's modules that ``source`` imports (anywhere: in functions, under ``TYPE_CHECKING``)."""
    found: set[str] = set()
    pending: list[ast.AST] = [ast.parse(source)]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if (
                isinstance(child, ast.ImportFrom)
                and child.module
                and child.module.split(".")[0] == "airflow_logstore"
            ):
                for alias in child.names:
                    candidate = f"{child.module}.{alias.name}"
                    found.add(candidate if candidate in modules else child.module)
            elif isinstance(child, ast.Import):
                found.update(a.name for a in child.names if a.name.split(".")[0] == "airflow_logstore")
            pending.append(child)
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    paths = {module_name(path, root): path for path in root.rglob("*.py")}
    modules = set(paths)
    return {name: imports_of(path.read_text(), modules) - {name} for name, path in paths.items()}


def area(module: str) -> str:
    """The top-level package (or module) of ``airflow_logstore`` that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer_violations(graph: Graph, layer_of: Mapping[str, int] = LAYER_OF) -> list[str]:
    problems = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            source_area, target_area = area(module), area(target)
            if source_area == target_area:
                continue
            if layer_of[target_area] > layer_of[source_area]:
                problems.append(f"{module} imports {target}: a higher layer")
            elif layer_of[target_area] == layer_of[source_area]:
                problems.append(f"{module} imports {target}: a sibling package of the same layer")
    return problems


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(iter(children), None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_every_area_has_a_layer() -> None:
    areas = {area(module) for module in import_graph()}
    assert areas <= set(LAYER_OF), f"give these a layer: {sorted(areas - set(LAYER_OF))}"


def test_lower_layers_never_import_higher_ones() -> None:
    assert layer_violations(import_graph()) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_core_does_no_io_and_knows_no_airflow() -> None:
    """``core`` imports only the standard library, the package's lowest layer and itself, and no edge's
    machinery either: a command line's argparse adapter lives with its parser (CLI or job)."""
    forbidden = ("airflow", "pyspark", "pyiceberg", "confluent_kafka", "socket", "subprocess", "requests",
                 "argparse")  # fmt: skip
    for path in (PACKAGE / "core").rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not {name for name in names if name.split(".")[0] in forbidden}, path.name


# -- the checkers catch what they are for (planted faults) ----------------------------------------------


def test_planted_upward_and_sideways_imports_are_found() -> None:
    graph = {
        "airflow_logstore.core.codec": {"airflow_logstore.log.kafka_client"},  # up
        "airflow_logstore.read.reader": {"airflow_logstore.write.writer"},  # sideways
        "airflow_logstore.log.kafka_client": {"airflow_logstore.core.codec", "airflow_logstore.log.scan"},
    }
    assert layer_violations(graph) == [
        "airflow_logstore.core.codec imports airflow_logstore.log.kafka_client: a higher layer",
        "airflow_logstore.read.reader imports airflow_logstore.write.writer: "
        "a sibling package of the same layer",
    ]


def test_planted_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_lazy_and_type_checking_imports_count() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from airflow_logstore.cli import app\n"
        "def f():\n    from airflow_logstore.log import kafka_client\n"
    )
    modules = {"airflow_logstore.cli.app", "airflow_logstore.log.kafka_client"}
    assert imports_of(source, modules) == {"airflow_logstore.cli.app", "airflow_logstore.log.kafka_client"}


@pytest.mark.parametrize("area_name", sorted(LAYER_OF))
def test_each_layer_name_exists(area_name: str) -> None:
    """A layer that names a package that is gone is a stale map."""
    assert (PACKAGE / area_name).is_dir() or (PACKAGE / f"{area_name}.py").exists()


DEV_PACKAGE = "logstore_dev"


def dev_imports(source: str) -> list[str]:
    """Where ``source`` imports the development package: ``import``/``from`` statements anywhere, and a
    string that is one of its module names (what ``importlib.import_module`` would be given)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] if node.level == 0 else []
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value.isidentifier() or "." in node.value.strip(".") else []
            names = [name for name in names if all(part.isidentifier() for part in name.split("."))]
        else:
            continue
        found += [(node.lineno, name) for name in names if name.split(".")[0] == DEV_PACKAGE]
    return [f"line {line}: {name}" for line, name in sorted(found)]


def test_the_package_never_imports_the_development_package() -> None:
    """The wheel ships ``airflow_logstore`` without ``logstore_dev``: an import of it would fail in every
    deployment (tests/install/test_dists.py looks into the built wheel as well)."""
    found = {
        module_name(path): hits for path in PACKAGE.rglob("*.py") if (hits := dev_imports(path.read_text()))
    }
    assert found == {}


def test_a_development_import_is_found() -> None:
    source = (
        "import os\nif os:\n    from logstore_dev.services.local import LocalBroker\n"
        "def f():\n    import logstore_dev\n    return importlib.import_module('logstore_dev.demo')\n"
        "'''Prose may name logstore_dev.demo (the demo).'''\nfrom . import logstore_dev\n"
    )
    assert dev_imports(source) == [
        "line 3: logstore_dev.services.local",
        "line 5: logstore_dev",
        "line 6: logstore_dev.demo",
    ]
