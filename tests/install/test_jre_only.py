"""The built wheel runs a dual write where Java is only a runtime: no ``javac`` anywhere.

Airflow workers and Spark images often have a JRE only. The wheel carries its Java programs built
(``setup.py``); here it is installed into the ``airflow`` environment (as in test_other_airflow.py) and
runs ``logstore write`` with ``JAVA_HOME`` and ``PATH`` on a JRE made with ``jlink`` from this machine's
JDK (cached in ``LOGSTORE_CACHE``) and a ``PATH`` without any JDK tool, against a real broker and
catalog. A source checkout in the same place has neither the jar nor a compiler: a clear error.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_logstore.javac import javac_binary
from airflow_logstore.publish.publisher import publish_visible_offsets
from airflow_logstore.read.reader import read_log
from logstore_dev.testing.environment import REPO_ROOT, LogStoreTestEnv, logstore_environment
from logstore_dev.testing.tables import make_table, table_state, write_jsonl

#: The JDK's development tools (and the modules only they use): what a JRE leaves out. The JRE keeps
#: every other module of the JDK, as a distribution's JRE package does (Spark needs, among others,
#: jdk.unsupported, jdk.security.auth for Hadoop's login, and jdk.incubator.vector).
JDK_TOOL_MODULES = frozenset(
    f"jdk.{name}"
    for name in (
        "compiler", "javadoc", "jshell", "jdeps", "jlink", "jpackage", "jartool", "editpad", "jconsole",
        "jcmd", "jdi", "jdwp.agent", "jstatd", "hotspot.agent", "internal.ed", "internal.le", "internal.opt",
    )
)  # fmt: skip
ROWS = [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}, {"id": 3, "name": "c"}]


def _jdk_home() -> Path:
    found = javac_binary()
    assert found is not None, "the packaging tests build the wheel: they need a JDK"
    return Path(found).resolve().parent.parent


@pytest.fixture(scope="module")
def jre() -> Path:
    """A JRE (``jlink``) of this machine's JDK, built once per JDK and module list into the cache."""
    jdk = _jdk_home()
    release = (jdk / "release").read_text()
    modules = [m for m in _release_value(release, "MODULES").split() if m not in JDK_TOOL_MODULES]
    key = hashlib.sha256(f"{release}\n{modules}".encode()).hexdigest()[:16]
    cache = Path(os.environ.get("LOGSTORE_CACHE") or REPO_ROOT / ".cache") / "jre"
    target = cache / f"jre-{key}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "bin" / "java").exists():
            staging = cache / f"jre-{key}.part"
            shutil.rmtree(staging, ignore_errors=True)
            options = ["--strip-debug", "--no-man-pages", "--no-header-files", "--output", str(staging)]
            subprocess.run(
                [str(jdk / "bin" / "jlink"), "--add-modules", ",".join(modules), *options],
                check=True,
                capture_output=True,
                timeout=600,
            )
            staging.rename(target)
    assert "jdk.compiler" not in _release_value((target / "release").read_text(), "MODULES").split()
    return target


def _release_value(release: str, name: str) -> str:
    """A value of a JDK's ``release`` file (``NAME="value"`` lines)."""
    for line in release.splitlines():
        key, _, value = line.partition("=")
        if key == name:
            return value.strip().strip('"')
    raise AssertionError(f"no {name} in the JDK's release file")


