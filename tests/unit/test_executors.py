"""What Spark executors get: the installed package as a zip (--py-files) and one list of requirements."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

import airflow_logstore
from airflow_logstore.spark.executors import EXECUTOR_MODULES, EXECUTOR_REQUIREMENTS, package_zip
from airflow_logstore.testing.environment import REPO_ROOT

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
    assert names == expected | {"airflow_logstore/py.typed"}
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
    dockerfile = (REPO_ROOT / "docker" / "spark.Dockerfile").read_text()
    assert "pip install --no-cache-dir -c constraints.txt $(python3 -m airflow_logstore.spark.executors)" in (
        dockerfile
    )
    assert "COPY constraints.txt" in dockerfile
