"""Result files: ``results.json`` (strict JSON: inf/nan as null), ``results.csv`` (nested
dicts flattened) and the ``run.json`` provenance sidecar (command, commit, date).
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.config import unique


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", name)


def json_safe(value: Any) -> Any:
    """``value`` with every inf/nan float replaced by None (JSON has no inf/nan)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys (``metrics.req95``); lists (curves, per-workflow times) are
    left out: they live in the JSON."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        elif not isinstance(value, list | tuple):
            flat[f"{prefix}{key}"] = value
    return flat


def write_results(rows: Sequence[dict[str, Any]], json_path: Path, csv_path: Path) -> None:
    """Write ``rows`` as strict JSON (a list of rows) and as a flat CSV."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(json_safe(list(rows)), f, indent=1, allow_nan=False)
    flat = [flatten(r) for r in rows]
    columns = unique(k for r in flat for k in r)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(flat)


def provenance_path(json_path: Path) -> Path:
    """The provenance sidecar of a results file: ``run.json`` beside ``results.json``, else
    ``<stem>.run.json`` (``--json other.json``)."""
    if json_path.name == "results.json":
        return json_path.with_name("run.json")
    return json_path.with_name(f"{json_path.stem}.run.json")


def git_commit(directory: Path) -> str:
    """``git rev-parse HEAD`` of the checkout holding ``directory``, with ``-dirty`` when tracked
    files have uncommitted changes; ``unknown`` outside a git checkout or without git."""
    import os
    import subprocess

    # GIT_OPTIONAL_LOCKS=0: `git status` must not refresh (write) the index of a tree in use.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}

    def git(*args: str) -> str:
        out = subprocess.run(
            ["git", *args], cwd=directory, env=env, capture_output=True, text=True, timeout=30
        )
        if out.returncode != 0:
            raise OSError(out.stderr.strip())
        return out.stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def write_provenance(json_path: Path, command: str, wall_seconds: float) -> Path:
    """Write the run's provenance beside ``json_path`` (:func:`provenance_path`): the exact
    command, the commit of this checkout and the UTC date. Kept out of ``results.json``, whose
    rows are a deterministic function of the command."""
    from datetime import datetime, timezone

    path = provenance_path(json_path)
    record = {
        "command": command,
        "commit": git_commit(Path(__file__).resolve().parents[1]),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "wall_seconds": round(wall_seconds, 1),
    }
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path
