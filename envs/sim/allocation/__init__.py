"""GPU allocations of multi-LLM workflows and their placement on a topology (Scepsy §5–§6):
:mod:`~envs.sim.allocation.allocations` (what each LLM gets), :mod:`~envs.sim.allocation.placement`
(where its replicas run) and :mod:`~envs.sim.allocation.scepsy` (Scepsy's Aggregate LLM Pipeline:
workflow tracing, replay profiling, Eq. 1–2). The pipeline is not only the Scepsy policy's: the
``servegym/Allocation`` envs report its predictions too (``envs/allocation/serving.py``), so it
stays beside the allocations it models rather than under ``heuristics/``.
"""
