"""``./dev services|airflow|demo`` (``python -m logstore_dev``): every failure is a message, as in the
``logstore`` command (one parser builder), and their commands are the development setup's only.

No service runs here (the state folder of ``conftest.state``: the broker's port is closed).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from logstore_dev.cli import build_parser, main
from logstore_dev.testing.environment import dev_command, with_checkout
from tests.unit.cli.support import State, assert_message, closed_port, parsers, subcommands, uncovered


def run(capfd: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capfd.readouterr()
    return code, out, err


PORT_TAKEN = [["services", "up"], ["airflow", "up"], ["demo"]]


@pytest.mark.parametrize("argv", PORT_TAKEN, ids=" ".join)
def test_broker_port_taken(
    state: State, taken_port: int, capfd: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run(capfd, argv)
    assert_message(code, out, err, f"port {taken_port} on 127.0.0.1 is taken by another process", 1)


SERVICE_COMMANDS = [
    *(["services", action] for action in ("up", "down", "status")),
    *(["services", action, "--profile", "cluster"] for action in ("up", "down", "status")),
    *(["airflow", action] for action in ("up", "down", "status")),
]


@pytest.mark.parametrize("argv", SERVICE_COMMANDS, ids=" ".join)
def test_state_folder_unusable(
    state: State,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    """LOGSTORE_HOME lies under a regular file: the services' PID and state files cannot be written."""
    (tmp_path / "a_file").write_text("")
    home = tmp_path / "a_file" / "home"
    monkeypatch.setenv("LOGSTORE_HOME", str(home))
    code, out, err = run(capfd, argv)
    assert_message(code, out, err, f"cannot use '{home}/", 1)
    assert "Not a directory" in err and f"state folder {home} (from LOGSTORE_HOME)" in err


MISSING_MAVEN = [["services", "up"], ["services", "up", "--profile", "cluster"]]


@pytest.mark.parametrize("argv", MISSING_MAVEN, ids=" ".join)
def test_missing_maven_before_anything_starts(
    state: State,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    argv: list[str],
) -> None:
    """An empty jar cache and no ``mvn`` on PATH: the command stops before it starts a process."""
    (tmp_path / "empty_bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty_bin"))
    code, out, err = run(capfd, argv)
    assert_message(code, out, err, "Maven ('mvn') is needed once to download the Kafka and Iceberg jars", 1)
    assert "install it" in err
    assert not list((state.home / "kafka").glob("*.pid"))
    assert not (state.home / "cluster" / "postgres").exists()


def test_broker_stopped_is_a_status_not_an_error(state: State, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capfd, ["services", "status"])
    assert code == 3 and err == ""
    assert "kafka broker stopped" in out


BAD_OPTIONS = [
    (["services", "restart"], "argument action: invalid choice: 'restart'"),
    (["services", "status", "--profile", "docker"], "argument --profile: invalid choice: 'docker'"),
    (["services", "down", "--profile"], "argument --profile: expected one argument"),
    (["airflow", "up", "--port", "http"], "argument --port: invalid int value"),
    (["demo", "--dags-folder", "/no/such/dags"], "option '--dags-folder': '/no/such/dags' is not a folder"),
    (["table", "list"], "argument command: invalid choice: 'table'"),
    ([], "the following arguments are required: command"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_OPTIONS, ids=[" ".join(argv) for argv, _ in BAD_OPTIONS])
def test_bad_option(state: State, capfd: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    code, out, err = run(capfd, argv)
    assert_message(code, out, err, expected, 2)
    command = " ".join(["./dev", *argv[:1]]) if argv[:1] != ["table"] else "./dev"
    assert f"'{command} --help' lists the options" in err


FAILURE_CASES = [*PORT_TAKEN, *SERVICE_COMMANDS, *MISSING_MAVEN, *(argv for argv, _ in BAD_OPTIONS)]


def test_every_subcommand_has_failure_cases() -> None:
    commands = {" ".join(words) for words in subcommands(build_parser())}
    assert commands == {f"{c} {a}" for c in ("services", "airflow") for a in ("up", "down", "status")} | {
        "demo"
    }
    assert uncovered(build_parser(), FAILURE_CASES) == []


def test_every_option_has_help() -> None:
    missing = [
        (words, action.dest)
        for words, parser in parsers(build_parser())
        for action in parser._actions
        if not action.help and action.dest not in ("help", "command")
    ]
    assert missing == []


def test_services_status_says_what_it_uses(state: State, capfd: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capfd, ["services", "status"])
    lines = out.splitlines()
    assert lines[0] == f"state folder: {state.home.resolve()} (from LOGSTORE_HOME)"
    assert lines[1].startswith(f"catalog: 'logstore' (sql sqlite:///{state.home.resolve()}/catalog/")
    assert lines[2] == f"broker: 127.0.0.1:{os.environ['LOGSTORE_KAFKA_PORT']}"


def test_inside_a_checkout_the_cli_uses_its_state_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    checkout = tmp_path / "clone"
    (checkout / "dags").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text('[project]\nname = "airflow-logstore"\n')
    (checkout / "dev").write_text("")
    for name in ("LOGSTORE_HOME", "LOGSTORE_CACHE", "LOGSTORE_CATALOG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOGSTORE_KAFKA_PORT", str(closed_port()))
    monkeypatch.chdir(checkout / "dags")
    _, out, _ = run(capfd, ["services", "status"])
    assert out.splitlines()[0] == f"state folder: {checkout.resolve()}/.logstore (from checkout {checkout})"
    assert f"catalog: 'logstore' (sql sqlite:///{checkout.resolve()}/.logstore/catalog/catalog.db" in out


def test_python_m_logstore_dev_is_the_dev_command(state: State) -> None:
    """The entry ``./dev`` runs, in its own process from the checkout: usage named ``./dev``, a stopped
    broker is a status (exit 3), no traceback."""
    env = with_checkout(os.environ)
    helped = subprocess.run(dev_command("--help"), capture_output=True, text=True, env=env, check=False)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: ./dev ") and "{airflow,demo,services}" in helped.stdout
    done = subprocess.run(
        dev_command("services", "status"), capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 3 and "Traceback" not in done.stderr, done.stderr
    assert "kafka broker stopped" in done.stdout
