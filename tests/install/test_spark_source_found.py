"""A plain PySpark application in an environment with the wheel installed finds ``format("logstore")``
without any code of the user's: PySpark registers the ``DefaultSource`` of ``pyspark_logstore``.

No LogStore table is needed to show it: the read of a table that does not exist fails with the source's
own message, which names the option, where an unregistered name would fail with Spark's
``DATA_SOURCE_NOT_FOUND``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.install.test_other_airflow import _run

APPLICATION = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
for reader in (spark.read, spark.readStream):
    try:
        reader.format("logstore").load("ns.no_such_table")
        print("LOADED")
    except Exception as exc:
        print(str(exc).replace(chr(10), " "))
spark.stop()
"""


def test_a_plain_pyspark_application_finds_the_logstore_source(
    dists: tuple[Path, Path],
    user_env: tuple[Path, dict[str, str]],
    tmp_path: Path,
) -> None:
    folder, env = user_env
    python = folder / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    _run([*pip, str(dists[1])], env)  # with its dependencies (pyspark), as a user installs it
    _run([*pip, "--force-reinstall", "--no-deps", str(dists[1])], env)  # this build, not an older 0.1.0
    result = subprocess.run(
        [str(python), "-c", APPLICATION],
        env={**env, "LOGSTORE_HOME": str(tmp_path / "home")},
        cwd=tmp_path,  # not the checkout: only the installed package can be found
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if "ns.no_such_table" in line or "LOADED" in line]
    assert len(lines) == 2, result.stdout[-3000:]
    for line in lines:
        assert "option 'table': table 'ns.no_such_table' does not exist in catalog" in line, line
