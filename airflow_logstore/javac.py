"""Small Java classes of the project, compiled once with the JDK's ``javac`` into the local cache.

The REST catalog's loopback launcher (:mod:`airflow_logstore.services.rest_catalog`) and the dual
write's log producer (:mod:`airflow_logstore.write.producing`) are Java sources shipped with the
package. Each is compiled once per source text and classpath into ``<jars_dir>/<name>-<digest>``
(a class folder, and optionally a jar of it); later calls find it there. Parallel callers (test
workers) compile one at a time per name. A program started often (the JVM log scan) also keeps a
class-data archive there (:func:`class_archive`), written by its first run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import LocalSettings


def compiled_classes(
    name: str, class_name: str, source: str, classpath: str, settings: LocalSettings, *, purpose: str
) -> Path:
    """The class folder of ``class_name`` (its full name) compiled from ``source`` against ``classpath``.

    :param purpose: what the class is for, named in the error when there is no ``javac``.
    """
    digest = hashlib.sha256(f"{source}\n{classpath}".encode()).hexdigest()[:16]
    target = settings.jars_dir / f"{name}-{digest}"
    if (target / ".complete").exists():
        return target
    settings.jars_dir.mkdir(parents=True, exist_ok=True)
    with open(settings.jars_dir / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (target / ".complete").exists():
            return target
        staging = target.with_name(target.name + ".part")
        shutil.rmtree(staging, ignore_errors=True)
        file = staging / "src" / (class_name.replace(".", "/") + ".java")
        file.parent.mkdir(parents=True)
        file.write_text(source)
        result = subprocess.run(
            [javac(purpose), "-nowarn", "-cp", classpath, "-d", str(staging), str(file)],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise ServiceError(f"compiling {class_name} failed:\n{result.stdout}{result.stderr}")
        shutil.rmtree(staging / "src")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        (target / ".complete").write_text(class_name)
        return target


def compiled_jar(
    name: str, class_name: str, source: str, classpath: str, settings: LocalSettings, *, purpose: str
) -> Path:
    """Like :func:`compiled_classes`, packed into ``<folder>.jar`` (for Spark's ``addJar``)."""
    folder = compiled_classes(name, class_name, source, classpath, settings, purpose=purpose)
    jar = folder.with_name(folder.name + ".jar")
    if jar.exists():
        return jar
    staging = jar.with_name(f"{jar.name}.{os.getpid()}.part")
    with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as packed:
        packed.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
        for path in sorted(folder.rglob("*.class")):
            packed.write(path, path.relative_to(folder).as_posix())
    staging.replace(jar)  # atomic: a parallel caller finds a whole jar or none
    return jar


@dataclass(frozen=True)
class ClassArchive:
    """A class-data-sharing archive (AppCDS) of a small Java program's classes and the jars it loads: a
    JVM started from it maps them from one file instead of loading and checking each class (for the
    Kafka client, its first records come about 0.3 s sooner). The first run writes it as it exits;
    :meth:`keep` puts it in place after a run that exited cleanly. An archive the JVM cannot use (another
    JVM build) is skipped by the JVM with a warning, never an error."""

    path: Path
    staging: Path | None  # None: the archive exists; else where this run writes it

    @property
    def options(self) -> list[str]:
        if self.staging is None:
            return [f"-XX:SharedArchiveFile={self.path}"]
        return [f"-XX:ArchiveClassesAtExit={self.staging}"]

    def keep(self) -> None:
        """After a clean exit: the archive this run wrote is the one later runs start from."""
        if self.staging is not None and self.staging.exists():
            self.staging.replace(self.path)  # atomic: a parallel run finds a whole archive or none

    def discard(self) -> None:
        if self.staging is not None:
            self.staging.unlink(missing_ok=True)


def class_archive(name: str, classpath: str, java: str, settings: LocalSettings) -> ClassArchive:
    """The :class:`ClassArchive` of a program run with ``java`` on ``classpath`` (jars only: the JVM
    archives no class folder), kept in the jars cache next to the compiled classes."""
    binary = Path(java).resolve()
    digest = hashlib.sha256(f"{classpath}\n{binary}\n{binary.stat().st_mtime_ns}".encode()).hexdigest()[:16]
    path = settings.jars_dir / f"{name}-{digest}.jsa"
    if path.exists():
        return ClassArchive(path, None)
    settings.jars_dir.mkdir(parents=True, exist_ok=True)
    return ClassArchive(path, path.with_name(f"{path.name}.{os.getpid()}.part"))


def java_binary() -> str | None:
    """The ``java`` of ``JAVA_HOME``, else of PATH, or None."""
    java_home = os.environ.get("JAVA_HOME")
    java = Path(java_home) / "bin" / "java" if java_home else None
    if java is not None and java.exists():
        return str(java)
    return shutil.which("java")


def javac_binary() -> str | None:
    """The ``javac`` next to :func:`java_binary`, else PATH's, or None."""
    java = java_binary()
    candidate = Path(java).resolve().parent / "javac" if java is not None else None
    return str(candidate) if candidate is not None and candidate.exists() else shutil.which("javac")


def javac(purpose: str) -> str:
    """:func:`javac_binary`, or an error naming ``purpose`` and how to install a JDK."""
    found = javac_binary()
    if not found:
        raise ServiceError(
            f"{purpose} is compiled once with javac: install a JDK 17 "
            "(e.g. apt-get install openjdk-17-jdk-headless), not only a JRE"
        )
    return found
