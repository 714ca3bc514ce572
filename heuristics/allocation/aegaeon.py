"""Aegaeon (SOSP 2025) as Scepsy §7.2 runs it on Allocation-v0: pooled prefill/decode instances
at a per-node P/D split (``aegaeon-3p1d``, ``-2p2d``, ``-1p3d``; ``-units`` packs the most units),
with GPU shares apportioned by each model's traced phase work.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from envs.allocation import AllocationContext
from envs.sim.allocation.allocations import Allocation, AllocationError, LLMAllocation
from heuristics.allocation.base import PlanPolicy
from heuristics.base import register

# -- Aegaeon (SOSP 2025) and Ayo (ASPLOS 2025): the other baselines of Scepsy §7.2 ---------------


def _phase_work(
    workload: str, gpu: str, engine: str, calibration_variant: str
) -> dict[str, tuple[float, float]]:
    """Per model: (prefill, decode) seconds per workflow on a whole GPU at TP 1, batch 1, from
    the same traced sample the env's ``ctx.demand`` uses (50 workflows, seed 0), priced with the
    env's per-op calibration ``calibration_variant`` (``ctx.latency_calibration``). Prefill = the
    run-alone time of the call's prompt with its first token; decode = the rest of its run-alone
    time (0 for one-token outputs and for encoder-only models, whose whole call is prefill)."""
    key = (workload, gpu, engine, calibration_variant)
    if key in _PHASE_WORK:
        return _PHASE_WORK[key]
    from envs.allocation.workloads import spec_for
    from envs.common.run_alone import RunAloneLatency
    from envs.sim.core.simulation import LatencyCache
    from envs.sim.engines.presets import get_engine, resolve_token_budget
    from traces.generators import GENERATORS
    from traces.schema import LLMNode, Workflow

    eng = get_engine(engine)
    cache = LatencyCache(calibration_variant=calibration_variant)
    alone: dict[str, RunAloneLatency] = {}
    sample = GENERATORS[workload](seed=0, count=50)
    work: dict[str, list[float]] = {}
    for wf in sample:
        assert isinstance(wf, Workflow), "Allocation's workloads are workflows"
        for n in wf.nodes:
            if not isinstance(n, LLMNode):
                continue
            if n.model not in alone:
                lat = cache.get(spec_for(n.model, gpu, 1, 1.0), eng)
                alone[n.model] = RunAloneLatency(
                    lat, eng.scheduling, resolve_token_budget(eng, lat.gpu, None)
                )
            f = alone[n.model]
            pre = f(n.input_tokens, 1)
            total = f(n.input_tokens, n.output_tokens)
            w = work.setdefault(n.model, [0.0, 0.0])
            w[0] += pre
            w[1] += max(0.0, total - pre)
    _PHASE_WORK[key] = {m: (p / len(sample), d / len(sample)) for m, (p, d) in work.items()}
    return _PHASE_WORK[key]


_PHASE_WORK: dict[tuple[str, str, str, str], dict[str, tuple[float, float]]] = {}


def _apportion(targets: Mapping[str, float], mins: Mapping[str, int], total: int) -> dict[str, int]:
    """Integer units summing to ``total`` (or to the minimums, if larger — the caller checks)
    in proportion to ``targets``, each at least its minimum: models whose proportional share
    falls below their minimum are fixed there and the rest re-proportioned among the others
    (repeated until none falls below); then floors plus largest remainders (ties: the env's
    order)."""
    order = list(targets)
    fixed: dict[str, int] = {}
    while True:
        rest = [m for m in order if m not in fixed]
        free = total - sum(fixed.values())
        weight = sum(targets[m] for m in rest)
        ideal = {m: (free * targets[m] / weight if weight > 0 else free / len(rest)) for m in rest}
        low = [m for m in rest if ideal[m] < mins[m]]
        if not low or len(low) == len(rest):
            for m in low:
                fixed[m] = mins[m]
            break
        for m in low:
            fixed[m] = mins[m]
    units = dict(fixed)
    rest = [m for m in order if m not in fixed]
    if rest:
        free = total - sum(fixed.values())
        weight = sum(targets[m] for m in rest)
        ideal = {m: (free * targets[m] / weight if weight > 0 else free / len(rest)) for m in rest}
        for m in rest:
            units[m] = max(mins[m], math.floor(ideal[m]))
        left = total - sum(units.values())
        by_rem = sorted(rest, key=lambda m: (-(ideal[m] - math.floor(ideal[m])), order.index(m)))
        for m in by_rem[: max(0, left)]:
            units[m] += 1
    return {m: units[m] for m in order}


def _placeable_tp1(
    units: Mapping[str, int],
    mins: Mapping[str, int],
    F: int,
    R: int,
    topology: Any,
    prefer: str = "share",
) -> list[LLMAllocation]:
    """Each model's ``units`` as ``d`` identical TP-1 replicas of ``share`` units (the menu's
    form), ``mins[m] ≤ share ≤ F`` (weights + minimum KV, at most one GPU), ``share·d ≤
    units[m]`` and ``d ≤ R``, in ``units``' order: for each model the first candidate, by
    ``prefer``, such that it, the models before it and the minimum replica of every model after
    it still place on ``topology`` (the env's §6 placer,
    :func:`envs.sim.allocation.placement.try_place`: five 3/4-GPU shares do not pack on four GPUs,
    five 1/2-GPU ones do). ``prefer="share"``: the largest share (whole GPUs where possible), then
    the most units; ``"units"``: the most units, then the largest share. Units that make no
    placeable replica are left idle.

    :raises AllocationError: if even the minimum replicas do not place.
    """
    from envs.sim.allocation.placement import try_place

    if prefer not in ("share", "units"):
        raise ValueError(f"prefer must be 'share' or 'units', got {prefer!r}")
    order = list(units)
    chosen: list[LLMAllocation] = []
    for i, m in enumerate(order):
        rest = [LLMAllocation(n, mins[n], 1, 1) for n in order[i + 1 :]]
        cands = sorted(
            (
                (share, d)
                for share in range(mins[m], F + 1)
                for d in range(1, min(R, units[m] // share) + 1)
            ),
            key=(
                (lambda sd: (-sd[0], -sd[0] * sd[1]))
                if prefer == "share"
                else (lambda sd: (-sd[0] * sd[1], -sd[0]))
            ),
        )
        for share, d in cands or [(mins[m], 1)]:
            cand = LLMAllocation(m, share * d, 1, d)
            if try_place(Allocation((*chosen, cand, *rest), units_per_gpu=F), topology):
                chosen.append(cand)
                break
        else:
            raise AllocationError(
                f"no TP-1 replica of {m} of at least {mins[m]}/{F} GPU places beside "
                f"{[a.model for a in chosen]} on {topology.num_gpus} GPUs"
            )
    return chosen


#: Aegaeon per-node prefill/decode splits Scepsy §7.2 tests on its 4-GPU nodes ("3P/1D, 2P/2D,
#: and 1P/3D (four instances per node)"; the same per-node split on every node at 8 GPUs).
AEGAEON_SPLITS = ((3, 1), (2, 2), (1, 3))


class AegaeonPolicy(PlanPolicy):
    """Aegaeon (Xiang et al., SOSP 2025, Scepsy ref. [56]; artifact ref. [11]) as Scepsy §7.2
    deploys it, mapped onto Allocation-v0's menu.

    **What Aegaeon does** (from its abstract and public summaries of the paper, e.g.
    https://awesome-system-papers.pages.dev/papers/Aegaeon-SOSP25; we did not have the paper's
    text, so no section numbers): a pool of GPU *instances*
    serves many LLMs at once by *token-level auto-scaling* — between any two tokens an instance
    can preempt the model it runs and switch to another (explicit memory management, component
    reuse and fine-grained KV-cache sync cut the switch cost by 97 %). Serving is disaggregated:
    *prefill instances* schedule prompts with grouped FCFS (minimising TTFT), *decode instances*
    run per-model batches in weighted round-robin (meeting TBT SLOs). Which model an instance
    runs is thus decided by the scheduler, token by token, from the work queued for each model;
    how many instances are prefill vs decode is fixed by the operator.

    **How Scepsy set it up** (Scepsy §7.2, "LLM multiplexing"): one instance per GPU, a
    fixed per-node prefill/decode split — 3P/1D, 2P/2D or 1P/3D on 4-GPU nodes, the same split on
    every node at 8 GPUs — and the non-LLM models (rerankers, embedders) served on the prefill
    instances. Scepsy attributes Aegaeon's deficit to its lack of prefix caching (beam search)
    and the cost of prefill instances swapping models.

    **Mapping onto Allocation-v0** (the same allocation every period: the split is fixed and
    the per-model work is the traced sample's, not the period's measured load):

    1. The pools: ``N`` nodes × ``P`` prefill GPUs and ``N × D`` decode GPUs, i.e.
       ``U_p = N·P·F`` and ``U_d = N·D·F`` units.
    2. Token-level multiplexing is work-conserving: over a period, a pooled instance spends its
       time on each model in proportion to the work queued for it. So each model m gets, of the
       prefill pool, ``p_m = U_p · w_p(m) / Σ w_p`` and of the decode pool ``d_m = U_d · w_d(m)
       / Σ w_d``, where ``w_p`` / ``w_d`` are m's prefill / decode seconds per workflow on a
       whole GPU at batch 1 (:func:`_phase_work`, the traced sample behind ``ctx.demand``).
       Encoder-only (non-LLM) models and one-token outputs (the PRM verifier) have no decode
       work: they live on the prefill side only (``d_m = 0``), as in Scepsy's setup.
       :attr:`split` records ``(p_m, d_m)`` of the last plan.
    3. The env's replicas run both phases on one engine (no P/D disaggregation, no KV transfer),
       so m's replicas get ``p_m + d_m`` units, rounded by largest remainders with each model at
       least its minimum share (weights + minimum KV; the minimum comes out of the others'
       shares), as identical TP-1 replicas of up to one GPU that the env's placer can pack
       (:func:`_placeable_tp1`), by default the largest shares (``packing="share"``: whole GPUs
       where possible, as Aegaeon's instances are whole GPUs in Scepsy's setup; a model then
       runs at full-GPU speed, as it does in its time slots) at the cost of leaving a remainder
       of less than one replica idle; ``packing="units"`` uses the most units in smaller
       replicas instead. The choice moves measured latency by up to 2x
       (docs/reproductions/scepsy.md). If the decode pool has no decode work at all (no model
       emits more than one token) it stays idle, as a decode instance with nothing to decode
       would.

    **What the simulator cannot express**, and the approximation:

    * *Time-multiplexing becomes space-sharing*: Aegaeon switches one GPU between models at
      token granularity; here each model holds a fixed MPS-style share of the pool for the period
      at the long-run time share the scheduler would give it. This loses burst multiplexing
      (a model cannot borrow an idle model's GPU within the period) and also loses the switching
      overhead Scepsy names (model swap on prefill instances: weights reload, KV swap).
    * *No P/D disaggregation*: a model's prefill and decode capacity are pooled into one set of
      colocated engines, so a mismatched split (too few decode GPUs for the decode work) does not
      bottleneck the phase as it would on disaggregated instances; the split only moves capacity
      between models. Both omissions favour our Aegaeon over the real one.
    * *Prefix caching*: Scepsy notes Aegaeon has none; the env's engines always keep vLLM's
      prefix cache (the action space cannot switch it off), which also favours our Aegaeon on
      beam search.
    * Placement (which GPUs are prefill, which decode) is the env's placer's; only each model's
      units, TP and replicas are the policy's.

    :param prefill_gpus: prefill instances (GPUs) per node, P.
    :param decode_gpus: decode instances (GPUs) per node, D; ``P + D`` must equal the node's GPUs.
    :param packing: ``share`` (default: largest replicas) or ``units`` (most units), step 3.
    :raises AllocationError: at planning, naming the culprit: a split that does not match the
        node size, no prefill GPU while the workload has non-LLM models or prompts, no decode GPU
        while an LLM decodes, or minimum shares that exceed the pool.
    """

    def __init__(
        self,
        prefill_gpus: int,
        decode_gpus: int,
        name: str | None = None,
        packing: str = "share",
    ):
        super().__init__()
        if packing not in ("share", "units"):
            raise ValueError(f"aegaeon: packing must be 'share' or 'units', got {packing!r}")
        self.packing = packing
        for label, v in (("prefill_gpus", prefill_gpus), ("decode_gpus", decode_gpus)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"aegaeon: {label} must be an integer >= 0, got {v!r}")
        self.P, self.D = prefill_gpus, decode_gpus
        self.name = name or f"aegaeon-{prefill_gpus}p{decode_gpus}d"
        self.split: dict[str, tuple[float, float]] = {}

    def plan(self, ctx: AllocationContext) -> Allocation:
        from envs.sim.hardware.catalog import get_model

        topo, F = ctx.topology, ctx.units_per_gpu
        if self.P + self.D != topo.gpus_per_node:
            raise AllocationError(
                f"{self.name}: the per-node split {self.P}P/{self.D}D has {self.P + self.D} "
                f"instances but a node of {topo.gpu} has {topo.gpus_per_node} GPUs (Scepsy "
                "§7.2 uses one instance per GPU)"
            )
        work = _phase_work(ctx.workload, topo.gpu, ctx.engine, ctx.latency_calibration)
        wp = {m: work.get(m, (0.0, 0.0))[0] for m in ctx.models}
        wd = {
            m: 0.0 if get_model(m).encoder_only else work.get(m, (0.0, 0.0))[1] for m in ctx.models
        }
        non_llm = [m for m in ctx.models if get_model(m).encoder_only]
        if self.P == 0 and (non_llm or sum(wp.values()) > 0):
            raise AllocationError(
                f"{self.name}: no prefill instance, but "
                + (
                    f"the non-LLM models {non_llm} are served on prefill instances"
                    if non_llm
                    else f"{list(ctx.models)} have prompts to prefill"
                )
            )
        decoders = [m for m in ctx.models if wd[m] > 0]
        if self.D == 0 and decoders:
            raise AllocationError(
                f"{self.name}: no decode instance, but {decoders} generate more than one token"
            )
        Up, Ud = topo.num_nodes * self.P * F, topo.num_nodes * self.D * F
        sp, sd = sum(wp.values()), sum(wd.values())
        self.split = {
            m: (Up * wp[m] / sp if sp > 0 else 0.0, Ud * wd[m] / sd if sd > 0 else 0.0)
            for m in ctx.models
        }
        total = Up + (Ud if sd > 0 else 0)
        no_tp1 = [m for m in ctx.models if not ctx.min_share.get((m, 1))]
        if no_tp1:
            raise AllocationError(
                f"{self.name}: {no_tp1} do not fit on one {topo.gpu} (Aegaeon's instances are "
                "single GPUs in Scepsy's setup)"
            )
        mins = {m: int(ctx.min_share[(m, 1)] or 0) for m in ctx.models}
        if sum(mins.values()) > total:
            raise AllocationError(
                f"{self.name}: the minimum shares {mins} (units of 1/{F} GPU) exceed the "
                f"{total} units of its {self.P}P/{self.D}D pools on {topo.num_gpus} GPUs"
            )
        if non_llm and sum(mins[m] for m in non_llm) > Up:
            raise AllocationError(
                f"{self.name}: the non-LLM models {non_llm} need {sum(mins[m] for m in non_llm)} "
                f"units but the prefill pool has {Up}"
            )
        units = _apportion({m: sum(self.split[m]) for m in ctx.models}, mins, total)
        return Allocation(
            tuple(_placeable_tp1(units, mins, F, ctx.max_replicas, topo, self.packing)),
            units_per_gpu=F,
        )


for _p, _d in AEGAEON_SPLITS:
    register(f"aegaeon-{_p}p{_d}d", env="allocation")(lambda p=_p, d=_d: AegaeonPolicy(p, d))
    # the packing sensitivity (docs/reproductions/scepsy.md): the same pools in the replicas
    # that use the most units
    register(f"aegaeon-{_p}p{_d}d-units", env="allocation")(
        lambda p=_p, d=_d: AegaeonPolicy(p, d, name=f"aegaeon-{p}p{d}d-units", packing="units")
    )
