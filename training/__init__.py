"""The training machinery behind ``train.py``: behaviour cloning from an expert, then RL.

* :mod:`training.config`: :class:`~training.config.TrainConfig` (every option, declared once),
  the ``--config`` file reader and the env family's training defaults filled in;
* :mod:`training.checks`: options checked before any work starts; the baselines of a run;
* :mod:`training.cli`: the ``train.py`` command line;
* :mod:`training.compare`: evaluation during and after training, through :mod:`evaluation`;
* :mod:`training.run`: one run, top to bottom.

It sits beside :mod:`evaluation` (which it uses) above :mod:`agents` (SB3 builders, extractors,
BC, vectorised envs), so nothing in ``agents`` imports it or ``evaluation``.
"""

from training.checks import baselines_of, check_config, check_run
from training.cli import parse_args
from training.compare import eval_config, learned_rows, mean_metrics
from training.config import TrainConfig, TrainError, load_config_file, resolve
from training.run import train

__all__ = [
    "TrainConfig", "TrainError", "baselines_of", "check_config", "check_run", "eval_config",
    "learned_rows", "load_config_file", "mean_metrics", "parse_args", "resolve", "train",
]  # fmt: skip
