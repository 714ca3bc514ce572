"""Disk and in-process cache of trained predictors, keyed by a hash of their configuration.

Files are ``<dir>/<kind>-<16 hex of sha256(config)>.npz`` in ``$SERVEGYM_CACHE`` (default
``~/.cache/servegym/predictors``), written atomically (temp file + rename) so that concurrent
env workers never read half a file. A file that is missing, unreadable or does not rebuild is
retrained and overwritten. The key includes the library versions and a hash of the goodserve
generator's source and statistics, which the weights also depend on.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import sklearn
import torch

T = TypeVar("T")
_MEMORY: dict[str, Any] = {}


def cache_dir() -> Path:
    """``$SERVEGYM_CACHE`` or ``~/.cache/servegym/predictors``."""
    env = os.environ.get("SERVEGYM_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "servegym" / "predictors"


def _training_data_version() -> str:
    """Hash of the goodserve generators' sources and statistics: editing either changes
    the training requests, so it must invalidate cached weights."""
    import traces.generators.goodserve as gs
    import traces.generators.goodserve_sessions as gss
    from traces.generators._common import STATS_DIR

    h = hashlib.sha256(Path(gs.__file__).read_bytes())
    h.update(Path(gss.__file__).read_bytes())  # the prompt wording lives there
    for f in sorted(Path(STATS_DIR).glob("goodserve*")):
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def config_key(kind: str, config: dict[str, Any]) -> str:
    """``<kind>-<hash>`` of the config, the training data's version and the torch /
    scikit-learn / numpy versions."""
    full = dict(
        config,
        data=_training_data_version(),
        torch=torch.__version__,
        sklearn=sklearn.__version__,
        numpy=np.__version__,
    )
    digest = hashlib.sha256(json.dumps(full, sort_keys=True).encode()).hexdigest()[:16]
    return f"{kind}-{digest}"


def cached(
    kind: str,
    config: dict[str, Any],
    train: Callable[[], dict[str, np.ndarray]],
    build: Callable[[dict[str, np.ndarray]], T],
    use_cache: bool = True,
) -> T:
    """The model for ``config``: from memory, else from disk, else ``build(train())``.

    :param train: returns the model's state as named arrays (what is saved).
    :param build: turns such a state into the model; a state that fails to build is retrained.
    :param use_cache: False trains afresh and touches neither cache.
    """
    if not use_cache:
        return build(train())
    key = config_key(kind, config)
    if key in _MEMORY:
        return _MEMORY[key]
    path = cache_dir() / f"{key}.npz"
    model: T | None = None
    try:
        with np.load(path, allow_pickle=False) as z:
            model = build({k: z[k] for k in z.files})
    except Exception:  # missing, truncated or stale file: retrain below
        model = None
    if model is None:
        state = train()
        model = build(state)
        _save(path, state)
    _MEMORY[key] = model
    return model


def _save(path: Path, state: dict[str, np.ndarray]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.stem, suffix=".tmp.npz")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **state)  # type: ignore[arg-type]  # numpy's stub: savez(file, *args, allow_pickle, **kwds)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def clear_memory() -> None:
    """Forget the in-process cache (tests; the disk cache stays)."""
    _MEMORY.clear()
