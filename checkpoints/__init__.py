"""The trained policies that ship with servegym, one directory per env family (``model.zip`` and
the ``config.json`` of the ``train.py`` run that wrote it; see ``checkpoints/README.md``).

They install with the package, so ``ckpt:routing`` (``evaluate.py --policies``,
:func:`evaluation.compare`) finds them from any directory: :func:`shipped`.
"""

from __future__ import annotations

from pathlib import Path

#: The directory holding the shipped checkpoints (inside the installed package).
ROOT = Path(__file__).resolve().parent


def families() -> list[str]:
    """The shipped checkpoints by directory name (``allocation``, ``pd-cluster``, ``routing``,
    ``routing-v0``)."""
    return sorted(p.name for p in ROOT.iterdir() if (p / "model.zip").is_file())


def shipped(family: str) -> Path | None:
    """The directory of ``family``'s shipped checkpoint, or None if there is none."""
    path = ROOT / family
    return path if (path / "model.zip").is_file() else None
