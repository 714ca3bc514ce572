"""The evaluation machinery behind ``evaluate.py``, one concern per module.

* :mod:`evaluation.config`: :class:`EvalConfig` (every option, declared once) and its parsers;
* :mod:`evaluation.resolve`: per-env defaults filled in, trace workloads, a suite's command and
  output directory;
* :mod:`evaluation.policies`: policy resolution (heuristics, ``ckpt:``, ``alloc:``, ``py:``);
* :mod:`evaluation.runs`: one env, one episode through ``env.step``, one result row;
* :mod:`evaluation.runner`: the whole grid of a suite (serially, or via :mod:`evaluation.ray_grid`);
* :mod:`evaluation.rows`, :mod:`evaluation.tables`, :mod:`evaluation.diagnosis`: reading rows,
  the paper-style table and the notes under it;
* :mod:`evaluation.plots`, :mod:`evaluation.results`, :mod:`evaluation.leaderboard`: plots,
  result files + provenance, ``results/leaderboard.md``;
* :mod:`evaluation.compare`: :func:`compare`, policies on identical episodes from Python;
* :mod:`evaluation.cli`: the ``evaluate.py`` command line.

What each env family is compared on lives in ``envs.registry``. The modules import one another
directly, never through this package; the package re-exports the names a script or a test uses
(``from evaluation import EvalConfig, evaluate, format_table``).
"""

from envs.registry import FAMILIES, EnvFamily, Metric
from evaluation.cli import parse_args, parse_sweep
from evaluation.compare import Comparison, compare
from evaluation.config import (
    ENV_FIELD_META,
    ENV_FIELDS,
    FULL_SUITE_COMMAND,
    PAPER_POLICIES,
    PAPER_WORKLOADS,
    QUICK_SUITE_ARGS,
    EvalConfig,
    EvaluationError,
    Sweep,
    canonical_env,
    env_defaults,
    env_entry,
    fmt_value,
    parse_bool,
)
from evaluation.diagnosis import diagnose, overloaded_notes
from evaluation.leaderboard import format_leaderboard
from evaluation.plots import plot_attainment, plot_curve, plot_sweep
from evaluation.policies import (
    POLICY_LOADERS,
    Policy,
    comparison_sets,
    heuristic_names,
    resolve_policy,
)
from evaluation.ray_grid import PartialEvaluation, evaluate_task
from evaluation.resolve import (
    checkpoint_settings,
    command_for,
    default_out_dir,
    resolve_config,
)
from evaluation.results import git_commit, json_safe, provenance_path, write_results
from evaluation.rows import best_baseline, gain, mean_metric, reduction
from evaluation.runner import evaluate
from evaluation.runs import make_env, run_episode, run_one
from evaluation.tables import format_table

__all__ = [
    "ENV_FIELD_META", "ENV_FIELDS", "FAMILIES", "FULL_SUITE_COMMAND", "PAPER_POLICIES",
    "PAPER_WORKLOADS", "POLICY_LOADERS", "QUICK_SUITE_ARGS", "EnvFamily", "EvalConfig",
    "EvaluationError", "Comparison", "Metric", "PartialEvaluation", "Policy", "Sweep",
    "best_baseline", "canonical_env", "checkpoint_settings", "command_for", "compare",
    "comparison_sets", "default_out_dir", "diagnose", "env_defaults", "env_entry", "evaluate",
    "evaluate_task", "fmt_value", "format_leaderboard", "format_table", "gain", "git_commit",
    "heuristic_names", "json_safe", "make_env", "mean_metric", "overloaded_notes", "parse_args",
    "parse_bool", "parse_sweep", "plot_attainment", "plot_curve", "plot_sweep",
    "provenance_path", "reduction", "resolve_config", "resolve_policy", "run_episode",
    "run_one", "write_results",
]  # fmt: skip
