"""Evaluate scheduling policies on servegym environments and print paper-style tables.

Every (workload, sweep value, policy, seed) runs through ``env.step`` on the identical workload:
one fresh env per workload and sweep value, ``env.reset(seed=seed)`` makes the workload a
deterministic function of the seed, and every run gets a freshly built policy, so a policy's
numbers do not depend on which other policies ran beside it.

    python evaluate.py                      # quick suite (about 1.5 min on 2 cores)
    python evaluate.py --env pd-cluster --cluster hetero-1 --model llama3.1-70b \\
        --workload sharegpt,bfcl,lats,mixed \\
        --policies per-call-fcfs,workflow-fcfs,workflow-llf,atlas,hexagent --seeds 0,1,2
    python evaluate.py --env routing --sweep slo_scale=1,1.5,2,2.5,3   # GoodServe Fig. 6

What an env family is compared on is data, one ``EnvFamily`` per family in
``envs.registry.FAMILIES``: its headline metrics and which direction is better (PDCluster:
Req95 / Req99, lower; Routing: goodput, higher, and SLO-violation ratio, lower), its reference
(expert) policy, its paper's baselines and our own strong references, and its default cluster,
model and workloads. This file parses the options and prints; the machinery is the
:mod:`evaluation` package (``runner``: every run through ``env.step``; ``policies``: policy
resolution; ``tables``, ``plots``, ``results`` + provenance, ``leaderboard``, ``ray_grid``,
``diagnosis``; ``cli``: the parser).

Prints a table shaped like HexAgent Tables 1–3 (rows = policies, columns = workloads × sweep
values, cells = the headline metrics averaged over seeds, then the best of the paper's baselines
and the reference policy's reduction — or gain, for a higher-is-better metric — vs it, and the
same against the best of the paper's baselines and our own strong references), the
mean utilisation per column and the command that regenerates the table. Writes to ``--out``
(default ``results/<name from the options>``):

* ``results.json``  one row per env/cluster/model/workload/sweep value/policy/seed (``--json``
  moves it); inf/nan are written as ``null``, so the file is strict JSON;
* ``results.csv``   the same rows with nested dicts flattened (``metrics.req95``, ...);
* ``attainment_<workload>.png``  SLO-attainment vs α, one line per policy (HexAgent Fig. 3);
* ``<metric>_vs_<option>_<workload>.png``  with ``--sweep``: the selection metric vs the swept
  value, one line per policy (GoodServe Fig. 6: goodput vs SLO scale);
* ``table.txt``     the printed table and its command.

Policies are named by ``evaluation.policies.resolve_policy``: a heuristic registered for the
env (``heuristics.policies_for``), or ``<prefix>:<argument>`` for a loader in
``evaluation.policies.POLICY_LOADERS`` (``ckpt:PATH``: a saved SB3 model; ``alloc:PATH``: an
Allocation-v0 allocation file; ``py:MODULE:FACTORY``: your own).
"""

from __future__ import annotations

import sys

from evaluation.command import leaderboard_main, main

__all__ = ["leaderboard_main", "main"]

if __name__ == "__main__":
    sys.exit(main())
