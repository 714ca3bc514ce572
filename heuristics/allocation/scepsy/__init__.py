"""Scepsy as a policy: the GPU scheduler (§5,
:mod:`~heuristics.allocation.scepsy.search`) over the Aggregate LLM Pipeline (§4,
:mod:`envs.sim.allocation.scepsy`: tracing, replay profiling, Eq. 1–2), placed by the §6 placer
(:mod:`envs.sim.allocation.placement`, which the env uses too);
:mod:`~heuristics.allocation.scepsy.report` summarises Allocation-v0 sweeps (peak sustainable
throughput, APL error). The policy itself is ``heuristics.allocation.ScepsyPolicy`` (registry
``scepsy``).
"""
