"""Input formats are inferred for any Hadoop URI (file, folder, ``s3://``...) through a folder lister."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_logstore.exceptions import BadInputError, OptionError
from airflow_logstore.write.inputs import check_input_path, infer_format


def lister(tree: dict[str, list[tuple[str, bool]] | None]) -> Any:
    """A folder lister over a fake file system: path -> children (None: a file; missing: raises)."""

    def list_folder(path: str) -> list[tuple[str, bool]] | None:
        if path not in tree:
            raise BadInputError(f"input path '{path}' does not exist")
        return tree[path]

    return list_folder


def test_the_extension_decides_without_touching_the_file_system() -> None:
    nothing = lister({})
    assert infer_format("s3://in/orders.jsonl", nothing) == "json"
    assert infer_format("s3a://in/orders.CSV", nothing) == "csv"
    assert infer_format("hdfs:///in/part-0.parquet/", nothing) == "parquet"


def test_an_s3_folder_is_listed_hidden_files_skipped_subfolders_followed() -> None:
    tree = {
        "s3://in/batch": [
            ("s3://in/batch/_SUCCESS", False),
            ("s3://in/batch/.part-0.crc", False),
            ("s3://in/batch/date=1", True),
        ],
        "s3://in/batch/date=1": [("s3://in/batch/date=1/part-0.csv", False)],
    }
    assert infer_format("s3://in/batch", lister(tree)) == "csv"


def test_what_cannot_be_inferred_is_a_clear_error() -> None:
    tree: dict[str, list[tuple[str, bool]] | None] = {
        "s3://in/blob": None,
        "s3://in/empty": [("s3://in/empty/_SUCCESS", False)],
    }
    with pytest.raises(OptionError, match="cannot tell the format of 's3://in/blob'; pass json"):
        infer_format("s3://in/blob", lister(tree))
    with pytest.raises(OptionError, match="no file in folder 's3://in/empty' has a known extension"):
        infer_format("s3://in/empty", lister(tree))
    with pytest.raises(BadInputError, match="input path 's3://in/gone' does not exist"):
        infer_format("s3://in/gone", lister(tree))


class Table:
    """A loaded table as :func:`check_input_path` sees it: its location and its FileIO's answer."""

    def __init__(self, location: str, exists: bool | Exception) -> None:
        self._location, self.answer, self.asked = location, exists, []

    def location(self) -> str:
        return self._location

    @property
    def io(self) -> Any:
        table = self

        class Input:
            def __init__(self, path: str) -> None:
                self.path = path

            def exists(self) -> bool:
                table.asked.append(self.path)
                if isinstance(table.answer, Exception):
                    raise table.answer
                return table.answer

        return type("FileIO", (), {"new_input": staticmethod(Input)})()


def test_a_missing_local_input_is_named_first_before_spark_starts(tmp_path: Path) -> None:
    present = tmp_path / "b1.jsonl"
    present.write_text("{}\n")
    for path in (str(present), present.as_uri(), str(tmp_path / "b*.jsonl"), str(tmp_path)):
        assert check_input_path(path, on_this_host=True) == f"input path '{path}' found"
    for path in (str(tmp_path / "b2.jsonl"), (tmp_path / "b2.jsonl").as_uri(), str(tmp_path / "c*.jsonl")):
        with pytest.raises(BadInputError) as missing:
            check_input_path(path, on_this_host=True)
        assert str(missing.value) == f"input path '{path}' does not exist (checked before starting Spark)"
    # Hadoop's {a,b} alternatives are Spark's to match
    braces = str(tmp_path / "{b,c}2.jsonl")
    assert check_input_path(braces, on_this_host=True).endswith("not checked: a pattern, matched by Spark")
    # a driver on another host (cluster deploy mode) reads its own file system
    said = check_input_path(str(tmp_path / "b2.jsonl"), on_this_host=False)
    assert said.endswith("not checked: the Spark driver runs on another host")


def test_a_remote_input_is_checked_only_in_the_tables_own_object_store() -> None:
    gone = Table("s3://warehouse/db/orders", exists=False)
    for path in ("s3a://warehouse/in/b1.jsonl", "s3://warehouse/in/b1.jsonl"):
        with pytest.raises(BadInputError, match=rf"^input path '{path}' does not exist"):
            check_input_path(path, on_this_host=True, table=lambda: gone)
    assert gone.asked == ["s3a://warehouse/in/b1.jsonl", "s3://warehouse/in/b1.jsonl"]
    there = Table("s3://warehouse/db/orders", exists=True)
    assert check_input_path("s3a://warehouse/in/", on_this_host=False, table=lambda: there).endswith("found")
    # another bucket, a pattern, or an error: Spark's own configuration may reach it
    for path, table, why in (
        ("s3a://other/in/b1.jsonl", gone, "outside the table's object store; Spark reads it"),
        ("s3a://warehouse/in/b*.jsonl", gone, "a pattern, matched by Spark"),
        (
            "s3a://warehouse/in/b1.jsonl",
            Table("s3://warehouse/t", PermissionError("403")),
            "PermissionError: 403",
        ),
        (
            "hdfs://nn/in/b1.jsonl",
            Table("file:///wh/t", exists=False),
            "outside the table's object store; Spark reads it",
        ),
    ):
        assert check_input_path(path, on_this_host=True, table=lambda t=table: t).endswith(why)
    assert len(gone.asked) == 2
