"""logstore dags path|copy DEST: the example DAGs shipped in the package, for an Airflow DAGs folder."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

from airflow_logstore.exceptions import OptionError


def example_files() -> list[Path]:
    """The example DAG files and the ``data/`` folder of the demo's inputs (not the package marker)."""
    from airflow_logstore.settings import EXAMPLE_DAGS

    return sorted(p for p in EXAMPLE_DAGS.iterdir() if p.name == "data" or p.name.startswith("logstore_"))


def copy_examples(dest: Path, *, force: bool = False) -> list[Path]:
    """Copy the example DAGs (and ``data/``) into ``dest``; refuse to replace a file unless ``force``.

    :returns: the files and folders written
    """
    sources = example_files()
    if dest.exists() and not dest.is_dir():
        raise OptionError("DEST", f"'{dest}' is not a folder")
    taken = [source.name for source in sources if (dest / source.name).exists()]
    if taken and not force:
        raise OptionError("DEST", f"'{dest}' already has {', '.join(taken)}; pass --force to replace them")
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources:
        target = dest / source.name
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)
        written.append(target)
    return written


def run(args: argparse.Namespace) -> int:
    from airflow_logstore.settings import EXAMPLE_DAGS

    if args.action == "path":
        if args.dest is not None:
            raise OptionError("DEST", f"'logstore dags path' takes no DEST (got '{args.dest}')")
        print(EXAMPLE_DAGS)
        return 0
    if args.dest is None:
        raise OptionError("DEST", "'logstore dags copy' needs the DAGs folder to copy into")
    for written in copy_examples(Path(args.dest), force=args.force):
        print(written)
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dags",
        help="the example DAGs shipped in the package: print their folder, or copy them into a DAGs folder",
        description="'path' prints the folder of the example DAGs; 'copy DEST' copies them, with the "
        "demo's input files (data/), into DEST (e.g. $AIRFLOW_HOME/dags).",
    )
    parser.add_argument(
        "action", choices=("path", "copy"), help="path: print the folder; copy: copy the DAGs into DEST"
    )
    parser.add_argument("dest", nargs="?", default=None, help="copy: the DAGs folder to copy into")
    parser.add_argument("--force", action="store_true", help="copy: replace files that exist")
    parser.set_defaults(handler=run)
