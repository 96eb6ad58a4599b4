"""services/_process.ManagedProcess with small Python processes: the one lifecycle every service uses."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from airflow_logstore.exceptions import ServiceError
from logstore_dev.services._process import (
    STATE_ENV,
    ManagedProcess,
    alive,
    has_env,
    port_open,
    stop_together,
)
from logstore_dev.services.local import free_port

#: Listens on the port given as its argument, writes "listening" when it does; ignores SIGTERM when
#: asked to (a process that only SIGKILL ends).
SERVER = """
import signal, socket, sys
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sock = socket.socket()
sock.bind(("127.0.0.1", int(sys.argv[1])))
sock.listen()
print("listening", flush=True)
while True:
    sock.accept()[0].close()
"""


def _process(tmp_path: Path, name: str = "server", **options: object) -> ManagedProcess:
    state = tmp_path / name
    return ManagedProcess(
        f"the test {name}",
        state_dir=state,
        pid_file=state / f"{name}.pid",
        log_file=state / f"{name}.log",
        is_ours=lambda pid: has_env(pid, STATE_ENV, str(state)),
        **options,  # type: ignore[arg-type]
    )


def _server(process: ManagedProcess, port: int, mode: str = "polite") -> None:
    process.launch([sys.executable, "-c", SERVER, str(port), mode], env={}, ports=[port])


def test_up_starts_once_waits_until_ready_and_stop_ends_it(tmp_path: Path) -> None:
    port = free_port()
    process = _process(tmp_path)
    started = process.up(lambda: _server(process, port), lambda: port_open(port), timeout=30, where="here")
    pid = process.pid()
    assert started and pid is not None and port_open(port)
    assert process.pid_file.read_text() == str(pid)
    assert not process.up(lambda: _server(process, port), lambda: True, timeout=5, where="here")
    assert process.pid() == pid  # running already: not started again

    again = _process(tmp_path)  # another object finds it by its PID file
    assert again.pid() == pid
    assert again.stop(timeout=10) is True
    assert not alive(pid) and again.pid() is None and not again.pid_file.exists()
    assert again.stop() is False


def test_a_taken_port_is_named_before_anything_starts(tmp_path: Path) -> None:
    port = free_port()
    holder = _process(tmp_path, "holder")
    holder.up(lambda: _server(holder, port), lambda: port_open(port), timeout=30, where="here")
    try:
        second = _process(tmp_path, "second")
        with pytest.raises(ServiceError, match=f"port {port} on 127.0.0.1 is taken by another process"):
            _server(second, port)
        assert second.pid() is None
    finally:
        holder.stop()


def test_an_early_exit_fails_at_once_with_the_last_lines_of_the_log(tmp_path: Path) -> None:
    process = _process(tmp_path)

    def start() -> None:
        process.launch([sys.executable, "-c", "print('bad setting: x'); raise SystemExit(3)"], env={})

    with pytest.raises(ServiceError) as error:
        process.up(start, lambda: False, timeout=60, where="nowhere")
    message = str(error.value)
    assert message.startswith("the test server exited with 3 before it was ready; see ")
    assert str(process.log_file) in message and message.endswith("bad setting: x")


def test_a_service_that_never_answers_is_stopped_and_named(tmp_path: Path) -> None:
    process = _process(tmp_path)
    port = free_port()
    with pytest.raises(ServiceError, match=r"the test server did not answer on there within 1s; see "):
        process.up(lambda: _server(process, port), lambda: False, timeout=1, where="there")
    assert process.pid() is None and not process.pid_file.exists()  # what up() started, it stopped


def test_a_process_that_ignores_the_first_signal_is_killed_after_the_timeout(tmp_path: Path) -> None:
    port = free_port()
    process = _process(tmp_path, stop_timeout=0.5)
    process.up(lambda: _server(process, port, "stubborn"), lambda: port_open(port), timeout=30, where="here")
    pid = process.pid()
    assert pid is not None
    assert process.stop() is True
    assert not alive(pid)


def test_a_recycled_pid_is_not_taken_for_the_service(tmp_path: Path) -> None:
    process = _process(tmp_path)
    process.state_dir.mkdir(parents=True)
    process.pid_file.write_text(str(os.getpid()))  # alive, but not ours
    assert process.pid() is None
    assert process.stop() is False


def test_stop_together_signals_all_first_and_reports_who_ran(tmp_path: Path) -> None:
    ports = [free_port(), free_port()]
    first, second, idle = _process(tmp_path, "a"), _process(tmp_path, "b"), _process(tmp_path, "c")
    for process, port in zip((first, second), ports, strict=True):
        _server(process, port)
        process.wait_ready(lambda n=port: port_open(n), timeout=30, where="x")
    pids = [first.pid(), second.pid()]
    assert stop_together([first, idle, second], timeout=10) == [True, False, True]
    assert not any(alive(pid) for pid in pids if pid is not None)


def test_kill_is_sigkill(tmp_path: Path) -> None:
    port = free_port()
    process = _process(tmp_path, stop_signal=signal.SIGINT)
    process.up(lambda: _server(process, port, "stubborn"), lambda: port_open(port), timeout=30, where="here")
    assert process.kill() is True
    assert process.started is None and process.pid() is None


#: Starts one child in its own process group and one in ours, prints their PIDs, then waits.
PARENT = """
import subprocess, sys, time
child = [sys.executable, "-c", "import time\\nwhile True: time.sleep(60)"]
inside = subprocess.Popen(child)
outside = subprocess.Popen(child, start_new_session=True)
print(inside.pid, outside.pid, flush=True)
while True:
    time.sleep(60)
"""


@pytest.mark.parametrize("descendants", [False, True])
def test_stop_ends_the_process_group_and_with_descendants_those_that_left_it(
    tmp_path: Path, descendants: bool
) -> None:
    process = _process(tmp_path, stop_descendants=descendants)

    def children() -> str | None:
        text = process.log_file.read_text() if process.log_file.exists() else ""
        return text if len(text.split()) == 2 else None

    process.up(
        lambda: process.launch([sys.executable, "-c", PARENT], env={}),
        lambda: children() is not None,
        timeout=30,
        where="its log",
    )
    inside, outside = (int(pid) for pid in (children() or "").split())
    try:
        assert process.stop(timeout=10) is True
        assert not alive(inside)
        assert alive(outside) is not descendants
    finally:
        if alive(outside):
            os.kill(outside, signal.SIGKILL)
