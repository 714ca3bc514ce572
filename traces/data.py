"""Where the public trace files live: the data directory.

The raw public traces are never part of this repository. They live in a *data directory*, given
explicitly (``--data-dir``, or a ``data_dir=`` argument) or through the ``SERVEGYM_DATA``
environment variable, laid out as ``<data dir>/<source name>/<file>`` (see
:mod:`traces.sources`). ``python -m traces.download`` fills one.
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


class MissingDataFileError(FileNotFoundError):
    """A trace file that a loader needs is not in the data directory.

    :param root: the data directory that was searched.
    :param relpath: the path of the file relative to ``root``.
    :param source: name of the public source the file belongs to, or ``None`` if unknown.
    """

    def __init__(self, root: Path, relpath: str, source: str | None) -> None:
        self.root = root
        self.relpath = relpath
        self.source = source
        path = root / relpath
        if source is None:
            where = (
                "It is not a file of any known public source (`python -m traces.sources` lists "
                "them)."
            )
        else:
            from traces.sources import get_source

            src = get_source(source)
            where = (
                f"It belongs to the public trace {source!r} ({src.url}; licence {src.licence}). "
                f"Fetch it with `python -m traces.download --data-dir {root} {source}`, or copy "
                f"the file there by hand."
            )
        super().__init__(f"missing trace file {str(path)!r}. {where}")


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


def require_file(relpath: str | Path, data_dir: str | Path | None = None) -> Path:
    """Path of a public trace file, checked to exist.

    :param relpath: path relative to the data directory, e.g. ``"mooncake/synthetic_trace.jsonl"``.
    :param data_dir: the data directory; ``SERVEGYM_DATA`` when ``None``.
    :returns: the absolute path of the file.
    :raises DataDirNotFoundError: when there is no data directory.
    :raises MissingDataFileError: when the file is not there; the message names the file, the
        public source it belongs to and how to fetch it.
    """
    from traces.sources import source_of

    root = _resolve(data_dir)
    rel = Path(relpath).as_posix()
    path = root / rel
    if not path.is_file():
        source = source_of(rel)
        raise MissingDataFileError(root, rel, source.name if source else None)
    return path


# require_file's ``data_dir`` parameter shadows the function of the same name.
_resolve = data_dir
