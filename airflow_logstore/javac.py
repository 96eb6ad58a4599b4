"""The project's Java programs: built into the wheel, else compiled once with the JDK's ``javac``.

The dual write's log producer (``write/java/LogProducer.java``) and the JVM log scan
(``log/java/LogScan.java``) are :data:`PROGRAMS`. Building the wheel (``setup.py``) compiles each
(:func:`build_jar`, ``--release`` :data:`JAVA_RELEASE`) against the Spark and Kafka client jars of
:data:`airflow_logstore.versions.JAVA_COMPILE_ARTIFACTS` into ``<package>/java/<name>.jar``, which
records the digest of the source it was built from: an installed wheel runs on a JRE, no ``javac``
needed (:meth:`JavaProgram.shipped`). A source checkout (an editable install) has no such jar, or one
for another source text: there the program is compiled once with ``javac`` into
``<jars_dir>/<name>-<digest>`` (:func:`compiled_jar`) and later calls find it there; parallel callers
(test workers) compile one at a time per name. The REST catalog's loopback launcher
(the development setup's local services, in the repository only) is always compiled that way. A
program started often (the JVM log scan) also keeps a class-data archive in the jars cache
(:func:`class_archive`), written by its first run.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from airflow_logstore.exceptions import ServiceError
from airflow_logstore.settings import LocalSettings

#: The Java release the programs are compiled for: the lowest that Spark 4.1 runs on.
JAVA_RELEASE = "17"
#: The manifest attribute of a built jar: the SHA-256 of the source text it was compiled from.
SOURCE_DIGEST_ATTRIBUTE = "LogStore-Source-SHA256"


@dataclass(frozen=True)
class JavaProgram:
    """A Java source shipped in ``package`` (``java/<file>``), built into ``java/<name>.jar`` there."""

    name: str
    package: str
    file: str
    class_name: str
    purpose: str  # what it is for, named in errors

    @property
    def jar_path(self) -> str:
        """The jar's path inside the package."""
        return f"java/{self.name}.jar"

    def source(self) -> str:
        return resources.files(self.package).joinpath(f"java/{self.file}").read_text()

    def shipped(self) -> Path | None:
        """The jar built into the installed package for this source text, or None (a source checkout,
        or a jar left from another version of the source)."""
        return _shipped(self)

    def jar(self, classpath: str, settings: LocalSettings) -> Path:
        """:meth:`shipped`, else the source compiled once against ``classpath`` (``javac`` needed)."""
        found = self.shipped()
        if found is not None:
            return found
        if javac_binary() is None:
            raise ServiceError(
                f"{self.purpose} needs its jar: this installation of airflow-logstore has no prebuilt "
                f"{self.package.replace('.', '/')}/{self.jar_path} (a source checkout?) and there is no "
                "javac to compile it. Install the built wheel (a JRE 17+ is then enough), or a JDK 17+ "
                "(e.g. apt-get install openjdk-17-jdk-headless)"
            )
        return compiled_jar(
            self.name, self.class_name, self.source(), classpath, settings, purpose=self.purpose
        )


@cache
def _shipped(program: JavaProgram) -> Path | None:
    candidate = resources.files(program.package).joinpath(program.jar_path)
    if not candidate.is_file():
        return None
    jar = Path(str(candidate))
    return jar if jar_source_digest(jar) == source_digest(program.source()) else None


#: The programs built into the wheel.
PROGRAMS = (
    JavaProgram(
        "log-producer",
        "airflow_logstore.write",
        "LogProducer.java",
        "airflow_logstore.LogProducer",
        "the dual write's log producer (a Spark task in the JVM)",
    ),
    JavaProgram(
        "log-scan",
        "airflow_logstore.log",
        "LogScan.java",
        "airflow_logstore.LogScan",
        "the JVM log scan (reconciliation)",
    ),
)
LOG_PRODUCER, LOG_SCAN = PROGRAMS


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def jar_source_digest(jar: Path) -> str | None:
    """The source digest :func:`build_jar` wrote into ``jar``'s manifest, or None."""
    try:
        with zipfile.ZipFile(jar) as packed:
            manifest = packed.read("META-INF/MANIFEST.MF").decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    for line in manifest.splitlines():
        key, _, value = line.partition(": ")
        if key == SOURCE_DIGEST_ATTRIBUTE:
            return value.strip()
    return None


def build_jar(javac_path: str, class_name: str, source: str, classpath: str, jar: Path) -> None:
    """Compile ``source`` (the class ``class_name``) against ``classpath`` into ``jar``, whose manifest
    records the source's digest. The wheel's build calls it (``setup.py``), as the fallback does."""
    with tempfile.TemporaryDirectory(prefix="logstore-javac-") as work:
        classes = Path(work) / "classes"
        _compile(javac_path, class_name, source, classpath, Path(work) / "src", classes)
        _pack(classes, source, jar)


def _compile(javac_path: str, class_name: str, source: str, classpath: str, src: Path, out: Path) -> None:
    file = src / (class_name.replace(".", "/") + ".java")
    file.parent.mkdir(parents=True)
    file.write_text(source)
    command = [javac_path, "--release", JAVA_RELEASE, "-nowarn", "-cp", classpath, "-d", str(out), str(file)]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ServiceError(f"compiling {class_name} failed:\n{result.stdout}{result.stderr}")


def _pack(classes: Path, source: str, jar: Path) -> None:
    manifest = f"Manifest-Version: 1.0\r\n{SOURCE_DIGEST_ATTRIBUTE}: {source_digest(source)}\r\n\r\n"
    staging = jar.with_name(f"{jar.name}.{os.getpid()}.part")
    with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as packed:
        packed.writestr("META-INF/MANIFEST.MF", manifest)
        for path in sorted(classes.rglob("*.class")):
            packed.write(path, path.relative_to(classes).as_posix())
    staging.replace(jar)  # atomic: a parallel caller finds a whole jar or none


def compiled_classes(
    name: str, class_name: str, source: str, classpath: str, settings: LocalSettings, *, purpose: str
) -> Path:
    """The class folder of ``class_name`` (its full name) compiled from ``source`` against ``classpath``.

    :param purpose: what the class is for, named in the error when there is no ``javac``.
    """
    digest = hashlib.sha256(f"{source}\n{classpath}\n{JAVA_RELEASE}".encode()).hexdigest()[:16]
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
        _compile(javac(purpose), class_name, source, classpath, staging / "src", staging)
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
    if not jar.exists():
        _pack(folder, source, jar)
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
