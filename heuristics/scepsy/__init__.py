"""Scepsy (papers/004): Aggregate LLM Pipelines and GPU allocation for multi-LLM workflows.

One module per stage of the paper:

* :mod:`~heuristics.scepsy.tracing` — §4 step 1–2: trace workflows, per-LLM ``n_m`` and ``p_m``;
* :mod:`~heuristics.scepsy.profiling` — §4 step 3: per-LLM throughput–latency profiles by replay;
* :mod:`~heuristics.scepsy.apl` — §4 steps 4–5, Eq. 1–2: the Aggregate LLM Pipeline;
* :mod:`~heuristics.scepsy.search` — §5: the GPU scheduler (fractions, packing, TP × replicas);
* :mod:`envs.sim.placement` — §6: topology-aware hierarchical placement (the env uses it too).
"""
