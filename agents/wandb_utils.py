"""Weights & Biases without surprises: offline by default, never a login prompt, no network.

``mode="offline"`` writes a run directory under ``<dir>/wandb/`` that ``wandb sync`` uploads
later; ``"disabled"`` makes every call a no-op; ``"online"`` needs ``WANDB_API_KEY`` or a prior
``wandb login`` (we never prompt). ``WANDB_MODE`` in the environment overrides ``mode``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MODES = ("offline", "online", "disabled")


def init_run(
    mode: str,
    out_dir: str | Path,
    config: Mapping[str, Any],
    name: str,
    project: str = "servegym",
    job_type: str = "train",
) -> Any:
    """Start a ``wandb`` run with the full config.

    :param mode: ``offline``, ``online`` or ``disabled`` (``WANDB_MODE`` overrides it).
    :param out_dir: parent of the local ``wandb/`` run directory.
    :param config: logged as the run's config.
    :param name: run name.
    :param project: W&B project.
    :param job_type: ``train`` or ``evaluate``.
    :raises ValueError: for an unknown mode.
    """
    mode = os.environ.get("WANDB_MODE", mode)
    if mode == "dryrun":
        mode = "offline"
    if mode not in MODES:
        raise ValueError(f"wandb mode must be one of {MODES}, got {mode!r}")
    # Our package is called ``agents``, the module name of OpenAI's Agents SDK: without this,
    # every run prints "Detected [agents] in use. Use W&B Weave ...". A user's own setting wins.
    os.environ.setdefault("WANDB_DISABLE_WEAVE", "true")
    import wandb

    Path(out_dir).mkdir(parents=True, exist_ok=True)
    settings = wandb.Settings(silent=True, console="off", init_timeout=60)
    run = wandb.init(
        project=project,
        name=name,
        config=dict(config),
        dir=str(out_dir),
        mode=mode,  # type: ignore[arg-type]  # checked against MODES above
        job_type=job_type,
        settings=settings,
        reinit="finish_previous",
    )
    if mode != "disabled":
        run.define_metric("global_step")
        run.define_metric("*", step_metric="global_step")
        run.define_metric("bc/epoch")
        run.define_metric("bc/*", step_metric="bc/epoch")
    return run


def where(run: Any) -> str:
    """Where ``run`` goes, in one line: the offline directory and the ``wandb sync`` command
    that uploads it, the online run's URL, or that W&B is disabled."""
    mode = getattr(getattr(run, "settings", None), "mode", "disabled")
    if getattr(run, "disabled", False) or mode == "disabled":
        return "W&B: disabled (--wandb offline or online to record the run)"
    if mode == "offline" or getattr(run, "offline", False):
        directory = getattr(run.settings, "sync_dir", None) or str(Path(run.dir).parent)
        return f"W&B: offline run in {directory}; upload it with: wandb sync {directory}"
    return f"W&B: online run at {getattr(run, 'url', None) or '(no URL)'}"


def log_comparison(
    run: Any,
    rows: Sequence[Mapping[str, Any]],
    table_text: str,
    images: Sequence[str | Path] = (),
    *,
    metrics: Sequence[str],
    prefix: str = "final",
    extra_columns: Sequence[str] = (),
) -> None:
    """Log an evaluation: one table row per (workload, policy, seed), the printed table as text,
    the plots, and per-policy means in the run summary.

    :param run: the ``wandb`` run.
    :param rows: rows from ``evaluation.evaluate``.
    :param table_text: the formatted table (``evaluation.format_table``).
    :param images: PNG paths (attainment curves, sweep plots).
    :param metrics: metric columns (the env family's headline metrics).
    :param prefix: key prefix (``final``, ``evaluate``).
    :param extra_columns: row keys that tell columns apart besides the workload (a swept option
        such as ``slo_scale``); they become table columns and part of the summary keys.
    """
    import wandb

    columns: list[str | int] = ["workload", *extra_columns, "policy", "seed", *metrics]
    data = [
        [
            r["workload"],
            *(r.get(c) for c in extra_columns),
            r["policy"],
            r["seed"],
            *(r["metrics"].get(m) for m in metrics),
        ]
        for r in rows
    ]
    payload: dict[str, Any] = {
        f"{prefix}/results": wandb.Table(columns=columns, data=data),
        f"{prefix}/table": wandb.Html(f"<pre>{table_text}</pre>"),
    }
    for path in images:
        payload[f"{prefix}/{Path(path).stem}"] = wandb.Image(str(path))
    run.log(payload)
    for (column, policy), vals in _means(rows, metrics, extra_columns).items():
        for m, v in vals.items():
            run.summary[f"{prefix}/{column}/{policy}/{m}"] = v


def _means(
    rows: Sequence[Mapping[str, Any]], metrics: Sequence[str], extra_columns: Sequence[str] = ()
) -> dict[tuple[str, str], dict[str, float]]:
    import numpy as np

    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in rows:
        column = "/".join([r["workload"], *(f"{c}={r.get(c)}" for c in extra_columns)])
        groups.setdefault((column, r["policy"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        out[key] = {
            m: float(
                np.mean([np.inf if r["metrics"].get(m) is None else r["metrics"][m] for r in rs])
            )
            for m in metrics
        }
    return out


def log_model_artifact(run: Any, path: str | Path, name: str, metadata: Mapping[str, Any]) -> None:
    """Attach a saved model to the run as a ``model`` artifact.

    :param run: the ``wandb`` run.
    :param path: the ``model.zip``.
    :param name: artifact name (letters, digits, ``-_.``).
    :param metadata: stored with the artifact (e.g. final Req99).
    """
    import re

    import wandb

    if getattr(run, "disabled", False) or wandb.run is None:
        return
    art = wandb.Artifact(
        re.sub(r"[^A-Za-z0-9._-]+", "-", name), type="model", metadata=dict(metadata)
    )
    art.add_file(str(path))
    run.log_artifact(art)
