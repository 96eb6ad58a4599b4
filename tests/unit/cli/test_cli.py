"""Every ``logstore`` failure is a message: no traceback, one or two lines, a non-zero exit code.

No service runs here: the catalog is a SQLite file in a temporary state folder (or a path that cannot
be opened, or a closed port), the broker a closed port on 127.0.0.1 with a one-second Kafka timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_logstore.cli import build_parser, main
from airflow_logstore.cli.commands._errors import Context, explain
from airflow_logstore.exceptions import BadInputError, KafkaUnavailableError
from tests.unit.cli.support import State, assert_message, closed_port, parsers, subcommands, uncovered

MISSING = "no.such_table"


def run(capfd: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capfd.readouterr()
    return code, out, err


MISSING_TABLE = [
    ["table", "show", MISSING],
    ["table", "snapshots", MISSING],
    ["table", "alter", MISSING, "--property", "log-store.partitions=6"],
    ["table", "drop", MISSING, "--yes"],
    ["read", MISSING],
    ["read", MISSING, "--mode", "file"],
    ["read", MISSING, "--mode", "hybrid"],
    ["publish", MISSING],
    ["reconcile", MISSING, "--dry-run"],
    ["compact", MISSING, "--dry-run"],
    ["write", MISSING, "--input", "{input}"],
]


@pytest.mark.parametrize("argv", MISSING_TABLE, ids=" ".join)
def test_missing_table(state: State, capfd: pytest.CaptureFixture[str], argv: list[str]) -> None:
    argv = [arg.format(input=state.input) for arg in argv]
    code, out, err = run(capfd, argv)
    expected = f"table '{MISSING}' does not exist in catalog 'logstore' (sql sqlite:///"
    assert_message(code, out, err, expected, 1)
    assert f"state folder {state.home.resolve()} (from LOGSTORE_HOME)" in err
    assert "logstore table create" in err


@pytest.mark.parametrize("form", ["{path}", "file://{path}"])
def test_missing_input_path(state: State, capfd: pytest.CaptureFixture[str], form: str) -> None:
    path = form.format(path=state.input.parent / "does_not_exist.jsonl")
    code, out, err = run(capfd, ["write", "t.plain", "--input", path])
    assert_message(code, out, err, f"input path '{path}' does not exist", 2)


BROKER_DOWN = [
    ["table", "show", "t.logged"],
    ["read", "t.logged"],
    ["read", "t.logged", "--mode", "hybrid"],
    ["publish", "t.logged"],
    ["reconcile", "t.logged", "--dry-run"],
    ["write", "t.logged", "--input", "{input}"],
    [
        *("table", "create", "t.new", "--schema", "id int", "--property", "log-store.enabled=true"),
        *("--property", "log-store.topic=new", "--property", "log-store.address={broker}"),
    ],
]


@pytest.mark.parametrize("argv", BROKER_DOWN, ids=lambda argv: " ".join(argv[:3]))
def test_broker_down(state: State, capfd: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capfd, [arg.format(broker=state.broker, input=state.input) for arg in argv])
    assert_message(code, out, err, "Kafka", 1)
    assert "did not answer" in err and "'./dev services status'" in err


CATALOG_COMMANDS = [
    ["table", "list"],
    ["table", "show", "t.plain"],
    ["table", "create", "t.new", "--schema", "id int"],
    ["read", "t.plain", "--mode", "file"],
    ["publish", "t.plain"],
    ["reconcile", "t.plain"],
    ["compact", "t.plain", "--dry-run"],
    ["write", "t.plain", "--input", "{input}"],
]


@pytest.mark.parametrize("argv", CATALOG_COMMANDS, ids=lambda argv: " ".join(argv[:2]))
@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"type": "sql", "uri": "sqlite:////dev/null/catalog/catalog.db"}, "cannot be opened: cannot use"),
        ({"type": "sql", "uri": "sqlite:///{home}"}, "cannot be opened: unable to open database file"),
        ({"type": "rest", "uri": "http://127.0.0.1:{port}"}, "cannot be reached"),
    ],
    ids=["sqlite-under-a-file", "sqlite-is-a-folder", "rest-closed-port"],
)
def test_catalog_unreachable(
    state: State,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    argv: list[str],
    spec: dict[str, str],
    expected: str,
) -> None:
    uri = spec["uri"].format(home=state.home, port=closed_port())
    monkeypatch.setenv("LOGSTORE_CATALOG", json.dumps({**spec, "uri": uri, "warehouse": "file:///w"}))
    code, out, err = run(capfd, [arg.format(input=state.input) for arg in argv])
    assert_message(code, out, err, f"the catalog 'logstore' ({spec['type']} {uri}, warehouse file:///w) ", 1)
    assert expected in err


NO_LOG = [["read", "t.plain"], ["read", "t.plain", "--mode", "hybrid"], ["publish", "t.plain"]]
NO_LOG += [["reconcile", "t.plain"]]


@pytest.mark.parametrize("argv", NO_LOG, ids=" ".join)
def test_table_without_a_log(state: State, capfd: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capfd, argv)
    assert_message(code, out, err, "table 't.plain': the log is disabled", 2)
    assert "--mode file" in err


BAD_OPTIONS = [
    (["read", "t.plain", "--mode", "bogus"], "argument --mode: invalid choice: 'bogus'"),
    (["read", "t.logged", "--from", "bogus"], "option 'from': 'bogus' is not"),
    (["read", "t.plain", "--option", "novalue"], "--option 'novalue' is not key=value"),
    (["read", "t.plain", "--limit", "many"], "argument --limit: invalid int value"),
    (["table", "create", "t.x", "--schema", "id int", "--property", "x"], "--property 'x' is not key=value"),
    (["table", "create", "t.x", "--schema", "id int", "--property", "log.sytem=kafka"], "log.sytem"),
    (["table", "create", "t.x", "--schema", "id nonsense"], "nonsense"),
    (["table", "create", "a.b.c", "--schema", "id int"], "table name 'a.b.c' must be 'namespace.table'"),
    (["table", "show"], "the following arguments are required: name"),
    (["table"], "the following arguments are required: table_command"),
    (["write", "t.plain"], "the following arguments are required: --input"),
    (["write", "t.plain", "--input", "{input}", "--emit-mode", "bogus"], "'bogus' is not one of"),
    (["write", "t.plain", "--input", "{input}", "--emit-mode", "log"], "the table has no LogStore"),
    (["compact", "t.plain", "--target-size", "0"], "option 'target-size': must be at least 1 byte"),
    (["read", "t.plain", "--limit", "-1"], "argument --limit: must be 0 or more, not -1"),
    (["write", "t.plain", "--input", "{input}", "--input-format", "xml"], "invalid choice: 'xml'"),
    (["table", "drop", "t.plain"], "pass --yes to do it"),
    (["table", "alter", "t.plain"], "give at least one KEY=VALUE"),
    (["table", "alter", "t.plain", "--property", "log.sytem=kafka"], "log.sytem"),
    (["table", "alter", "t.logged", "--property", "log-store.topic=other"], "cannot change once"),
    (
        ["table", "create", "t.x", "--schema", "id int", "--no-log", "--property", "log-store.enabled=true"],
        "contradicts",
    ),
    # the development setup's commands are ./dev's (python -m logstore_dev), not in the wheel's CLI
    (["services", "status"], "argument command: invalid choice: 'services'"),
    (["airflow", "up"], "argument command: invalid choice: 'airflow'"),
    (["demo"], "argument command: invalid choice: 'demo'"),
    (["dags", "path", "{input}"], "option 'DEST': 'logstore dags path' takes no DEST"),
    (["dags", "copy"], "option 'DEST': 'logstore dags copy' needs the DAGs folder to copy into"),
    (["dags", "copy", "{input}"], "is not a folder"),
    (["frobnicate"], "argument command: invalid choice: 'frobnicate'"),
    ([], "the following arguments are required: command"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_OPTIONS, ids=[" ".join(argv) for argv, _ in BAD_OPTIONS])
def test_bad_option(state: State, capfd: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    code, out, err = run(capfd, [arg.format(input=state.input) for arg in argv])
    assert_message(code, out, err, expected, 2)
    assert "--help' lists the options" in err


@pytest.mark.parametrize(
    ("argv", "value"),
    [(["write", "t.plain", "--input", "{input}"], "after-log:1"), (["reconcile", "t.logged"], "planned")],
)
def test_a_bad_kill_point_fails_before_spark_or_the_broker(
    state: State,
    capfd: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    value: str,
) -> None:
    """A test's ``LOGSTORE_KILL_AT`` that names no kill point: its value and the kill points, at once."""
    monkeypatch.setenv("LOGSTORE_KILL_AT", value)
    code, out, err = run(capfd, [arg.format(input=state.input) for arg in argv])
    assert_message(code, out, err, f"LOGSTORE_KILL_AT: '{value}' is not a kill point; the kill points are", 1)
    assert "write:after-log:<batch>" in err and "reconcile:planned" in err and "unset LOGSTORE_KILL_AT" in err
    assert "starting Spark" not in err and "broker" not in err


