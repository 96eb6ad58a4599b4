"""`./dev services up | status | down` through the command ./dev runs: idempotent, and nothing left behind."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from logstore_dev.services import _process
from logstore_dev.testing.environment import dev_command, free_port_pair, with_checkout


def _logstore(args: list[str], home: Path, port: int) -> subprocess.CompletedProcess[str]:
    env = with_checkout({**os.environ, "LOGSTORE_HOME": str(home), "LOGSTORE_KAFKA_PORT": str(port)})
    return subprocess.run(
        dev_command("services", *args),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _processes_mentioning(text: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def _listening(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _pid(status_line: str) -> int:
    match = re.search(r"running \(pid (\d+)\)", status_line)
    assert match, status_line
    return int(match.group(1))


def test_services_up_is_idempotent_and_down_leaves_no_process(env, tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port_pair()
    first = _logstore(["up"], home, port)
    assert first.returncode == 0, first.stderr[-2000:]
    status = _logstore(["status"], home, port)
    assert status.returncode == 0, status.stdout + status.stderr[-2000:]
    pid = _pid(status.stdout)
    assert f"127.0.0.1:{port}" in status.stdout and _listening(port)
    started = time.monotonic()
    again = _logstore(["up"], home, port)  # already running: the same broker, no second one
    assert again.returncode == 0 and time.monotonic() - started < 60
    assert _pid(_logstore(["status"], home, port).stdout) == pid
    assert _processes_mentioning(str(home)) == [pid]

    down = _logstore(["down"], home, port)
    assert down.returncode == 0 and "stopped" in down.stdout, down.stderr[-2000:]
    assert _processes_mentioning(str(home)) == []
    assert not _listening(port) and not _listening(port + 1)
    stopped = _logstore(["status"], home, port)
    assert stopped.returncode == 3 and "stopped" in stopped.stdout
    assert "was not running" in _logstore(["down"], home, port).stdout


DRIVER = """
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").appName("killed").getOrCreate()
spark.range(10).repartition(2).count()  # a shuffle: block files in its scratch folder
print("ready", flush=True)
import time; time.sleep(600)
"""


def test_an_environment_removes_its_folder_with_the_scratch_of_a_killed_driver() -> None:
    """Runs of the suite leave nothing in the temp dir: Spark's scratch folders and its JVM's temp files
    (also a SIGKILLed driver's, which its shutdown hook never removes) are in the environment's folder,
    removed at its end."""
    from logstore_dev.testing.environment import logstore_environment

    with logstore_environment() as inner:
        home = inner.settings.home
        local = Path(os.environ["SPARK_LOCAL_DIRS"])
        assert local.parent == home
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True, start_new_session=True
        )
        try:
            assert driver.stdout is not None
            assert driver.stdout.readline().strip() == "ready"
            assert list(local.glob("blockmgr-*")), sorted(p.name for p in local.iterdir())
        finally:
            os.killpg(driver.pid, 9)  # the driver and its JVM: no shutdown hook runs
            driver.wait()
        assert list(local.glob("blockmgr-*"))  # what the killed driver left
        # its temp dir: its spark-* folder and the native library it unpacked for the shuffle's LZ4
        java_tmp = sorted(p.name for p in (home / "java-tmp").iterdir())
        assert [n for n in java_tmp if n.startswith("spark-")], java_tmp
        assert [n for n in java_tmp if n.startswith("liblz4-java")], java_tmp
        # the broker's JVM (killed in the chaos tests) keeps its temp files in its state folder
        broker_pid = inner.broker.pid()
        assert broker_pid is not None
        assert f"-Djava.io.tmpdir={inner.broker.state_dir / 'tmp'}" in _process.cmdline(broker_pid)
    assert not home.exists()
