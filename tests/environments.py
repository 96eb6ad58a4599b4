"""The Python environments ``./dev test`` uses besides ``.venv``, cached under ``.cache/envs/``.

``lowest``
    The package at the lowest versions its ranges allow: ``uv pip compile --resolution lowest-direct``
    with every direct dependency held at its lower bound (uv's lowest-direct alone may settle on a
    higher version when that resolves first), with the ``openlineage`` extra (its provider's lowest
    release, so the lineage tests run against it). The working tree is installed editable, without deps.
``airflow``
    A different Airflow 3.x release than constraints.txt pins, installed alone, as a user's deployment
    has it; ``tests/install`` puts the built wheel into it.
``executors``
    What a Spark worker has, and nothing else: pyspark (``SPARK_PROVIDED``) and the executors' list
    (``EXECUTOR_REQUIREMENTS``, both in ``airflow_logstore/spark/executors.py``) pinned by constraints.txt;
    no Airflow, no LogStore (jobs bring it as ``--py-files``). The cluster tests' Spark workers run its
    Python, so the list and the zip are proven enough.
``flink``
    Apache Flink's Python API (``apache-flink``, at ``airflow_logstore.versions.FLINK_VERSION``) and
    nothing else: the third-party consumer the Flink tests read the log with (``tests/integration/
    flink_sql.py`` runs in it; Flink's Kafka SQL connector comes from Maven, ``jars.flink_kafka_jars``).

Each environment lives in ``.cache/envs/<name>-<hash of its inputs>``: a warm machine reuses it, a change
of an input (pyproject.toml, this file, the Python version) builds a new one, and a fresh clone builds it
from scratch (uv's downloads are cached in ``.cache/uv``). ``python -m tests.environments NAME`` prints the
environment's folder, building it when needed.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from packaging.requirements import Requirement

REPO_ROOT = Path(__file__).resolve().parents[1]
ENVS = REPO_ROOT / ".cache" / "envs"
#: The Airflow release of the ``airflow`` environment: inside the package's range, not the pinned one.
OTHER_AIRFLOW = "3.2.2"
PYTHON = "3.11"
_COMPLETE = ".complete"


def uv() -> str:
    """The uv of this interpreter's environment (a dev dependency), else one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.exists() else shutil.which("uv")
    if not found:
        raise SystemExit("uv is not installed: run ./dev setup (it is in the dev extra)")
    return found


