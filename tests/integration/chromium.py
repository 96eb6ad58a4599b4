"""A real headless Chromium (Debian's ``chromium``) driven over its DevTools protocol, for the UI tests.

The protocol is JSON over a WebSocket: the ``websockets`` client Airflow's API server already brings
(uvicorn's ``standard`` extra) is all it takes, no browser driver. A fresh profile per browser, no
network but the pages asked for (the flags below), stopped by its own PID.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from logstore_dev.testing.environment import REPO_ROOT

INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-chromium"
#: What the browser does besides the pages asked for: nothing (the machine has no outside network).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


#: Set to 1 to skip the browser tests on a machine where Chromium cannot be installed (they fail otherwise:
#: a UI test that skipped by itself would leave a run green without the page ever rendered).
SKIP_VARIABLE = "LOGSTORE_SKIP_BROWSER"


def chromium_binary() -> str:
    """Debian's Chromium, installed first (``scripts/install-chromium``, as root) when missing. When it
    cannot be installed the test fails, saying why, unless :data:`SKIP_VARIABLE` asks to skip it."""
    found = shutil.which("chromium")
    if found:
        return found
    done = subprocess.run([str(INSTALL_SCRIPT)], capture_output=True, text=True, check=False, timeout=900)
    found = shutil.which("chromium")
    if done.returncode != 0 or not found:
        why = (
            "Chromium is not installed and could not be installed here "
            f"({INSTALL_SCRIPT.name} exited {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]})"
        )
        if os.environ.get(SKIP_VARIABLE) == "1":
            pytest.skip(f"{why}; {SKIP_VARIABLE}=1")
        pytest.fail(f"{why}; set {SKIP_VARIABLE}=1 to skip the browser tests on this machine")
    return found


class Browser:
    """One page of a headless Chromium, over the DevTools protocol."""

    def __init__(self, socket: Any) -> None:
        self.socket = socket
        self._next_id = 0

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Call ``method`` and return its result (events that arrive meanwhile are dropped)."""
        self._next_id += 1
        ask = self._next_id
        self.socket.send(json.dumps({"id": ask, "method": method, "params": params}))
        while True:
            answer = json.loads(self.socket.recv(timeout=60))
            if answer.get("id") == ask:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result") or {})

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def set_cookie(self, url: str, name: str, value: str) -> None:
        self.send("Network.setCookie", url=url, name=name, value=value, httpOnly=True)

    def open(self, url: str, timeout: float = 60.0) -> None:
        """Go to ``url`` and wait until its document has loaded (its scripts may still be fetching)."""
        self.send("Page.navigate", url=url)
        self.wait_for(f"document.readyState === 'complete' && location.href === {json.dumps(url)}", timeout)

    def wait_for(self, expression: str, timeout: float = 60.0) -> Any:
        """Poll a JavaScript expression until it is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout:.0f}s in the browser: {expression}")
            time.sleep(0.2)

    def screenshot(self, path: Path) -> Path:
        """A PNG of the whole page (beyond the window) at ``path``."""
        metrics = self.send("Page.getLayoutMetrics")
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextmanager
def headless_chromium(profile: Path, width: int = 1500, height: int = 1000) -> Iterator[Browser]:
    """A headless Chromium with a fresh profile in ``profile`` and one blank page; stopped afterwards."""
    binary = chromium_binary()
    profile.mkdir(parents=True, exist_ok=True)
    command = [
        binary,
        *FLAGS,
        f"--user-data-dir={profile}",
        "--remote-debugging-port=0",
        f"--window-size={width},{height}",
        "about:blank",
    ]
    from websockets.sync.client import connect

    log = (profile / "chromium.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        port = _devtools_port(profile, process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as response:
            pages = [t for t in json.load(response) if t.get("type") == "page"]
        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as socket:
            browser = Browser(socket)
            browser.send("Page.enable")
            browser.send("Network.enable")
            yield browser
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=20)
        log.close()


def _devtools_port(profile: Path, process: subprocess.Popen[bytes], timeout: float = 60.0) -> int:
    """The DevTools port Chromium chose (it writes ``DevToolsActivePort`` in its profile)."""
    marker = profile / "DevToolsActivePort"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (profile / "chromium.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"Chromium exited with {process.returncode} before it listened: {tail}")
        if marker.exists():
            first = marker.read_text().splitlines()[:1]
            if first and first[0].strip().isdigit():
                return int(first[0])
        time.sleep(0.1)
    raise RuntimeError(f"Chromium did not write {marker} within {timeout:.0f}s")
