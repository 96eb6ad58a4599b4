"""pyproject.toml states ranges, constraints.txt the tested set: the pins must lie inside the ranges."""

from __future__ import annotations

import importlib.metadata
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from airflow_logstore import versions
from airflow_logstore.testing.environment import REPO_ROOT


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[canonicalize_name(name)] = version
    return pins


def test_every_dependency_is_pinned_inside_its_range() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = [line for group in project["optional-dependencies"].values() for line in group]
    pins = _pins()
    for line in [*project["dependencies"], *extras]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        if name == "airflow-logstore":  # the dev extra names the test extra
            continue
        assert name in pins, f"constraints.txt does not pin {name}"
        assert requirement.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {line!r}"


def test_pyspark_pins_match_the_spark_jars() -> None:
    """pyspark-client installs over pyspark's files; both are the Spark of versions.py's jars."""
    pins = _pins()
    assert pins["pyspark"] == pins["pyspark-client"], "constraints.txt must pin pyspark, pyspark-client equal"
    assert pins["pyspark"] == versions.SPARK_VERSION


def test_this_environments_pyspark_and_pyspark_client_are_one_release() -> None:
    """The ranges alone let the two drift by a patch release (pyspark 4.1.4 with pyspark-client 4.1.3 was
    seen): the files of one then overwrite the other's. Every environment of ./dev test has both equal."""
    installed = {name: importlib.metadata.version(name) for name in ("pyspark", "pyspark-client")}
    assert len(set(installed.values())) == 1, (
        f"pyspark and pyspark-client differ here: {installed}; install both at one version"
    )
