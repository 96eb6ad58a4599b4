"""Shared benchmark helpers: a peak-memory sampler for a process tree and result recording."""

from __future__ import annotations

import functools
import json
import os
import platform
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

RESULTS = Path(__file__).resolve().parent / "results"

#: The seconds of each call of each function :func:`timed` wraps, by name (a benchmark clears it).
TIMES: defaultdict[str, list[float]] = defaultdict(list)


def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn``, with the seconds of each call appended to ``TIMES[name]`` (the wrapper adds microseconds)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            TIMES[name].append(time.perf_counter() - started)

    return wrapper


@dataclass
class Measurement:
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


class PeakMemory:
    """Samples the RSS of this process and all its children (JVM, Python workers) every 100 ms."""

    def __init__(self, interval: float = 0.1) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> int:
        me = psutil.Process(os.getpid())
        total = 0
        for process in [me, *me.children(recursive=True)]:
            with suppress(psutil.Error):
                total += process.memory_info().rss
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakMemory:
        self.peak = self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def measure() -> Iterator[Measurement]:
    result = Measurement()
    started = time.perf_counter()
    with PeakMemory() as memory:
        yield result
    result.seconds = time.perf_counter() - started
    result.peak_rss_mb = memory.peak / 1024 / 1024


def machine() -> str:
    return (
        f"{platform.machine()}, {psutil.cpu_count()} cores, {psutil.virtual_memory().total // 2**30} GiB, "
        f"Python {platform.python_version()}"
    )


def save(name: str, payload: dict[str, Any]) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path
