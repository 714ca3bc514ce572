"""The ``train.py`` / ``servegym-train`` command: parse and check the options
(:mod:`training.cli`, :mod:`training.checks`) and run :func:`training.run.train`. ``train.py``
in a clone and the installed ``servegym-train`` both call :func:`main`; the options are
described in ``train.py``'s docstring and ``--help``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from evaluation.config import EvaluationError
from training.checks import check_run
from training.cli import parse_args
from training.config import TrainError
from training.run import abandon, train


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status.

    Every option is checked (policies resolved on a built env) before anything is written to
    ``--out``; if the run then fails before its first model is saved, a run directory this call
    created is removed again, so a retry is not blocked by a half-written run.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg = parse_args(argv)
        check_run(cfg)
        out = Path(cfg.out)
        if (out / "config.json").exists() and not cfg.resume:
            raise TrainError(
                f"{out} already holds a run; pass --resume to continue it or choose another --out"
            )
    except (TrainError, EvaluationError) as exc:
        print(f"train.py: error: {exc}", file=sys.stderr)
        return 2
    created = not out.exists()
    try:
        return train(cfg, argv)
    except BaseException as exc:
        abandon(out, created)
        if isinstance(exc, (TrainError, EvaluationError)):
            print(f"train.py: error: {exc}", file=sys.stderr)
            return 2
        raise
