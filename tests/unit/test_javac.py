"""The Java programs' jars: the wheel's own for the same source text, else javac, else a clear error."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_logstore import javac
from airflow_logstore.exceptions import ServiceError
from airflow_logstore.javac import JavaProgram, jar_source_digest, source_digest
from airflow_logstore.settings import local_settings

SOURCE = "package demo; public final class Hello {}\n"


@pytest.fixture
def program(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[JavaProgram]:
    """A package ``jarpkg`` with ``java/Hello.java``, as an installed package holds it."""
    package = tmp_path / "site" / "jarpkg"
    (package / "java").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "java" / "Hello.java").write_text(SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    javac._shipped.cache_clear()
    yield JavaProgram("hello", "jarpkg", "Hello.java", "demo.Hello", "the hello program")
    javac._shipped.cache_clear()
    sys.modules.pop("jarpkg", None)


def _ship(program: JavaProgram, source: str, tmp_path: Path) -> Path:
    """The jar a build leaves in the package, packed from a (fake) class compiled from ``source``."""
    classes = tmp_path / "classes" / "demo"
    classes.mkdir(parents=True, exist_ok=True)
    (classes / "Hello.class").write_bytes(b"\xca\xfe\xba\xbe")
    jar = tmp_path / "site" / "jarpkg" / program.jar_path
    javac._pack(classes.parent, source, jar)
    return jar


def test_the_shipped_jar_is_used_for_the_source_it_was_built_from(
    program: JavaProgram, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jar = _ship(program, SOURCE, tmp_path)
    assert jar_source_digest(jar) == source_digest(SOURCE)
    monkeypatch.setattr(javac, "javac_binary", lambda: None)  # a JRE: no compiler needed
    assert program.shipped() == jar
    assert program.jar("unused", local_settings()) == jar


def test_a_jar_built_from_another_source_is_not_used(program: JavaProgram, tmp_path: Path) -> None:
    """An editable checkout whose source changed after a build: the old jar would run old code."""
    _ship(program, SOURCE.replace("Hello {}", "Hello { int x; }"), tmp_path)
    assert program.shipped() is None


def test_no_jar_and_no_javac_is_an_error_naming_both_ways_out(
    program: JavaProgram, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(javac, "javac_binary", lambda: None)
    with pytest.raises(ServiceError) as failure:
        program.jar("unused", local_settings())
    message = str(failure.value)
    assert message.startswith("the hello program needs its jar:"), message
    assert "no prebuilt jarpkg/java/hello.jar" in message and "no javac" in message
    assert "Install the built wheel (a JRE 17+ is then enough), or a JDK 17+" in message


def test_the_product_programs_are_the_shipped_sources() -> None:
    """Each program's source is package data, and its class is what the source declares."""
    for program in javac.PROGRAMS:
        source = program.source()
        package, _, simple = program.class_name.rpartition(".")
        assert f"package {package};" in source and f"public final class {simple} " in source
        assert program.file == f"{simple}.java"
