"""The root package's stable API: exactly the names README's "Public API" lists, each importable, and an
``import airflow_logstore`` that imports none of them (Airflow imports the package to discover it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import airflow_logstore

README = Path(__file__).resolve().parents[2] / "README.md"


def documented_names() -> list[str]:
    """The names in the first column of README's "Public API" table."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Public API\n", 1)[1].split("\n## ", 1)[0]
    names: list[str] = []
    for line in section.splitlines():
        if line.startswith("| `"):
            names += re.findall(r"`(\w+)`", line.split("|")[1])
    return names


def test_all_is_exactly_the_documented_list() -> None:
    documented = documented_names()
    assert len(documented) == len(set(documented)) == len(airflow_logstore.__all__)
    assert sorted(documented) == sorted(airflow_logstore.__all__)


@pytest.mark.parametrize("name", airflow_logstore.__all__)
def test_each_public_name_imports(name: str) -> None:
    value = getattr(airflow_logstore, name)
    assert getattr(value, "__name__", None) == name
    assert value.__module__.startswith("airflow_logstore")


def test_star_import_gives_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from airflow_logstore import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(airflow_logstore.__all__)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'LogStoreWriter'"):
        airflow_logstore.LogStoreWriter  # noqa: B018 - the access under test


def test_importing_the_package_imports_no_heavy_module() -> None:
    """What provider discovery costs: the package alone, none of Airflow, Spark, Iceberg or Kafka."""
    probe = (
        "import json, sys, airflow_logstore; airflow_logstore.get_provider_info(); "
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    loaded = set(json.loads(done.stdout))
    tops = {module.split(".")[0] for module in loaded}
    assert not tops & {"airflow", "pyspark", "pyiceberg", "confluent_kafka", "pyarrow", "pandas"}
    assert {m for m in loaded if m.startswith("airflow_logstore")} == {"airflow_logstore"}
