"""Running a test's action in a thread while the test acts on it (kills it, races it)."""

from __future__ import annotations

import threading
from typing import Any


def in_thread(target: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Start ``target(*args)`` in a thread; the dict gets its ``result`` or its ``error`` once it ends."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = target(*args)
        except Exception as exc:  # asserted by the test
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome
