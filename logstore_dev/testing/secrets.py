"""Canary checks: plant known fake secrets, run a job, then search every place a secret could leak.

A test gives the secrets it configured canary values (``Sasl-canary-...``) and asks :func:`find_canaries`
where they show up. The places (:class:`Places`):

- the Spark UI of a running application: its environment page (HTML) and its REST API (environment,
  jobs, stages, SQL, executors) for each application it lists, plus any other URL (a standalone master's
  or worker's pages);
- files under folders: the Spark event log (``spark.eventLog.dir``; compressed logs are decompressed
  when the codec is available, else reported as unchecked), Airflow task logs, Spark workers' work
  folders (executors' stdout/stderr);
- texts already in memory (captured log lines, spark-submit output);
- every process's command line and, where readable, its environment (``/proc/<pid>/cmdline`` and
  ``environ``, through psutil). Processes come and go: :class:`ProcessWatch` samples them in the
  background while a job runs.

Each canary is searched for as is and in its JSON-escaped and URL-quoted forms. The result lists every
(canary, place, snippet) found and every place that was searched or could not be, so a test can assert
both "nothing found" and "something was actually searched".

Usage::

    report = find_canaries(canaries, Places(spark_ui=[ui_url], dirs={"event log": [event_dir]}))
    report.assert_clean(require=("spark-ui", "spark-rest", "event-log", "cmdline"))
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: How much text around a hit a finding keeps (each side).
SNIPPET_CHARS = 80

#: REST API resources read for each application (``/api/v1/applications/<id>/<resource>``).
SPARK_REST_RESOURCES: tuple[str, ...] = (
    "environment",
    "jobs",
    "stages?details=true",
    "sql?details=true&planDescription=true",
    "executors",
    "allexecutors",
)

#: Files larger than this are searched in their first and last part only (reported as partial).
MAX_FILE_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class Finding:
    """A canary found somewhere: which one, where (``kind: detail``) and the text around it."""

    canary: str
    kind: str
    where: str
    snippet: str

    def __str__(self) -> str:
        return f"{self.kind} {self.where}: ...{self.snippet}..."


@dataclass
class Report:
    """Every finding, and every place searched (``checked``) or not (``unchecked``, with why)."""

    findings: list[Finding] = field(default_factory=list)
    checked: list[tuple[str, str]] = field(default_factory=list)
    unchecked: list[tuple[str, str, str]] = field(default_factory=list)

    def kinds_checked(self) -> set[str]:
        return {kind for kind, _ in self.checked}

    def extend(self, other: Report) -> None:
        self.findings.extend(other.findings)
        self.checked.extend(other.checked)
        self.unchecked.extend(other.unchecked)

    def describe(self) -> str:
        lines = [f"{len(self.findings)} canary finding(s) in {len(self.checked)} place(s) searched"]
        lines += [f"  FOUND {finding.canary!r} in {finding}" for finding in self.findings]
        lines += [f"  not searched: {kind} {where} ({why})" for kind, where, why in self.unchecked]
        return "\n".join(lines)

    def assert_clean(self, require: Iterable[str] = ()) -> None:
        """Fail if a canary was found, or if a required kind of place was never searched."""
        missing = sorted(set(require) - self.kinds_checked())
        assert not self.findings and not missing, self.describe() + (
            f"\n  never searched: {', '.join(missing)}" if missing else ""
        )


@dataclass
class Places:
    """Where to look.

    :param spark_ui: base URLs of Spark UIs (``http://127.0.0.1:4040``); the environment page and the
        REST API are read for ``app_ids`` (default: every application the UI lists)
    :param app_ids: application ids to read (default: those ``/api/v1/applications`` lists)
    :param urls: other pages to read as they are (a standalone master's or worker's UI, their REST API)
    :param dirs: folders whose files are all searched, by kind (``{"event-log": [dir], "task-log": [dir]}``)
    :param files: single files, by kind
    :param texts: texts in memory, by name (``{"spark-submit output": "..."}``; kind ``text``)
    :param processes: search every process's command line
    :param environments: search every readable process environment too
    :param process_filter: which processes to search (default all); gets a ``psutil.Process``
    :param timeout_s: HTTP timeout per request
    """

    spark_ui: Sequence[str] = ()
    app_ids: Sequence[str] = ()
    urls: Sequence[str] = ()
    dirs: Mapping[str, Sequence[Path | str]] = field(default_factory=dict)
    files: Mapping[str, Sequence[Path | str]] = field(default_factory=dict)
    texts: Mapping[str, str] = field(default_factory=dict)
    processes: bool = False
    environments: bool = False
    process_filter: Callable[[Any], bool] | None = None
    timeout_s: float = 10.0


def find_canaries(canaries: Iterable[str], places: Places) -> Report:
    """Search ``places`` for every canary; see the module docstring."""
    needles = _needles(canaries)
    report = Report()
    for base in places.spark_ui:
        report.extend(_search_spark_ui(needles, base, places.app_ids, places.timeout_s))
    for url in places.urls:
        report.extend(_search_url(needles, "url", url, places.timeout_s))
    for kind, folders in places.dirs.items():
        for folder in folders:
            report.extend(_search_dir(needles, kind, Path(folder)))
    for kind, paths in places.files.items():
        for path in paths:
            report.extend(_search_file(needles, kind, Path(path)))
    for name, text in places.texts.items():
        report.extend(search_text(needles, "text", name, text))
    if places.processes or places.environments:
        report.extend(
            search_processes(
                needles,
                cmdlines=places.processes,
                environments=places.environments,
                process_filter=places.process_filter,
            )
        )
    return report


# -- text -------------------------------------------------------------------------------------------


def _needles(canaries: Iterable[str]) -> dict[str, list[str]]:
    """Each canary with the forms it takes in JSON, URLs and HTML."""
    needles: dict[str, list[str]] = {}
    for canary in canaries:
        if not canary:
            raise ValueError("an empty canary would be found everywhere")
        forms = {
            canary,
            json.dumps(canary)[1:-1],
            urllib.parse.quote(canary, safe=""),
            urllib.parse.quote_plus(canary),
            canary.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;"),
        }
        needles[canary] = sorted(forms)
    return needles


def search_text(
    needles: Mapping[str, Sequence[str]] | Iterable[str], kind: str, where: str, text: str
) -> Report:
    """Every occurrence of each canary (in any of its forms) in ``text``, as findings of one place."""
    if not isinstance(needles, Mapping):
        needles = _needles(needles)
    report = Report(checked=[(kind, where)])
    for canary, forms in needles.items():
        for form in forms:
            start = text.find(form)
            while start >= 0:
                lo, hi = max(0, start - SNIPPET_CHARS), start + len(form) + SNIPPET_CHARS
                snippet = text[lo:hi].replace("\n", "\\n")
                report.findings.append(Finding(canary, kind, where, snippet))
                start = text.find(form, start + len(form))
    return report


# -- HTTP -------------------------------------------------------------------------------------------


def _get(url: str, timeout_s: float) -> str:
    request = urllib.request.Request(url, headers={"Accept": "*/*"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return bytes(response.read()).decode("utf-8", "replace")


def _search_url(needles: Mapping[str, Sequence[str]], kind: str, url: str, timeout_s: float) -> Report:
    try:
        text = _get(url, timeout_s)
    except (urllib.error.URLError, OSError) as exc:
        return Report(unchecked=[(kind, url, f"{type(exc).__name__}: {exc}")])
    return search_text(needles, kind, url, text)


def _search_spark_ui(
    needles: Mapping[str, Sequence[str]], base: str, app_ids: Sequence[str], timeout_s: float
) -> Report:
    base = base.rstrip("/")
    report = Report()
    ids = list(app_ids)
    if not ids:
        try:
            listed = json.loads(_get(f"{base}/api/v1/applications", timeout_s))
        except (urllib.error.URLError, OSError, ValueError) as exc:
            report.unchecked.append(
                ("spark-rest", f"{base}/api/v1/applications", f"{type(exc).__name__}: {exc}")
            )
            return report
        ids = [str(app["id"]) for app in listed]
        report.extend(search_text(needles, "spark-rest", f"{base}/api/v1/applications", json.dumps(listed)))
    report.extend(_search_url(needles, "spark-ui", f"{base}/environment/", timeout_s))
    for app_id in ids:
        for resource in SPARK_REST_RESOURCES:
            url = f"{base}/api/v1/applications/{urllib.parse.quote(app_id)}/{resource}"
            report.extend(_search_url(needles, "spark-rest", url, timeout_s))
    return report


# -- files ------------------------------------------------------------------------------------------


def _decompressed(path: Path, data: bytes) -> bytes | None:
    """The content of a (possibly compressed) Spark event log file; None: codec not available."""
    name = path.name.removesuffix(".inprogress")
    if name.endswith(".zstd") or name.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            return None
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        return bytes(reader.read())
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if name.endswith((".lz4", ".lzf", ".snappy")):
        return None
    return data


def _search_file(needles: Mapping[str, Sequence[str]], kind: str, path: Path) -> Report:
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            if size > MAX_FILE_BYTES:
                head = handle.read(MAX_FILE_BYTES // 2)
                handle.seek(size - MAX_FILE_BYTES // 2)
                data = head + b"\n" + handle.read()
            else:
                data = handle.read()
    except OSError as exc:
        return Report(unchecked=[(kind, str(path), f"{type(exc).__name__}: {exc}")])
    try:
        content = _decompressed(path, data)
    except Exception as exc:  # a truncated in-progress compressed log
        return Report(unchecked=[(kind, str(path), f"cannot decompress: {exc}")])
    if content is None:
        return Report(unchecked=[(kind, str(path), "compression codec not available here")])
    report = search_text(needles, kind, str(path), content.decode("utf-8", "replace"))
    if size > MAX_FILE_BYTES:
        report.unchecked.append((kind, str(path), f"only the first and last {MAX_FILE_BYTES // 2} bytes"))
    return report


def _search_dir(needles: Mapping[str, Sequence[str]], kind: str, folder: Path) -> Report:
    if not folder.is_dir():
        return Report(unchecked=[(kind, str(folder), "not a folder")])
    report = Report()
    for path in sorted(_walk(folder)):
        report.extend(_search_file(needles, kind, path))
    if not report.checked and not report.unchecked:
        report.unchecked.append((kind, str(folder), "no files"))
    return report


def _walk(folder: Path) -> Iterator[Path]:
    for root, _dirs, names in os.walk(folder):
        for name in names:
            path = Path(root) / name
            if path.is_file():
                yield path


# -- processes --------------------------------------------------------------------------------------


def search_processes(
    canaries: Mapping[str, Sequence[str]] | Iterable[str],
    *,
    cmdlines: bool = True,
    environments: bool = False,
    process_filter: Callable[[Any], bool] | None = None,
) -> Report:
    """Every process's command line (and environment, where readable) searched for the canaries.

    One place per kind (``cmdline``, ``environ``) is reported checked; processes whose environment
    cannot be read (another user's) are counted in one ``unchecked`` entry.
    """
    import psutil

    needles = canaries if isinstance(canaries, Mapping) else _needles(canaries)
    report = Report()
    unreadable = 0
    seen = 0
    for process in psutil.process_iter(["pid", "name", "cmdline"]):
        try:
            if process_filter is not None and not process_filter(process):
                continue
            seen += 1
            label = f"pid {process.pid} ({process.info.get('name')})"
            if cmdlines:
                argv = process.info.get("cmdline") or []
                found = search_text(needles, "cmdline", label, "\0".join(argv))
                report.findings.extend(_readable_nul(found.findings))
            if environments:
                try:
                    environ = process.environ()
                except (psutil.AccessDenied, psutil.ZombieProcess):
                    unreadable += 1
                    continue
                text = "\0".join(f"{k}={v}" for k, v in environ.items())
                report.findings.extend(_readable_nul(search_text(needles, "environ", label, text).findings))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    if cmdlines:
        report.checked.append(("cmdline", f"{seen} processes"))
    if environments:
        report.checked.append(("environ", f"{seen - unreadable} processes"))
        if unreadable:
            report.unchecked.append(("environ", f"{unreadable} processes", "not readable by this user"))
    return report


def _readable_nul(findings: list[Finding]) -> list[Finding]:
    return [Finding(f.canary, f.kind, f.where, f.snippet.replace("\0", " ")) for f in findings]


class ProcessWatch:
    """Samples every process's command line (and environment) in the background while a block runs.

    ``with ProcessWatch(canaries) as watch: run_job()`` then ``watch.report`` (findings deduplicated by
    process and canary; ``samples`` says how many passes were made).
    """

    def __init__(
        self,
        canaries: Iterable[str],
        *,
        environments: bool = False,
        interval_s: float = 0.2,
        process_filter: Callable[[Any], bool] | None = None,
    ) -> None:
        self.needles = _needles(canaries)
        self.environments = environments
        self.interval_s = interval_s
        self.process_filter = process_filter
        self.samples = 0
        self._found: dict[tuple[str, str, str], Finding] = {}
        self._checked: set[tuple[str, str]] = set()
        self._unchecked: dict[tuple[str, str], tuple[str, str, str]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canary-process-watch", daemon=True)

    def sample(self) -> None:
        found = search_processes(
            self.needles, cmdlines=True, environments=self.environments, process_filter=self.process_filter
        )
        for finding in found.findings:
            self._found.setdefault((finding.canary, finding.kind, finding.where), finding)
        self._checked.update((kind, "sampled") for kind, _ in found.checked)
        for entry in found.unchecked:
            self._unchecked[(entry[0], entry[2])] = entry
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> ProcessWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    @property
    def report(self) -> Report:
        return Report(
            findings=list(self._found.values()),
            checked=[(kind, f"{self.samples} samples") for kind, _ in sorted(self._checked)],
            unchecked=list(self._unchecked.values()),
        )
