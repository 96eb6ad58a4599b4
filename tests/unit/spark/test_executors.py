"""What Spark executors get: the installed package as a zip (--py-files) and one list of requirements."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import airflow_logstore
from airflow_logstore.exceptions import ServiceError
from airflow_logstore.services.cluster import EXECUTOR_PYTHON_ENV, ClusterSecrets, LocalCluster
from airflow_logstore.services.topology import COMPOSE_EXECUTOR_PYTHON
from airflow_logstore.settings import local_settings
from airflow_logstore.spark.executors import (
    EXECUTOR_MODULES,
    EXECUTOR_REQUIREMENTS,
    SPARK_PROVIDED,
    package_zip,
)
from airflow_logstore.testing.environment import REPO_ROOT
from tests.environments import PYTHON as TESTED_PYTHON

# Runs in a fresh interpreter: the zip first on sys.path (as --py-files puts it), Airflow unimportable.
_IMPORT_FROM_ZIP = """
import importlib, importlib.abc, json, sys
class NoAirflow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "airflow" or name.startswith("airflow."):
            raise ImportError("executors have no Airflow: " + name)
sys.meta_path.insert(0, NoAirflow())
sys.path.insert(0, sys.argv[1])
files = {name: importlib.import_module(name).__file__ for name in sys.argv[2:]}
print(json.dumps(files))
"""


def test_zip_holds_the_installed_package_and_is_reused(tmp_path: Path) -> None:
    first = package_zip(tmp_path)
    assert package_zip(tmp_path) == first
    assert first.name.startswith(f"airflow_logstore-{airflow_logstore.__version__}-")
    with zipfile.ZipFile(first) as archive:
        names = set(archive.namelist())
    root = Path(airflow_logstore.__file__).resolve().parent
    expected = {
        f"airflow_logstore/{p.relative_to(root)}" for p in root.rglob("*.py") if "__pycache__" not in p.parts
    }
    java = {  # the driver compiles the log producer; the reconciler's scan is compiled where it runs
        "airflow_logstore/write/java/LogProducer.java",
        "airflow_logstore/log/java/LogScan.java",
    }
    assert names == expected | {"airflow_logstore/py.typed"} | java
    assert not any("__pycache__" in name or name.endswith(".pyc") for name in names)


def test_executor_modules_import_from_the_zip_without_airflow(tmp_path: Path) -> None:
    archive = package_zip(tmp_path)
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_FROM_ZIP, str(archive), *EXECUTOR_MODULES],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository: the package must come from the zip
        check=False,
    )
    assert result.returncode == 0, result.stderr
    files = json.loads(result.stdout.splitlines()[-1])
    assert set(files) == set(EXECUTOR_MODULES)
    assert all(path.startswith(str(archive)) for path in files.values()), files


def test_requirements_are_package_dependencies_pinned_by_constraints() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    runtime = {Requirement(line).name: Requirement(line) for line in project["dependencies"]}
    pins = {
        line.split("==", 1)[0]: line.split("==", 1)[1]
        for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    for line in EXECUTOR_REQUIREMENTS:
        requirement = Requirement(line)
        assert not requirement.name.startswith("apache-airflow")
        assert requirement.name in runtime, f"{requirement.name} is not a dependency of the package"
        assert requirement.extras <= runtime[requirement.name].extras
        assert runtime[requirement.name].specifier.contains(pins[requirement.name])


def test_the_spark_image_installs_that_list_with_the_constraints() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "airflow_logstore.spark.executors"],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO_ROOT,
    ).stdout.split()
    assert printed == list(EXECUTOR_REQUIREMENTS)
    dockerfile = _dockerfile("spark")
    python = f"{_executors_environment(dockerfile)[1]}/bin/python"
    install = f"uv pip install --no-cache --compile-bytecode --python {python} -c constraints.txt"
    assert f"{install} $({python} -m airflow_logstore.spark.executors)" in dockerfile
    assert "COPY constraints.txt" in dockerfile


# -- the Spark image's executors run the Airflow image's Python version -------------------------------------


def _dockerfile(image: str) -> str:
    """``docker/<image>.Dockerfile`` with its continuation lines joined and its spaces collapsed."""
    text = (REPO_ROOT / "docker" / f"{image}.Dockerfile").read_text().replace("\\\n", " ")
    lines = (" ".join(line.split()) for line in text.splitlines() if not line.lstrip().startswith("#"))
    return "\n".join(lines)


def _airflow_python(dockerfile: str) -> str:
    """The Python version of the Airflow image: its base image's tag, ``apache/airflow:<v>-pythonX.Y``."""
    found = re.search(r"^FROM apache/airflow:\S+-python(\d+\.\d+)$", dockerfile, re.MULTILINE)
    assert found, "docker/airflow.Dockerfile: no 'FROM apache/airflow:<version>-pythonX.Y'"
    return found.group(1)


