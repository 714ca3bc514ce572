"""What every servegym env shares: the base class and its rules for actions, masks, ``info``
and rendering (:mod:`~envs.common.base`), reward functions (:mod:`~envs.common.rewards`),
output-length predictors (:mod:`~envs.common.predictors`), run-alone latency
(:mod:`~envs.common.run_alone`), workload sources and episode seeds
(:mod:`~envs.common.workloads`) and render helpers (:mod:`~envs.common.render`).

No module here imports a problem package (``envs.pd_cluster``, ``envs.routing``,
``envs.allocation``); they all import from here.
"""
