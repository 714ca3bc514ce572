"""Progress bars that suit where they are written.

On a terminal, :func:`progress` is an ordinary ``tqdm`` bar. Anywhere else (a file, a pipe, a CI
log) a redrawn bar is a flood of carriage-return updates; there the same bar prints one plain
line at most every ``LOG_INTERVAL_S`` seconds (and a last one when it closes).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

#: Seconds between lines when the bar is written to something that is not a terminal.
LOG_INTERVAL_S = 30.0


class _Lines:
    """A file-like target for tqdm that turns each redraw into one newline-ended line."""

    def __init__(self, file: TextIO):
        self.file = file

    def write(self, text: str) -> int:
        line = text.replace("\r", "").strip()
        if line:
            self.file.write(line + "\n")
        return len(text)

    def flush(self) -> None:
        self.file.flush()


def is_terminal(file: Any) -> bool:
    isatty = getattr(file, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed file
        return False


def progress(iterable: Any = None, *, file: TextIO | None = None, **kwargs: Any) -> Any:
    """``tqdm(iterable, **kwargs)`` on ``file`` (default stderr): a live bar on a terminal,
    sparse plain lines elsewhere (see the module docstring)."""
    from tqdm import tqdm

    file = sys.stderr if file is None else file
    if not is_terminal(file):
        kwargs.setdefault("mininterval", LOG_INTERVAL_S)
        kwargs.setdefault("maxinterval", LOG_INTERVAL_S * 2)
        kwargs["ascii"] = True
        kwargs["ncols"] = kwargs.get("ncols", 100)
        kwargs["dynamic_ncols"] = False
        file = _Lines(file)  # type: ignore[assignment]
    return tqdm(iterable, file=file, **kwargs)