def _executors_environment(dockerfile: str) -> tuple[str, str]:
    """The Python version and folder of the environment the Spark image builds for its executors
    (``uv venv ... --python X.Y <folder>``)."""
    found = re.search(r"\buv venv (?:--\S+ )*--python (\d+\.\d+) (/\S+)", dockerfile)
    assert found, (
        "docker/spark.Dockerfile builds no Python environment for the executors ('uv venv --python X.Y "
        "<folder>'): they would run the base image's python3 (Ubuntu jammy's 3.10), which PySpark refuses "
        "when the driver, in the Airflow image, runs another minor version"
    )
    return found.group(1), found.group(2)


def test_the_spark_images_executors_run_the_airflow_images_python_version() -> None:
    """PySpark refuses to run when the executors' Python and the driver's (an Airflow task's, client deploy
    mode) differ in minor version; the Spark image builds the executors' environment for the Airflow
    image's version, the version of the ``executors`` environment the cluster tests run on, at the path
    Airflow's tasks send with every job (docker-compose.yml's ``PYSPARK_PYTHON``, checked there)."""
    spark = _dockerfile("spark")
    version, folder = _executors_environment(spark)
    airflow = _airflow_python(_dockerfile("airflow"))
    assert version == airflow, (
        f"the Spark image's executors run Python {version}, the Airflow image's drivers {airflow}"
    )
    assert version == TESTED_PYTHON, f"the cluster tests' executors run {TESTED_PYTHON}, the image {version}"
    python = f"{folder}/bin/python"
    assert python == COMPOSE_EXECUTOR_PYTHON, f"Airflow's tasks send {COMPOSE_EXECUTOR_PYTHON}, not {python}"
    environment = dict(
        pair.split("=", 1) for line in re.findall(r"^ENV (.*)$", spark, re.MULTILINE) for pair in line.split()
    )
    assert environment.get("PYSPARK_PYTHON") == python  # the workers' default, as the cluster profile's
    assert environment.get("PATH", "").startswith(f"{folder}/bin:")  # python3 there, for a driver naming none


# -- every third-party import of the executors' code is in the list ---------------------------------------

PACKAGE_ROOT = Path(airflow_logstore.__file__).resolve().parents[1]


def _module_file(name: str, root: Path) -> Path | None:
    path = root.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(name: str, root: Path) -> list[str]:
    """Every module ``name`` imports, at the top or inside a function (lazily), but not under
    ``if TYPE_CHECKING:``; ``from m import x`` counts ``m`` and, when it is a module, ``m.x``."""
    path = _module_file(name, root)
    assert path is not None, name
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[str] = []

    class Visitor(ast.NodeVisitor):
        def visit_If(self, node: ast.If) -> None:
            test = node.test
            if getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
                for statement in node.orelse:
                    self.visit(statement)
            else:
                self.generic_visit(node)

        def visit_Import(self, node: ast.Import) -> None:
            found.extend(alias.name for alias in node.names)

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.append(module)
            found.extend(f"{module}.{a.name}" for a in node.names if _module_file(f"{module}.{a.name}", root))

    Visitor().visit(ast.parse(path.read_text()))
    return found


def third_party_imports(modules: tuple[str, ...], root: Path) -> dict[str, set[str]]:
    """Top-level third-party modules imported by ``modules`` and, transitively, by every module of their
    own package (``modules[0]``'s top-level name) that they import: name -> the modules importing it."""
    own = modules[0].split(".")[0]
    seen: set[str] = set()
    pending = list(modules)
    third: dict[str, set[str]] = {}
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        pending.extend(".".join(parts[:i]) for i in range(1, len(parts)))  # parent packages run first
        for imported in _imports(name, root):
            top = imported.split(".")[0]
            if top == own:
                pending.append(imported if _module_file(imported, root) else imported.rpartition(".")[0])
            elif top not in sys.stdlib_module_names and top != "__future__":
                third.setdefault(top, set()).add(name)
    return third


