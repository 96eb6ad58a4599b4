"""The wheel's build step beyond pyproject.toml: the package's Java programs, built into jars.

``build_py`` compiles each of :data:`airflow_logstore.javac.PROGRAMS` with the JDK's ``javac``
(``--release 17``) against the Spark and Kafka client jars of
:data:`airflow_logstore.versions.JAVA_COMPILE_ARTIFACTS` (downloaded once with Maven into
``LOGSTORE_CACHE``, as every jar of the project) into ``<package>/java/<name>.jar`` of the wheel: where
the wheel is installed, a JRE runs them. Building needs a JDK 17+ and Maven; an editable install builds
no jar (the checkout compiles them at run time, see :mod:`airflow_logstore.javac`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithJars(build_py):
    """``build_py``, then the Java programs' jars into the build folder."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self._build_jars()

    def _build_jars(self) -> None:
        sys.path.insert(0, str(ROOT))  # the package being built (its build helpers import nothing else)
        from airflow_logstore import versions
        from airflow_logstore.jars import fetch_jars
        from airflow_logstore.javac import PROGRAMS, build_jar, javac_binary

        javac = javac_binary()
        if javac is None:
            raise SystemExit(
                "building airflow-logstore's wheel compiles its Java programs: install a JDK 17+ "
                "(javac), e.g. apt-get install openjdk-17-jdk-headless"
            )
        jars = fetch_jars("java-compile", versions.JAVA_COMPILE_ARTIFACTS, transitive=False)
        classpath = ":".join(str(jar) for jar in sorted(jars.glob("*.jar")))
        for program in PROGRAMS:
            package = Path(self.build_lib, *program.package.split("."))
            source = (package / "java" / program.file).read_text()
            target = package / program.jar_path
            self.announce(f"compiling {program.file} into {target}", level=2)
            build_jar(javac, program.class_name, source, classpath, target)


setup(cmdclass={"build_py": BuildPyWithJars})
