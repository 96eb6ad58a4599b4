"""The distributions a user installs: build the sdist and the wheel as a release would, and look inside."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement

import airflow_logstore
from airflow_logstore.javac import PROGRAMS, SOURCE_DIGEST_ATTRIBUTE, source_digest
from airflow_logstore.spark_apps import APPLICATIONS
from logstore_dev.testing.environment import REPO_ROOT
from tests.unit.test_layout import DEV_PACKAGE, dev_imports


def _wheel_metadata(wheel: Path) -> tuple[list[str], Message, str]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = f"airflow_logstore-{airflow_logstore.__version__}.dist-info"
        metadata = Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
    return names, metadata, entry_points


def test_twine_check_passes_on_sdist_and_wheel(dists: tuple[Path, Path]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, dists)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2


def test_wheel_has_no_top_level_spark_jobs_and_ships_the_applications(dists: tuple[Path, Path]) -> None:
    names, _, _ = _wheel_metadata(dists[1])
    top_levels = {name.split("/", 1)[0] for name in names}
    # pyspark_logstore: the one line PySpark looks for to find the ``logstore`` data source by itself
    assert top_levels == {
        "airflow_logstore",
        "pyspark_logstore",
        f"airflow_logstore-{airflow_logstore.__version__}.dist-info",
    }
    assert "airflow_logstore/py.typed" in names
    assert "airflow_logstore/write/java/LogProducer.java" in names  # the dual write's producer
    assert "airflow_logstore/log/java/LogScan.java" in names  # the reconciler's JVM scan
    assert "airflow_logstore/plugins/logstore_view.html" in names  # the LogStore view's page
    for app in APPLICATIONS:
        assert f"airflow_logstore/spark_apps/{app}" in names


def test_the_wheel_ships_no_development_setup(dists: tuple[Path, Path]) -> None:
    """logstore_dev (local brokers, PostgreSQL, Spark standalone, a local Airflow, the test environment, the
    demo: ./dev's commands) stays in the repository: none of its files is in the wheel, no shipped module
    imports it, and the wheel's ``logstore`` has no development command."""
    with zipfile.ZipFile(dists[1]) as wheel:
        names = wheel.namelist()
        importing = {
            name: found
            for name in names
            if name.endswith(".py") and (found := dev_imports(wheel.read(name).decode()))
        }
    assert [name for name in names if name.split("/")[0] == DEV_PACKAGE] == []
    assert importing == {}
    commands = {Path(name).stem for name in names if name.startswith("airflow_logstore/cli/commands/")}
    assert not commands & {"services", "airflow", "demo"}, commands
    assert "read" in commands and "write" in commands


def test_wheel_ships_the_java_programs_built_for_java_17(dists: tuple[Path, Path]) -> None:
    """Each program's jar, compiled from the source the wheel ships, runs on a JRE 17 (class file 61)."""
    with zipfile.ZipFile(dists[1]) as wheel:
        for program in PROGRAMS:
            folder = "airflow_logstore/" + program.package.removeprefix("airflow_logstore.").replace(".", "/")
            source = wheel.read(f"{folder}/java/{program.file}").decode()
            with zipfile.ZipFile(io.BytesIO(wheel.read(f"{folder}/{program.jar_path}"))) as jar:
                manifest = jar.read("META-INF/MANIFEST.MF").decode()
                main = jar.read(program.class_name.replace(".", "/") + ".class")
                classes = [name for name in jar.namelist() if name.endswith(".class")]
            assert f"{SOURCE_DIGEST_ATTRIBUTE}: {source_digest(source)}" in manifest
            assert main[:4] == b"\xca\xfe\xba\xbe" and int.from_bytes(main[6:8], "big") == 61, program
            assert all(name.startswith("airflow_logstore/") for name in classes), classes


def test_wheel_version_and_entry_points(dists: tuple[Path, Path]) -> None:
    _, metadata, entry_points = _wheel_metadata(dists[1])
    assert metadata["Version"] == airflow_logstore.__version__
    assert airflow_logstore.get_provider_info()["versions"] == [airflow_logstore.__version__]
    assert "[apache_airflow_provider]\nprovider_info = airflow_logstore:get_provider_info" in entry_points
    assert "[console_scripts]\nlogstore = airflow_logstore.cli:main" in entry_points
    plugin = "logstore = airflow_logstore.plugins.logstore_view:LogStoreViewPlugin"
    assert f"[airflow.plugins]\n{plugin}" in entry_points


def test_sdist_carries_the_package_and_its_marker(dists: tuple[Path, Path]) -> None:
    sdist = dists[0]
    root = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as archive:
        names = set(archive.getnames())
    for expected in ("pyproject.toml", "README.md", "PKG-INFO", "airflow_logstore/py.typed"):
        assert f"{root}/{expected}" in names
    assert f"{root}/airflow_logstore/spark_apps/dual_write_app.py" in names


def test_wheel_states_ranges_not_pins(dists: tuple[Path, Path]) -> None:
    """Users install into their own Airflow with their own constraints: nothing is pinned exactly."""
    _, metadata, _ = _wheel_metadata(dists[1])
    requires = [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    runtime = [r for r in requires if r.marker is None]
    assert {r.name for r in runtime} >= {"apache-airflow", "pyspark", "pyiceberg", "confluent-kafka"}
    for requirement in runtime:
        operators = {spec.operator for spec in requirement.specifier}
        assert "==" not in operators and ">=" in operators, requirement
    assert metadata["Requires-Python"] == ">=3.11"


def test_the_license_classifiers_and_urls_are_in_the_wheel(dists: tuple[Path, Path]) -> None:
    names, metadata, _ = _wheel_metadata(dists[1])
    info = f"airflow_logstore-{airflow_logstore.__version__}.dist-info"
    assert f"{info}/licenses/LICENSE" in names and metadata["License-File"] == "LICENSE"
    assert metadata["License-Expression"] == "Apache-2.0"
    with zipfile.ZipFile(dists[1]) as archive:
        text = archive.read(f"{info}/licenses/LICENSE").decode()
    assert text == (REPO_ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    classifiers = metadata.get_all("Classifier") or []
    assert {"Framework :: Apache Airflow", "Framework :: Apache Airflow :: Provider"} <= set(classifiers)
    urls = dict(line.split(", ", 1) for line in metadata.get_all("Project-URL") or [])
    assert {"Homepage", "Source", "Changelog", "Issues"} <= set(urls), urls
    assert urls["Source"] == airflow_logstore.get_provider_info()["integrations"][0]["external-doc-url"]
    # the README is PyPI's page: its links work outside the repository
    assert "](docs/" not in metadata.get_payload() and "](http" in metadata.get_payload()


def test_the_sdist_carries_the_license_docs_example_dags_and_tests(dists: tuple[Path, Path]) -> None:
    root = dists[0].name.removesuffix(".tar.gz")
    with tarfile.open(dists[0]) as archive:
        names = set(archive.getnames())
    for expected in (
        "LICENSE",
        "CHANGELOG.md",
        "docs/PROTOCOL.md",
        "dags/logstore_pipeline.py",
        "dags/data/orders_batch_1.jsonl",
        "tests/install/test_dists.py",
        "tests/integration/conftest.py",
        "logstore_dev/__main__.py",  # the tests' development package (not in the wheel)
        "logstore_dev/testing/environment.py",
    ):
        assert f"{root}/{expected}" in names, expected
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]


def test_the_wheel_ships_the_example_dags_and_their_data(dists: tuple[Path, Path]) -> None:
    names, _, _ = _wheel_metadata(dists[1])
    for dag in (REPO_ROOT / "dags").glob("*.py"):
        assert f"airflow_logstore/example_dags/{dag.name}" in names, dag.name
    for data in (REPO_ROOT / "dags" / "data").iterdir():
        assert f"airflow_logstore/example_dags/data/{data.name}" in names, data.name
    with zipfile.ZipFile(dists[1]) as archive:  # the files themselves, not links to dags/
        shipped = archive.read("airflow_logstore/example_dags/logstore_pipeline.py")
    assert shipped == (REPO_ROOT / "dags" / "logstore_pipeline.py").read_bytes()