@pytest.mark.parametrize(
    "argv",
    [["--debug", "read", MISSING], ["read", MISSING, "--debug"], ["table", "show", MISSING, "--debug"]],
)
def test_debug_shows_the_traceback(state: State, capfd: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, _, err = run(capfd, argv)
    assert code == 1
    assert "Traceback (most recent call last)" in err and "NoSuchTableError" in err
    assert err.strip().splitlines()[-2].startswith(f"logstore: error: table '{MISSING}' does not exist")


def test_the_installed_entry_point_prints_no_traceback(state: State) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airflow_logstore.cli", "read", MISSING],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"logstore: error: table '{MISSING}' does not exist")


# -- every subcommand has failure cases ------------------------------------------------------------------

#: Every command line above that must fail with a message.
FAILURE_CASES = [
    *MISSING_TABLE,
    *BROKER_DOWN,
    *CATALOG_COMMANDS,
    *NO_LOG,
    *(argv for argv, _ in BAD_OPTIONS),
]


def test_every_subcommand_has_failure_cases() -> None:
    """A new subcommand (or action) fails this test until the tables above make it fail as well."""
    commands = {" ".join(words) for words in subcommands(build_parser())}
    assert {"table create", "table show", "dags path", "write", "read", "compact"} <= commands
    assert uncovered(build_parser(), FAILURE_CASES) == []


def test_the_cli_has_only_the_product_s_commands() -> None:
    """Local services, a local Airflow and the demo are the development setup's (``./dev``), not a
    deployment's."""
    commands = {words[0] for words in subcommands(build_parser())}
    assert commands == {"table", "write", "read", "publish", "reconcile", "compact", "dags"}


def test_a_subcommand_without_failure_cases_is_named() -> None:
    without_show = [argv for argv in FAILURE_CASES if argv[:2] != ["table", "show"]]
    assert uncovered(build_parser(), without_show) == ["table show"]


# -- which state folder, catalog and broker a command uses ----------------------------------------------


def test_table_show_says_what_it_uses(state: State, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capfd, ["table", "show", "t.plain", "--json"])
    assert code == 0
    using = json.loads(out)["using"]
    assert using["state_folder"] == f"{state.home.resolve()} (from LOGSTORE_HOME)"
    assert using["catalog"].startswith(f"'logstore' (sql sqlite:///{state.home.resolve()}/catalog/catalog.db")
    assert using["broker"] == "none (the table has no log)"


# -- third-party errors that need Spark or a broker to happen for real ---------------------------------


def test_spark_path_not_found_on_a_remote_uri() -> None:
    from pyspark.errors import AnalysisException

    text = "[PATH_NOT_FOUND] Path does not exist: s3a://bucket/in.jsonl. SQLSTATE: 42K03"
    error = AnalysisException(message=text)
    failure = explain(error, Context("logstore write", "t.plain"))
    assert failure.lines() == [
        "logstore: error: input path not found: s3a://bucket/in.jsonl",
        "logstore: check --input: a JSON-lines, CSV or Parquet file or folder, or a URI Spark can read",
    ]
    assert failure.exit_code == 2


def test_spark_table_not_found(state: State) -> None:
    from pyspark.errors import AnalysisException

    error = AnalysisException(message="[TABLE_OR_VIEW_NOT_FOUND] The table `t`.`x` cannot be found.")
    failure = explain(error, Context("logstore write", "t.x"))
    assert failure.problem.startswith("table 't.x' does not exist in catalog 'logstore'")
    assert failure.exit_code == 1


def test_other_spark_errors_keep_their_first_line() -> None:
    from pyspark.errors import AnalysisException

    text = "[UNRESOLVED_COLUMN] A column `x` cannot be resolved.\n\tat org.apache.spark..."
    error = AnalysisException(message=text)
    failure = explain(error)
    assert failure.problem == "Spark: A column `x` cannot be resolved"
    assert "--debug" in failure.next_step


def test_kafka_exception() -> None:
    from confluent_kafka import KafkaError, KafkaException

    failure = explain(KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")))
    assert failure.problem == "Kafka: 1/1 brokers are down"
    assert "'./dev services up'" in failure.next_step


def test_project_errors_keep_their_message() -> None:
    assert explain(KafkaUnavailableError("Kafka at h:1 did not answer")).lines()[0] == (
        "logstore: error: Kafka at h:1 did not answer"
    )
    bad = explain(BadInputError("value does not fit type bigint", row=1, column="amount"))
    assert bad.problem == "row 1, column 'amount': value does not fit type bigint"
    assert bad.exit_code == 2


def test_an_unforeseen_error_is_one_line_and_points_to_debug() -> None:
    failure = explain(ZeroDivisionError("division by zero\nmore detail"))
    assert failure.lines() == [
        "logstore: error: ZeroDivisionError: division by zero",
        "logstore: this is unexpected; run it again with --debug for the traceback",
    ]
    assert failure.exit_code == 1


def test_interrupt() -> None:
    assert explain(KeyboardInterrupt()).exit_code == 130


@pytest.mark.parametrize(
    ("name", "value"),
    [("LOGSTORE_KAFKA_PORT", "kafka"), ("LOGSTORE_CATALOG", "{not json"), ("LOGSTORE_KAFKA_TIMEOUT_S", "-1")],
)
def test_a_bad_environment_variable_is_named(
    state: State, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    code, out, err = run(capfd, ["table", "show", "t.logged"])
    assert_message(code, out, err, name, 2)
    assert "fix that environment variable" in err


@pytest.mark.parametrize(
    ("path", "master", "local"),
    [
        ("/data/in.jsonl", "local[2]", Path("/data/in.jsonl")),
        ("rel/in.csv", "local", Path("rel/in.csv")),
        ("file:///data/a%20b.jsonl", "local[2]", Path("/data/a b.jsonl")),
        ("file:///data/in.jsonl", "spark://master:7077", Path("/data/in.jsonl")),
        ("/data/in.jsonl", "spark://master:7077", None),  # the cluster's default file system decides
        ("s3a://bucket/in.jsonl", "local[2]", None),
        ("hdfs://nn/in.parquet", "local[2]", None),
        ("/data/part-*.jsonl", "local[2]", None),  # globs are Spark's to expand
        ("/data/{a,b}.jsonl", "local[2]", None),
    ],
)
def test_which_input_paths_are_checked_before_spark(path: str, master: str, local: Path | None) -> None:
    from airflow_logstore.cli.commands.write import local_input_path

    assert local_input_path(path, master) == local


# -- options are checked before anything slow, in the real command --------------------------------------

#: Option and path errors a user makes: each is the first line of stderr, before Spark starts.
EARLY_ERRORS = [
    (["write", "t.plain", "--input", "{input}", "--input-format", "xml"], "invalid choice: 'xml'", 2),
    (["write", "t.plain", "--input", "{missing}"], "input path '{missing}' does not exist", 2),
    (["write", "t.plain", "--input", "{folder}"], "no file in folder", 2),
    (["read", "t.plain", "--limit", "-1"], "must be 0 or more", 2),
    (["read", "t.plain", "--mode", "xml"], "invalid choice: 'xml'", 2),
    (["table", "show", "a.b.c"], "table name 'a.b.c' must be 'namespace.table'", 2),
]


@pytest.mark.parametrize(
    ("argv", "expected", "exit_code"), EARLY_ERRORS, ids=[" ".join(a) for a, _, _ in EARLY_ERRORS]
)
def test_option_and_path_errors_come_first_and_fast(
    state: State, tmp_path: Path, argv: list[str], expected: str, exit_code: int
) -> None:
    """Through the installed command, in its own process: the message is the first line, no traceback,
    and it comes before Spark starts: the process has a Java home that does not exist, so starting Spark
    would fail first with another error. (How fast is a benchmark's question, not a test's.)"""
    (tmp_path / "no_known_files").mkdir()
    (tmp_path / "no_known_files" / "rows.xml").write_text("<rows/>")
    values = {
        "input": state.input,
        "missing": tmp_path / "missing.jsonl",
        "folder": tmp_path / "no_known_files",
    }
    argv = [arg.format(**values) for arg in argv]
    no_java = {**os.environ, "JAVA_HOME": str(tmp_path / "no-java")}
    done = subprocess.run(
        [sys.executable, "-m", "airflow_logstore.cli", *argv],
        capture_output=True,
        text=True,
        check=False,
        env=no_java,
    )
    assert done.returncode == exit_code, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert expected.format(**values) in done.stderr.splitlines()[0], done.stderr


# -- help, common options ----------------------------------------------------------------------------------


def test_every_option_has_help() -> None:
    missing = [
        (words, action.dest)
        for words, parser in parsers(build_parser())
        for action in parser._actions
        if not action.help and not isinstance(action, argparse._SubParsersAction | argparse._HelpAction)
    ]
    assert missing == []


def test_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["read", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: log)" in text and "(default: jsonl)" in text and "0: none" in text
    with pytest.raises(SystemExit):
        build_parser().parse_args(["write", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--missing-as-null" in text and "--no-publish" in text and "(default: logstore-cli)" in text


@pytest.mark.parametrize("argv", [["-v", "table", "list"], ["table", "list", "-v"], ["table", "-v", "list"]])
def test_common_options_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args([*argv, "--json"])
    assert args.verbose and args.json and not args.debug


def test_a_name_without_namespace_is_in_default(state: State, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capfd, ["table", "show", "orders"])
    assert_message(code, out, err, "table 'default.orders' does not exist in catalog", 1)


# -- tables: list, snapshots, create's defaults, alter, drop ----------------------------------------------


def test_table_list_and_snapshots(state: State, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capfd, ["table", "list"])
    assert code == 0 and out.splitlines() == ["t.logged", "t.plain"]
    code, out, _ = run(capfd, ["table", "list", "t", "--json"])
    assert code == 0 and json.loads(out)["tables"] == ["t.logged", "t.plain"]
    code, out, _ = run(capfd, ["table", "snapshots", "t.plain", "--json"])
    assert code == 0 and json.loads(out) == {"table": "t.plain", "snapshots": []}


def test_table_create_enables_the_log_on_the_local_broker_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_logstore.cli.commands.table import with_log_defaults

    monkeypatch.setenv("LOGSTORE_KAFKA_PORT", "19555")
    assert with_log_defaults({}, "a.b", no_log=False) == {
        "log-store.enabled": "true",
        "log-store.topic": "a.b",
        "log-store.address": "127.0.0.1:19555",
    }
    given = {"log-store.topic": "t", "log-store.address": "k:9092"}
    assert with_log_defaults(given, "a.b", no_log=False) == {"log-store.enabled": "true", **given}
    assert with_log_defaults({}, "a.b", no_log=True) == {"log-store.enabled": "false"}
    off = {"log-store.enabled": "false"}
    assert with_log_defaults(off, "a.b", no_log=False) == off


def test_table_create_alter_and_drop_without_a_log(state: State, capfd: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capfd, ["table", "create", "t.new", "--schema", "id int", "--no-log"])
    assert code == 0, err
    assert out.splitlines()[0] == "table t.new created" and "no log" in out.splitlines()[1]
    code, out, err = run(
        capfd, ["table", "alter", "t.new", "--property", "write.target-file-size-bytes=1000"]
    )
    assert code == 0 and "set write.target-file-size-bytes=1000" in out, err
    code, out, err = run(capfd, ["table", "show", "t.new", "--json"])
    assert json.loads(out)["properties"]["write.target-file-size-bytes"] == "1000"
    code, out, err = run(capfd, ["table", "drop", "t.new", "--yes"])
    assert code == 0 and out.splitlines() == ["dropped table t.new and its files"], err
    code, out, _ = run(capfd, ["table", "list"])
    assert "t.new" not in out


def test_the_parsers_copies_of_choices_are_the_library_s() -> None:
    from airflow_logstore.cli import commands
    from airflow_logstore.log import jvm_scan

    assert commands.SCANNERS == jvm_scan.SCANNERS and commands.JVM_MIN_RECORDS == jvm_scan.JVM_MIN_RECORDS


def test_spark_output_goes_to_its_log_file(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """The JVM started while a session is built inherits the log file as its stderr (a child process
    stands in for it here); the command's own stderr is restored, and the next JVM writes there again."""
    from airflow_logstore.spark import session

    spark_log = tmp_path / "logs" / "spark.log"
    session.send_spark_output_to(spark_log)
    with session._jvm_stderr():
        subprocess.run(
            ["sh", "-c", "echo 'WARN Utils: Your hostname resolves to a loopback address' >&2"], check=True
        )
    print("logstore: the command's own line", file=sys.stderr)
    with session._jvm_stderr():  # one-shot: this one is not redirected
        subprocess.run(["sh", "-c", "echo next-jvm >&2"], check=True)
    _, err = capfd.readouterr()
    assert "loopback" in spark_log.read_text() and "loopback" not in err
    assert err.splitlines() == ["logstore: the command's own line", "next-jvm"]
