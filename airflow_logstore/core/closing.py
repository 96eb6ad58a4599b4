"""One way for an object that holds connections to be a context manager: ``with`` closes it."""

from __future__ import annotations

from typing import Self


class Closing:
    """``with thing as t: ...`` calls ``t.close()`` on the way out, however the block ends (the
    long-lived publisher, its control reader and feed copier, a writer that publishes)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
