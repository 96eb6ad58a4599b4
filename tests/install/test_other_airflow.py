"""The built wheel goes into an environment that already runs another Airflow 3.x release, as a user's does.

The environment (``tests.environments.airflow_env``, cached under ``.cache/envs/``) holds only Airflow
``OTHER_AIRFLOW``; the wheel is installed with pip, the way a user adds a provider to a deployment.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from logstore_dev.testing.environment import REPO_ROOT
from tests.environments import OTHER_AIRFLOW

EXAMPLE_DAGS = {"logstore_pipeline", "logstore_reconcile", "logstore_compaction", "logstore_downstream"}

_DAGBAG = """
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={folder!r}, include_examples=False)
errors = {{path: str(error) for path, error in bag.import_errors.items()}}
print(json.dumps({{"errors": errors, "dags": sorted(bag.dag_ids)}}))
"""


def _pinned_airflow() -> str:
    for line in (REPO_ROOT / "constraints.txt").read_text().splitlines():
        if line.startswith("apache-airflow=="):
            return line.split("==", 1)[1]
    raise AssertionError("constraints.txt pins no apache-airflow")


def _run(args: list[str], env: dict[str, str]) -> str:
    result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _airflow_version(python: Path, env: dict[str, str]) -> str:
    return _run([str(python), "-c", "import airflow; print(airflow.__version__)"], env).strip()


def test_wheel_installs_into_another_airflow_without_touching_it(
    dists: tuple[Path, Path], user_env: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    folder, env = user_env
    python = folder / "bin" / "python"
    # the user's environment as it was: no LogStore left from an earlier run of this test
    _run([str(python), "-m", "pip", "uninstall", "--yes", "--quiet", "airflow-logstore"], env)
    before = _airflow_version(python, env)
    assert before == OTHER_AIRFLOW != _pinned_airflow()

    _run([str(python), "-m", "pip", "install", "--quiet", str(dists[1])], env)

    assert _airflow_version(python, env) == before
    airflow = str(folder / "bin" / "airflow")
    providers = json.loads(_run([airflow, "providers", "list", "--output", "json"], env))
    logstore = [p for p in providers if p["package_name"] == "airflow-logstore"]
    assert len(logstore) == 1, providers

    dags = tmp_path / "dags"
    shutil.copytree(REPO_ROOT / "dags", dags)
    bag = json.loads(_run([str(python), "-c", _DAGBAG.format(folder=str(dags))], env).splitlines()[-1])
    assert bag["errors"] == {}
    assert set(bag["dags"]) >= EXAMPLE_DAGS


_RELEASES = """
import importlib.metadata as m, json
from airflow_logstore.exceptions import InstallationError
from airflow_logstore.spark.session import check_pyspark_release
try:
    check_pyspark_release()
    error = None
except InstallationError as exc:
    error = str(exc)
print(json.dumps({"pyspark": m.version("pyspark"), "client": m.version("pyspark-client"), "error": error}))
"""


def test_a_plain_install_has_one_spark_release_or_says_which_to_align(
    dists: tuple[Path, Path], user_env: tuple[Path, dict[str, str]]
) -> None:
    """A plain ``pip install`` resolves pyspark and pyspark-client each to its newest: one release
    works; two fail where Spark starts, naming the versions to align (never silently)."""
    folder, env = user_env
    python = str(folder / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", str(dists[1])], env)
    found = json.loads(_run([python, "-c", _RELEASES], env).splitlines()[-1])
    if found["pyspark"] == found["client"]:
        assert found["error"] is None, found
    else:
        assert found["error"].startswith(
            f"pyspark {found['pyspark']} and pyspark-client {found['client']} are installed together"
        ), found


def test_the_installed_package_copies_its_example_dags_into_a_dags_folder(
    dists: tuple[Path, Path], user_env: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """No checkout needed: ``logstore dags copy`` takes the DAGs shipped in the wheel."""
    folder, env = user_env
    python = str(folder / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", str(dists[1])], env)
    dags = tmp_path / "user-dags"
    _run([str(folder / "bin" / "logstore"), "dags", "copy", str(dags)], env)
    assert (dags / "data" / "orders_batch_1.jsonl").is_file()
    bag = json.loads(_run([python, "-c", _DAGBAG.format(folder=str(dags))], env).splitlines()[-1])
    assert bag["errors"] == {}
    assert set(bag["dags"]) >= EXAMPLE_DAGS
