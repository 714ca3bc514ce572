"""Fetch the public traces into the data directory, checking every file's SHA-256.

Usage::

    python -m traces.download [--data-dir D] [--mirror URL] [--timeout S] [NAME ...]

``NAME`` are source names from :data:`traces.sources.SOURCES` (all when none is given). Files are
fetched from the upstream commit they were taken from (``raw.githubusercontent.com``; ``--mirror``
replaces that host, e.g. a local copy served over HTTP). A file already present with the right
checksum is skipped; a download whose checksum does not match is discarded. When the network is
unreachable the command says so in one paragraph, explains how to copy the files by hand, and
exits 1; the files can always be placed by hand at ``<data dir>/<source>/<file>``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from traces.data import DATA_ENV_VAR
from traces.sources import RAW_GITHUB, SOURCES, SourceFile, file_status, get_source

#: Seconds to wait for a server to answer before giving up on a file.
DEFAULT_TIMEOUT_S = 20.0


class NetworkUnreachableError(OSError):
    """The download server could not be reached at all (as opposed to a missing file).

    :param url: the URL that failed.
    :param reason: why, as reported by the network stack.
    """

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"cannot reach {url}: {reason}")


def file_url(file: SourceFile, mirror: str | None = None) -> str:
    """Download URL of a file, optionally on a mirror of ``raw.githubusercontent.com``.

    :param file: the file.
    :param mirror: base URL replacing ``https://raw.githubusercontent.com``; ``None`` for upstream.
    """
    if mirror is None or not file.url.startswith(RAW_GITHUB + "/"):
        return file.url
    return mirror.rstrip("/") + file.url[len(RAW_GITHUB) :]


def fetch_file(
    file: SourceFile, root: Path, *, mirror: str | None = None, timeout: float = DEFAULT_TIMEOUT_S
) -> None:
    """Download one file to ``root / file.relpath`` and check its size and SHA-256.

    The data goes to a ``.part`` file that is renamed only once the checksum matches.

    :param file: the file to fetch.
    :param root: the data directory.
    :param mirror: see :func:`file_url`.
    :param timeout: seconds to wait for the server.
    :raises NetworkUnreachableError: when the server cannot be reached at all.
    :raises OSError: on an HTTP error (e.g. 404) or a size or checksum mismatch, naming the file.
    """
    url = file_url(file, mirror)
    dest = root / file.relpath
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    size = 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, open(part, "wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                digest.update(block)
                size += len(block)
                out.write(block)
    except urllib.error.HTTPError as err:
        part.unlink(missing_ok=True)
        raise OSError(f"{file.relpath}: HTTP {err.code} {err.reason} from {url}") from err
    except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
        part.unlink(missing_ok=True)
        reason = getattr(err, "reason", err)
        raise NetworkUnreachableError(url, str(reason)) from err
    if size != file.bytes or digest.hexdigest() != file.sha256:
        part.unlink(missing_ok=True)
        raise OSError(
            f"{file.relpath}: downloaded {size} bytes with SHA-256 {digest.hexdigest()}, expected "
            f"{file.bytes} bytes with SHA-256 {file.sha256} (from {url}); discarded"
        )
    os.replace(part, dest)


def fetch(
    files: Iterable[SourceFile],
    root: Path,
    *,
    mirror: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    log: Callable[[str], None] = print,
) -> list[str]:
    """Fetch the files that are missing or wrong in ``root``; skip those already correct.

    :param files: the files to fetch.
    :param root: the data directory (created if needed).
    :param mirror: see :func:`file_url`.
    :param timeout: seconds to wait for the server, per file.
    :param log: receives one progress line per file.
    :returns: one line per file that could not be fetched (empty when all are in place).
    :raises NetworkUnreachableError: at the first file whose server cannot be reached; the
        remaining files are not tried.
    """
    problems = []
    for file in files:
        status = file_status(root, file)
        if status == "ok":
            log(f"  ok       {file.relpath} (already present)")
            continue
        if status != "missing":
            log(f"  replace  {file.relpath} ({status})")
        try:
            fetch_file(file, root, mirror=mirror, timeout=timeout)
        except NetworkUnreachableError:
            raise
        except OSError as err:
            problems.append(str(err))
            log(f"  FAILED   {err}")
            continue
        log(f"  fetched  {file.relpath} ({file.bytes} bytes, checksum ok)")
    return problems


def unreachable_message(err: NetworkUnreachableError, root: Path) -> str:
    """The paragraph shown when the network is unreachable.

    :param err: the failure.
    :param root: the data directory the files should go to.
    """
    return (
        f"Could not download the public traces: {err.url} is unreachable ({err.reason}). This "
        "machine seems to have no internet access (or a proxy or firewall blocks it); no further "
        f"files were tried. The files can be copied by hand instead: put each one at "
        f"{root}/<source>/<file> (`python -m traces.sources` lists every file with its upstream "
        f"URL, size and SHA-256), then check them with "
        f"`python -m traces.sources --check --data-dir {root}`."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m traces.download``; returns the exit code (0 all files in place, 1 otherwise)."""
    parser = argparse.ArgumentParser(
        prog="python -m traces.download",
        description="Fetch the public traces into the data directory and check their SHA-256.",
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="source names (default: all)")
    parser.add_argument(
        "--data-dir", help=f"data directory, created if missing (default: ${DATA_ENV_VAR})"
    )
    parser.add_argument(
        "--mirror", help=f"base URL to use instead of {RAW_GITHUB} (same <repo>/<commit>/<path>)"
    )
    parser.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per request"
    )
    args = parser.parse_args(argv)
    target = args.data_dir or os.environ.get(DATA_ENV_VAR)
    if not target:
        print(
            f"error: no data directory: pass --data-dir DIR or set {DATA_ENV_VAR}=DIR "
            "(the directory is created if it does not exist)",
            file=sys.stderr,
        )
        return 2
    try:
        sources = [get_source(n) for n in args.names] if args.names else list(SOURCES)
    except KeyError as err:
        print(f"error: {err.args[0]}", file=sys.stderr)
        return 2
    root = Path(target).expanduser().resolve()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"error: cannot create the data directory {str(root)!r}: {err}", file=sys.stderr)
        return 1
    problems: list[str] = []
    for source in sources:
        print(f"{source.name} ({source.licence}) -> {root / source.name}")
        try:
            problems += fetch(source.files, root, mirror=args.mirror, timeout=args.timeout)
        except NetworkUnreachableError as err:
            print(unreachable_message(err, root), file=sys.stderr)
            return 1
    if problems:
        print(f"{len(problems)} file(s) could not be fetched:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        return 1
    print(f"all files of {len(sources)} source(s) are in {root} with matching checksums")
    return 0


if __name__ == "__main__":
    from traces.download import main as _main

    sys.exit(_main())