@pytest.fixture(scope="module")
def jre_path(jre: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A ``PATH`` with the JRE's ``java`` and every other program of this ``PATH``, except the JDK's."""
    jdk_tools = {entry.name for entry in (_jdk_home() / "bin").iterdir()}
    tools = tmp_path_factory.mktemp("tools")
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or not Path(folder).is_dir():
            continue
        for entry in Path(folder).iterdir():
            if entry.name not in jdk_tools and not (tools / entry.name).exists():
                (tools / entry.name).symlink_to(entry)
    return f"{jre / 'bin'}{os.pathsep}{tools}"


@pytest.fixture(scope="module")
def env() -> Iterator[LogStoreTestEnv]:
    with logstore_environment() as environment:
        yield environment


def _jre_env(base: dict[str, str], jre: Path, path: str, env: LogStoreTestEnv) -> dict[str, str]:
    return {**base, **env.env, "JAVA_HOME": str(jre), "PATH": path, "LOGSTORE_KAFKA_TIMEOUT_S": "30"}


def test_the_installed_wheel_dual_writes_with_a_jre_only(
    dists: tuple[Path, Path],
    user_env: tuple[Path, dict[str, str]],
    jre: Path,
    jre_path: str,
    env: LogStoreTestEnv,
    tmp_path: Path,
) -> None:
    folder, base = user_env
    python = str(folder / "bin" / "python")
    for step in (["uninstall", "--yes", "airflow-logstore"], ["install", str(dists[1])]):
        command = [python, "-m", "pip", *step, "--quiet"]
        done = subprocess.run(command, env=base, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
    # as the README says: pyspark and pyspark-client at one release (a plain install may mix two, and then
    # the write stops with InstallationError, which test_other_airflow checks)
    version = "import importlib.metadata as m; print(m.version('pyspark-client'))"
    client = subprocess.run([python, "-c", version], env=base, capture_output=True, text=True, check=True)
    release = client.stdout.strip()  # pyspark-client has no later release than pyspark: align on it
    align = [python, "-m", "pip", "install", "--quiet", f"pyspark=={release}", f"pyspark-client=={release}"]
    done = subprocess.run(align, env=base, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    run_env = _jre_env(base, jre, f"{folder / 'bin'}{os.pathsep}{jre_path}", env)
    assert not (jre / "bin" / "javac").exists() and shutil.which("javac", path=run_env["PATH"]) is None
    assert shutil.which("java", path=run_env["PATH"]) == str(jre / "bin" / "java")

    table = make_table(env, schema="id int, name string")
    rows = write_jsonl(tmp_path / "rows.jsonl", ROWS)
    done = subprocess.run(
        [str(folder / "bin" / "logstore"), "write", str(table.name), "--input", str(rows)],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # not the checkout: the installed package, its state from LOGSTORE_HOME
    )
    assert done.returncode == 0, done.stdout + done.stderr

    assert sorted(table_state(table).values(), key=lambda row: row["id"]) == ROWS
    publish_visible_offsets(table)  # the batch's records become visible only as a committed batch's
    committed = read_log(table, consistency="consistent")
    assert sorted((r.row for r in committed.records), key=lambda row: row["id"]) == ROWS


#: What the checkout's fallback runs: the log producer's jar (its classpath is not reached) and the scan's.
_FALLBACK = """
from airflow_logstore.exceptions import ServiceError
from airflow_logstore.javac import LOG_PRODUCER
from airflow_logstore.log import jvm_scan
from airflow_logstore.settings import local_settings
print("scan available:", jvm_scan.available())
try:
    LOG_PRODUCER.jar("unused", local_settings())
except ServiceError as error:
    print(error)
"""


def test_a_checkout_without_javac_names_the_missing_jar(
    jre: Path, jre_path: str, env: LogStoreTestEnv
) -> None:
    """This checkout's editable install has no built jar; with a JRE only, the jar's lookup says what to
    install (a job prints it as ``logstore: error: ...``), and the JVM scan is not offered."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{jre_path}"
    done = subprocess.run(
        [sys.executable, "-c", _FALLBACK],
        env=_jre_env(dict(os.environ), jre, path, env),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    available, message = done.stdout.splitlines()
    assert available == "scan available: False"
    assert message == (
        "the dual write's log producer (a Spark task in the JVM) needs its jar: this installation of "
        "airflow-logstore has no prebuilt airflow_logstore/write/java/log-producer.jar (a source checkout?) "
        "and there is no javac to compile it. Install the built wheel (a JRE 17+ is then enough), or a "
        "JDK 17+ (e.g. apt-get install openjdk-17-jdk-headless)"
    )
