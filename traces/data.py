"""Where the public trace files live: the data directory.

The raw public traces are never part of this repository. They live in a *data directory*, given
explicitly (``--data-dir``, or a ``data_dir=`` argument) or through the ``SERVEGYM_DATA``
environment variable, laid out as ``<data dir>/<source name>/<file>`` (see
:mod:`traces.sources`, which also has :func:`~traces.sources.require_file`: the path of one
public file, or an error naming its source and how to fetch it). ``python -m traces.download``
fills one.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Environment variable naming the data directory.
DATA_ENV_VAR = "SERVEGYM_DATA"


def _how_to_fix() -> str:
    return (
        f"Set {DATA_ENV_VAR} to the directory that holds the public traces "
        f"(e.g. `export {DATA_ENV_VAR}=$HOME/servegym-data`) or pass --data-dir, and fetch the "
        f"files with `python -m traces.download --data-dir DIR` (or copy them there by hand, "
        f"laid out as DIR/<source>/<file>; `python -m traces.sources` lists them)."
    )


class DataDirNotFoundError(FileNotFoundError):
    """No usable data directory: none was given, or the given one does not exist.

    :param reason: what was wrong, e.g. ``"SERVEGYM_DATA is not set"``.
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}. {_how_to_fix()}")


def data_dir(explicit: str | Path | None = None) -> Path:
    """Resolve the data directory holding the public traces.

    :param explicit: a directory given by the caller (e.g. ``--data-dir``); when ``None`` the
        ``SERVEGYM_DATA`` environment variable is used.
    :returns: the directory, as an absolute path.
    :raises DataDirNotFoundError: when neither is given, or the directory does not exist.
    """
    if explicit is not None and str(explicit) != "":
        root, origin = Path(explicit).expanduser(), "the data directory"
    else:
        value = os.environ.get(DATA_ENV_VAR, "")
        if not value:
            raise DataDirNotFoundError(f"no data directory given and {DATA_ENV_VAR} is not set")
        root, origin = Path(value).expanduser(), f"{DATA_ENV_VAR}"
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise DataDirNotFoundError(f"{origin} {str(root)!r} {what}")
    return root.resolve()