def _run(*args: str, cwd: Path = REPO_ROOT) -> None:
    env = {**os.environ, "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(REPO_ROOT / ".cache" / "uv"))}
    env.pop("VIRTUAL_ENV", None)
    subprocess.run(args, cwd=cwd, env=env, check=True, stdout=sys.stderr)  # stdout: only the folder


def _key(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in (*parts, Path(__file__).read_bytes(), PYTHON.encode()):
        digest.update(hashlib.sha256(part).digest())
    return digest.hexdigest()[:16]


@contextmanager
def _locked(name: str) -> Iterator[None]:
    ENVS.mkdir(parents=True, exist_ok=True)
    with open(ENVS / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test runs never build the same environment at once
        yield


def cached_env(name: str, key: str, populate: Callable[[Path], None], *, seed: bool = False) -> Path:
    """``.cache/envs/<name>-<key>``, built by ``populate`` unless a complete one is there.

    Built in place (a venv cannot move: its scripts name its path); only a finished build is marked
    complete, so an interrupted one is rebuilt. Older environments of the same name are removed, except
    the newest of them.
    """
    folder = ENVS / f"{name}-{key}"
    with _locked(name):
        if (folder / _COMPLETE).exists():
            return folder
        shutil.rmtree(folder, ignore_errors=True)
        # keep the newest earlier one (a run of an older checkout may still use it); drop the rest
        earlier = sorted((p for p in ENVS.glob(f"{name}-*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
        for old in earlier[:-1]:
            shutil.rmtree(old, ignore_errors=True)
        _run(uv(), "venv", "--quiet", "--python", PYTHON, *(["--seed"] if seed else []), str(folder))
        populate(folder)
        (folder / _COMPLETE).write_text(key + "\n")
        # pyspark is an sdist: every resolution unpacks it (~1.5 GB) into uv's cache; drop what is unused
        _run(uv(), "cache", "prune", "--quiet")
    return folder


def lower_bounds(pyproject: Path) -> list[str]:
    """``name==version`` for each runtime dependency's ``>=`` bound in pyproject.toml."""
    project = tomllib.loads(pyproject.read_text())["project"]
    pins = []
    for line in project["dependencies"]:
        requirement = Requirement(line)
        lows = [spec.version for spec in requirement.specifier if spec.operator == ">="]
        if lows:
            pins.append(f"{requirement.name}=={lows[0]}")
    return pins


def lowest_env() -> Path:
    pyproject = REPO_ROOT / "pyproject.toml"

    def populate(folder: Path) -> None:
        bounds = folder / "lower-bounds.txt"
        bounds.write_text("\n".join(lower_bounds(pyproject)) + "\n")
        locked = folder / "requirements.txt"
        _run(
            uv(), "pip", "compile", "--quiet", str(pyproject), "--extra", "test", "--extra", "openlineage",
            "--resolution", "lowest-direct", "--constraint", str(bounds),
            "--python-version", PYTHON, "--output-file", str(locked),
        )  # fmt: skip
        python = str(folder / "bin" / "python")
        _run(uv(), "pip", "install", "--quiet", "--python", python, "--requirement", str(locked))
        _run(uv(), "pip", "install", "--quiet", "--python", python, "--no-deps", "--editable", str(REPO_ROOT))

    return cached_env("lowest", _key(pyproject.read_bytes()), populate)


def airflow_env() -> Path:
    def populate(folder: Path) -> None:
        python = str(folder / "bin" / "python")
        _run(uv(), "pip", "install", "--quiet", "--python", python, f"apache-airflow=={OTHER_AIRFLOW}")

    # seeded with pip: the test installs the wheel the way a user does
    return cached_env("airflow", _key(OTHER_AIRFLOW.encode()), populate, seed=True)


def executors_env() -> Path:
    from airflow_logstore.spark.executors import EXECUTOR_REQUIREMENTS, SPARK_PROVIDED

    constraints = REPO_ROOT / "constraints.txt"
    requirements = [*SPARK_PROVIDED, *EXECUTOR_REQUIREMENTS]

    def populate(folder: Path) -> None:
        python = str(folder / "bin" / "python")
        _run(
            uv(),
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "--constraint",
            str(constraints),
            *requirements,
        )

    return cached_env("executors", _key(constraints.read_bytes(), "\n".join(requirements).encode()), populate)


def executor_python() -> Path:
    """The ``executors`` environment's interpreter (built when needed)."""
    return executors_env() / "bin" / "python"


def flink_env() -> Path:
    from airflow_logstore.versions import FLINK_VERSION

    requirement = f"apache-flink=={FLINK_VERSION}"

    def populate(folder: Path) -> None:
        _run(uv(), "pip", "install", "--quiet", "--python", str(folder / "bin" / "python"), requirement)

    return cached_env("flink", _key(requirement.encode()), populate)


def flink_python() -> Path:
    """The ``flink`` environment's interpreter (built when needed)."""
    return flink_env() / "bin" / "python"


BUILDERS: dict[str, Callable[[], Path]] = {
    "lowest": lowest_env,
    "airflow": airflow_env,
    "executors": executors_env,
    "flink": flink_env,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.environments", description=__doc__.split("\n")[0])
    parser.add_argument("name", choices=sorted(BUILDERS))
    args = parser.parse_args(argv)
    print(BUILDERS[args.name]())
    return 0


if __name__ == "__main__":
    sys.exit(main())
