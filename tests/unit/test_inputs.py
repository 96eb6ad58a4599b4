"""Input formats are inferred for any Hadoop URI (file, folder, ``s3://``...) through a folder lister."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_logstore.exceptions import BadInputError, OptionError
from airflow_logstore.write.inputs import infer_format


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
