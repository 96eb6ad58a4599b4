"""Write docker-compose.yml's ``x-airflow-settings`` block from the topology (one source of truth).

    .venv/bin/python tools/compose_settings.py          # rewrite the block in docker-compose.yml
    .venv/bin/python tools/compose_settings.py --check  # exit 1 when the block is out of date

The block holds Airflow's connections, its variable, its metadata database and the executors' Python its
tasks send with every job (``PYSPARK_PYTHON``: the Spark image's environment): exactly
:func:`logstore_dev.services.topology.compose_airflow_settings`, the values the local cluster profile
gets with 127.0.0.1 and its own secrets (and ``LOGSTORE_EXECUTOR_PYTHON`` for the executors' Python).
tests/unit/dev/services/test_docker_compose.py checks that the file is current.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

# logstore_dev is the checkout's own, never installed; run as a script, Python puts tools/ on the path, so
# the checkout goes first (as ./dev does with PYTHONPATH)
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from logstore_dev.services.topology import CLUSTER, compose_airflow_settings  # noqa: E402

COMPOSE = ROOT / "docker-compose.yml"
BEGIN, END = "# BEGIN x-airflow-settings\n", "# END x-airflow-settings\n"


def render() -> str:
    """The block: a YAML mapping whose values are JSON strings (JSON strings are YAML scalars)."""
    lines = ["x-airflow-settings: &airflow-settings"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in compose_airflow_settings(CLUSTER).items()]
    return "\n".join(lines) + "\n"


def rewrite(text: str) -> str:
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(text):
        raise SystemExit(f"{COMPOSE.name} has no '{BEGIN.strip()}' ... '{END.strip()}' block")
    return pattern.sub(lambda _: BEGIN + render() + END, text, count=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="only check; exit 1 when out of date")
    args = parser.parse_args(argv)
    text = COMPOSE.read_text()
    wanted = rewrite(text)
    if args.check:
        if wanted != text:
            print(f"{COMPOSE.name}: x-airflow-settings is out of date; run tools/compose_settings.py")
            return 1
        return 0
    COMPOSE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