def _distributions(line: str) -> set[str]:
    """The distribution of a requirement and those its extras add (not its plain dependencies: code that
    imports one of those must name it)."""
    requirement = Requirement(line)
    names = {canonicalize_name(requirement.name)}
    for dependency in map(Requirement, importlib.metadata.requires(requirement.name) or []):
        marker = dependency.marker
        if not marker or marker.evaluate({"extra": ""}):
            continue  # a plain dependency
        if any(marker.evaluate({"extra": extra}) for extra in requirement.extras):
            names.add(canonicalize_name(dependency.name))
    return names


def provided_modules(requirements: tuple[str, ...]) -> set[str]:
    """The top-level import names the installed distributions of ``requirements`` provide."""
    distributions = set().union(*map(_distributions, requirements))
    return {
        module
        for module, owners in importlib.metadata.packages_distributions().items()
        if distributions & {canonicalize_name(owner) for owner in owners}
    }


def test_the_import_scan_follows_lazy_imports_through_the_package(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("import json\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "entry.py").write_text(
        "from typing import TYPE_CHECKING\nimport top_level\nfrom . import helper\n"
        "if TYPE_CHECKING:\n    import only_for_types\n"
        "def run():\n    from lazy.part import thing\n"
    )
    (package / "sub" / "helper.py").write_text("def later():\n    import deep_lazy.x\n")
    (package / "unused.py").write_text("import never_loaded\n")
    found = third_party_imports(("pkg.sub.entry",), tmp_path)
    assert found == {
        "top_level": {"pkg.sub.entry"},
        "lazy": {"pkg.sub.entry"},
        "deep_lazy": {"pkg.sub.helper"},
    }


def test_every_third_party_import_of_the_executors_is_in_the_list() -> None:
    """What executors load (EXECUTOR_MODULES and the package modules they import, lazy imports too) may
    import only what EXECUTOR_REQUIREMENTS and Spark itself provide: a package that is there only because
    .venv has it (Airflow, a dependency of a dependency) would be missing on the workers."""
    imported = third_party_imports(EXECUTOR_MODULES, PACKAGE_ROOT)
    provided = provided_modules(EXECUTOR_REQUIREMENTS + SPARK_PROVIDED)
    missing = {module: sorted(users) for module, users in imported.items() if module not in provided}
    assert not missing, f"executors import what no distribution of EXECUTOR_REQUIREMENTS provides: {missing}"
    assert {"pyarrow", "pyiceberg", "confluent_kafka", "numpy", "pyspark"} <= set(imported)  # the scan works


# -- the cluster profile's workers run the executors' Python -------------------------------------------------


def test_the_cluster_profiles_workers_run_the_python_its_setting_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cluster() -> LocalCluster:
        built = LocalCluster(
            local_settings({"LOGSTORE_HOME": str(tmp_path)}),
            state_dir=tmp_path / "cluster",
            cluster_secrets=ClusterSecrets("key", "secret", "password"),
        )
        monkeypatch.setattr(built, "jars_dir", lambda: tmp_path / "jars")  # no jar lookups here
        return built

    monkeypatch.delenv(EXECUTOR_PYTHON_ENV, raising=False)
    default = cluster()
    assert default.service("spark").python == sys.executable  # unset: this interpreter, as before
    assert "PYSPARK_PYTHON" not in default.driver_env()

    python = tmp_path / "executors" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    monkeypatch.setenv(EXECUTOR_PYTHON_ENV, str(python))
    chosen = cluster()
    assert chosen.service("spark").python == str(python)  # the workers' PYSPARK_PYTHON and python3
    assert chosen.driver_env()["PYSPARK_PYTHON"] == str(python)  # what Airflow's tasks send with jobs

    monkeypatch.setenv(EXECUTOR_PYTHON_ENV, str(tmp_path / "missing"))
    with pytest.raises(ServiceError, match=f"{EXECUTOR_PYTHON_ENV}.*is not an executable file"):
        cluster()
