"""pyproject.toml states ranges, constraints.txt the tested set: the pins must lie inside the ranges."""

from __future__ import annotations

import importlib.metadata
import tomllib
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from airflow_logstore import versions
from airflow_logstore.exceptions import InstallationError
from airflow_logstore.spark.session import check_pyspark_release
from logstore_dev.testing.environment import REPO_ROOT


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


def _installed(**versions: str) -> Any:
    """``importlib.metadata.version`` of an environment holding ``versions`` (``pyspark_client=...``)."""

    def version(name: str) -> str:
        key = name.replace("-", "_")
        if key not in versions:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[key]

    return version


def test_pyspark_and_pyspark_client_of_two_releases_fail_naming_the_versions_to_align() -> None:
    """What a plain ``pip install`` of the wheel resolved with Airflow 3.2.2 (pip check is content)."""
    with pytest.raises(InstallationError) as mismatch:
        check_pyspark_release(_installed(pyspark="4.1.4", pyspark_client="4.1.3"))
    assert str(mismatch.value).startswith("pyspark 4.1.4 and pyspark-client 4.1.3 are installed together")
    assert str(mismatch.value).endswith('pip install "pyspark==4.1.3" "pyspark-client==4.1.3"')
    with pytest.raises(InstallationError, match=r'pip install "pyspark==4.1.9" "pyspark-client==4.1.9"'):
        check_pyspark_release(_installed(pyspark="4.1.10", pyspark_client="4.1.9"))
    with pytest.raises(InstallationError, match=r'without pyspark: .* pip install "pyspark==4.1.3"'):
        check_pyspark_release(_installed(pyspark_client="4.1.3"))
    check_pyspark_release(_installed(pyspark="4.1.1", pyspark_client="4.1.1"))
    check_pyspark_release(_installed(pyspark="4.1.1"))


def test_a_mismatch_stops_a_spark_job_before_it_is_submitted_or_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checked where Spark starts (the operators' spark-submit, a session), not on provider import."""
    from airflow_logstore.operators import _spark
    from airflow_logstore.spark import session

    monkeypatch.setattr(importlib.metadata, "version", _installed(pyspark="4.1.4", pyspark_client="4.1.3"))
    two_releases = r"^pyspark 4\.1\.4 and pyspark-client 4\.1\.3 are installed together"
    with pytest.raises(InstallationError, match=two_releases):
        session.build_spark_session()
    submit = _spark.spark_submit_hook(
        catalog=None,  # type: ignore[arg-type]
        kafka_extra={},
        conn_id="spark_default",
        name="x",
        application_args=[],
        jars="",
        python=None,
    )
    with pytest.raises(InstallationError, match=two_releases), submit:
        raise AssertionError("submitted")
