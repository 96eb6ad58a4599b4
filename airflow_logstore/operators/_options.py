"""Operator arguments that may arrive as rendered templates: ``"{{ params.dry_run }}"`` becomes ``"False"``.

One parser per kind, so every operator accepts the same spellings and names the argument it refused.
"""

from __future__ import annotations

from typing import Any

from airflow_logstore.exceptions import OptionError

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off", "", "none")


def as_bool(value: Any, name: str) -> bool:
    """``value`` as a boolean: a bool, or one of :data:`TRUE_WORDS` / :data:`FALSE_WORDS` in any case.

    :param name: the argument's name, for the :class:`OptionError` on any other value
    """
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in TRUE_WORDS:
        return True
    if text in FALSE_WORDS:
        return False
    raise OptionError(name, f"expected true or false, got '{value}'")


def as_int(value: Any, name: str) -> int | None:
    """``value`` as an integer; None when it is None or blank (the argument was not given)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise OptionError(name, f"must be an integer, got {value!r}") from None
