"""A test environment's folder is removed when it ends, unless LOGSTORE_KEEP_TEST_HOME asks to keep it
(the integration test ``test_services`` runs a whole environment with a killed driver)."""

from __future__ import annotations

from pathlib import Path

import pytest

from logstore_dev.testing.environment import KEEP_ENV, remove_home


@pytest.mark.parametrize(("keep", "kept"), [(None, False), ("", False), ("0", False), ("1", True)])
def test_the_folder_is_removed_unless_asked_to_keep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: str | None, kept: bool
) -> None:
    home = tmp_path / "home"
    (home / "spark-local" / "blockmgr-1").mkdir(parents=True)
    (home / "kafka" / "x.log").parent.mkdir()
    (home / "kafka" / "x.log").write_text("records")
    if keep is None:
        monkeypatch.delenv(KEEP_ENV, raising=False)
    else:
        monkeypatch.setenv(KEEP_ENV, keep)

    remove_home(home)

    assert home.exists() is kept
