"""``python -m envs.common.predictors --report``: see :mod:`envs.common.predictors.report`."""

from envs.common.predictors.report import main

main()
