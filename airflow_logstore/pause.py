"""Named pause points in the protocol's steps, so a test can stop one actor at an exact step.

A race is tested by stopping one actor where it matters (say, a writer between its commit decision and
its compare-and-set), letting another act, then releasing the first: no sleep lines anything up.

- In the same process a test registers a callable with :func:`on_pause` (e.g. one that sets an event
  and waits for another).
- Across processes (a ``spark-submit`` job) the environment names the points and a folder:
  ``LOGSTORE_PAUSE_AT=commit:decided,publish:offsets-read`` and ``LOGSTORE_PAUSE_DIR=/some/dir``. At a
  named point the process writes ``<dir>/<point>.reached`` and waits until the test creates
  ``<dir>/<point>.release``.

A failure point (:func:`fail_once`) is the other half: ``LOGSTORE_FAIL_ONCE_AT=produce:flushed`` makes
the first process (or Spark task) that reaches it raise, once per ``LOGSTORE_PAUSE_DIR`` (a marker
file, created atomically, says it happened), so a test can make one Spark task attempt fail for real.

A kill point (:func:`kill_point`) is a process's death: ``LOGSTORE_KILL_AT=write:after-log:2`` makes the
writer SIGKILL its own process once batch 2's log records are flushed, before its commit (a failover, with
nothing cleaned up); ``LOGSTORE_KILL_AT=reconcile:output-flushed`` kills a reconciler between its reversals
and its progress record. :data:`KILL_POINTS` lists them; a value that names none is an error at once.

Outside tests nothing is registered and nothing is named: a pause point costs one dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from airflow_logstore.exceptions import LogStoreError

_HOOKS: dict[str, list[Callable[[], None]]] = {}

log = logging.getLogger(__name__)

#: How long a file-controlled pause waits for its release before it fails the step.
FILE_PAUSE_TIMEOUT_S = 600.0


def pause_point(name: str) -> None:
    """Stop here if a test asked to (see the module docstring); otherwise return at once."""
    for hook in list(_HOOKS.get(name, ())):
        hook()
    if name in _named_points():
        _wait_for_release_file(name)


@contextmanager
def on_pause(name: str, hook: Callable[[], None]) -> Iterator[None]:
    """Call ``hook`` whenever this process reaches pause point ``name`` (within the block)."""
    _HOOKS.setdefault(name, []).append(hook)
    try:
        yield
    finally:
        _HOOKS[name].remove(hook)


def _named_points() -> set[str]:
    named = os.environ.get("LOGSTORE_PAUSE_AT", "")
    return {part.strip() for part in named.split(",") if part.strip()}


def _file_for(name: str, suffix: str) -> Path:
    folder = os.environ.get("LOGSTORE_PAUSE_DIR")
    if not folder:
        raise RuntimeError(
            f"pause point '{name}' is named in LOGSTORE_PAUSE_AT but LOGSTORE_PAUSE_DIR is unset"
        )
    return pause_file(folder, name, suffix)


def pause_file(folder: str | Path, name: str, suffix: str) -> Path:
    """The file of point ``name`` in ``folder``: ``reached`` (the process stopped there), ``release``
    (the test lets it go on), ``failed`` (a failure point fired)."""
    return Path(folder) / f"{name.replace(':', '_')}.{suffix}"


def _wait_for_release_file(name: str) -> None:
    _file_for(name, "reached").write_text(str(os.getpid()))
    release = _file_for(name, "release")
    deadline = time.monotonic() + FILE_PAUSE_TIMEOUT_S
    while not release.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"pause point '{name}' was never released ({release})")
        time.sleep(0.05)


def fail_once(name: str) -> None:
    """Raise the first time any process reaches failure point ``name`` (see the module docstring)."""
    named = {p.strip() for p in os.environ.get("LOGSTORE_FAIL_ONCE_AT", "").split(",") if p.strip()}
    if name not in named:
        return
    marker = _file_for(name, "failed")
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    raise InjectedFailure(f"injected failure at '{name}' (LOGSTORE_FAIL_ONCE_AT)")


class InjectedFailure(RuntimeError):
    """A failure a test asked for at a named point."""


#: The kill points, and whether each is reached once per batch (then the value names the batch too,
#: ``write:after-log:2``). The reconciler's are ``core.reconcile.STAGES`` (a unit test keeps them equal).
KILL_POINTS: dict[str, bool] = {
    "write:after-log": True,  # the batch's log records are flushed; no commit yet
    "write:after-commit": True,  # the batch is committed to the table; not yet recorded in the ledger
    "reconcile:lease-acquired": False,
    "reconcile:planned": False,
    "reconcile:lease-checked": False,
    "reconcile:output-flushed": False,
    "reconcile:before-progress": False,
}


class KillPointError(LogStoreError, ValueError):
    """``LOGSTORE_KILL_AT`` names no kill point: a test's setting that no retry can fix (a LogStore
    error, so jobs report it in one line and operators fail at once, as for a bad option)."""

    retryable = False


def kill_points(text: str | None = None) -> frozenset[tuple[str, int | None]]:
    """The (point, batch) pairs ``text`` (default: ``LOGSTORE_KILL_AT``) names, comma-separated.

    :raises KillPointError: for an entry that is not a point of :data:`KILL_POINTS`, with its batch
        exactly when the point is reached once per batch
    """
    named = os.environ.get("LOGSTORE_KILL_AT", "") if text is None else text
    return frozenset(_kill_point(part.strip()) for part in named.split(",") if part.strip())


def _kill_point(entry: str) -> tuple[str, int | None]:
    if KILL_POINTS.get(entry) is False:
        return entry, None
    point, _, batch = entry.rpartition(":")
    if KILL_POINTS.get(point) and re.fullmatch(r"-?[0-9]+", batch.strip()):
        return point, int(batch)
    forms = ", ".join(f"{name}:<batch>" if batched else name for name, batched in KILL_POINTS.items())
    raise KillPointError(f"LOGSTORE_KILL_AT: '{entry}' is not a kill point; the kill points are {forms}")


def kill_point(name: str, batch: int | None = None) -> None:
    """SIGKILL this process if ``LOGSTORE_KILL_AT`` names point ``name`` (of batch ``batch``): a
    failover as a test wants it: no ``finally``, no producer flush, nothing cleaned up (module docstring)."""
    if "LOGSTORE_KILL_AT" not in os.environ or (name, batch) not in kill_points():
        return
    log.warning(
        "kill point %s%s: SIGKILL (LOGSTORE_KILL_AT)", name, "" if batch is None else f" of batch {batch}"
    )
    os.kill(os.getpid(), signal.SIGKILL)
