"""``python -m envs.predictors --report``: see :mod:`envs.predictors.report`."""

from envs.predictors.report import main

main()
