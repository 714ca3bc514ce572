"""Regenerate every results table and figure of the documentation: ``make results`` or
``python -m evaluation.report``.

The tables are measured by stages (:mod:`evaluation.report.stages`, one module per page); each
stage runs its commands (``evaluate.py``, ``train.py`` and ``benchmarks`` runs), caches their
output (:mod:`evaluation.report.runner`: an interrupted report resumes where it stopped) and
writes a fragment ``results/tables/<stage>.md`` that names the commit, the date, the wall time
and the commands; the documentation pages include the fragments
(``--8<-- "results/tables/<stage>.md"``), so every table in them says how it was made.

    python -m evaluation.report --list              # the stages, their pages and expected minutes
    python -m evaluation.report -j 2                # run every stage not cached for this code
    python -m evaluation.report --stages goodserve-paper --force
    python -m evaluation.report --check             # fragments measured under other code
"""

from evaluation.report.stage import CommandOutput, Stage, StageRun, stage, text_block

__all__ = ["CommandOutput", "Stage", "StageRun", "stage", "text_block"]
