"""The example DAGs ship in the package (``airflow_logstore/example_dags``) and ``logstore dags`` copies
them into a DAGs folder; in a checkout they are the repository's ``dags/`` files, one copy of each."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_logstore.cli.commands.dags import copy_examples, example_files
from airflow_logstore.exceptions import OptionError
from airflow_logstore.settings import EXAMPLE_DAGS
from airflow_logstore.testing.environment import REPO_ROOT


def _tree(folder: Path) -> dict[str, bytes]:
    """The files under ``folder`` (through links, as Airflow walks a DAGs folder) and their bytes."""
    return {
        str(Path(root, name).relative_to(folder)): Path(root, name).read_bytes()
        for root, _, names in os.walk(folder, followlinks=True)
        for name in names
        if "__pycache__" not in root and name != "__init__.py"
    }


def test_the_package_ships_the_repositorys_example_dags() -> None:
    assert EXAMPLE_DAGS == REPO_ROOT / "airflow_logstore" / "example_dags"
    shipped = _tree(EXAMPLE_DAGS)
    assert shipped == _tree(REPO_ROOT / "dags")
    assert {"logstore_pipeline.py", "logstore_reconcile.py", "data/orders_batch_1.jsonl"} <= set(shipped)
    assert {p.name for p in example_files()} == {"data", *(p.name for p in (REPO_ROOT / "dags").glob("*.py"))}


def test_copy_puts_them_in_a_dags_folder_airflow_parses(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dest = tmp_path / "airflow" / "dags"
    written = copy_examples(dest)
    assert {p.name for p in written} == {p.name for p in example_files()}
    assert _tree(dest) == _tree(EXAMPLE_DAGS) and not (dest / "__init__.py").exists()
    bag = DagBag(dag_folder=str(dest))
    assert bag.import_errors == {}
    assert {"logstore_pipeline", "logstore_reconcile", "logstore_compaction"} <= set(bag.dag_ids)

    (dest / "logstore_pipeline.py").write_text("# the user's own edits\n")
    with pytest.raises(
        OptionError, match=r"already has data, .*logstore_pipeline.py.*; pass --force to replace them"
    ):
        copy_examples(dest)
    assert (dest / "logstore_pipeline.py").read_text() == "# the user's own edits\n"
    copy_examples(dest, force=True)
    assert _tree(dest) == _tree(EXAMPLE_DAGS)


def test_the_cli_names_the_shipped_folder_not_a_checkout() -> None:
    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "airflow_logstore.cli", *args], capture_output=True, text=True, check=True
        )
        return done.stdout

    assert cli("dags", "path").strip() == str(EXAMPLE_DAGS)
    demo_help = " ".join(cli("demo", "--help").split())
    assert "checkout" not in demo_help and "'logstore dags path'" in demo_help
