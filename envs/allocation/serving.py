"""Allocation-v0's serving of a period on the simulator: reconfiguring replicas to the placed
allocation (cold start plus weight loading), routing each call among its model's replicas the way
SGLang's ``cache_aware`` router does (Scepsy §6), running to the period's end and measuring each
LLM (rates, latency, busy fraction) and the workflows' latencies; the APL's prediction when
``apl_info`` asks for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.allocation.context import LLMPeriodMetrics
from envs.allocation.state import AllocationState
from envs.sim.allocation.allocations import (
    Allocation,
    Placement,
    PlacementError,
)
from envs.sim.core.simulation import Assignment, Simulation
from envs.sim.hardware.cluster import ClusterSpec
from traces.generators.beam_search import PREFIX_BLOCK_TOKENS

#: SGLang router's ``cache_aware`` defaults (sgl-model-gateway): route by prefix match when
#: its share of the prompt reaches ``CACHE_THRESHOLD``, unless the load is imbalanced (the
#: busiest replica has more than ``BALANCE_ABS`` requests over the idlest and more than
#: ``BALANCE_REL`` times as many), then to the least loaded.
CACHE_THRESHOLD = 0.3
BALANCE_ABS = 64
BALANCE_REL = 1.5


def cache_aware_choice(loads: Sequence[int], hit_tokens: Sequence[int], prompt_tokens: int) -> int:
    """Index of the replica SGLang's cache-aware router picks for one request.

    :param loads: running + waiting requests per replica.
    :param hit_tokens: prompt tokens of the request cached per replica (the router's radix tree
        mirrors the engines' caches; here it reads them, plus the requests it routed in the
        same instant).
    :param prompt_tokens: the request's prompt length.

    Imbalanced load -> least loaded. Otherwise the best prefix match if it covers at least
    ``CACHE_THRESHOLD`` of the prompt, else the least loaded (SGLang takes the replica with the
    smallest tree, which the least loaded approximates). Ties by index.
    """
    least = min(range(len(loads)), key=lambda i: (loads[i], i))
    hi, lo = max(loads), loads[least]
    if hi - lo > BALANCE_ABS and hi > BALANCE_REL * lo:
        return least
    best = max(range(len(loads)), key=lambda i: (hit_tokens[i], -loads[i], -i))
    if prompt_tokens > 0 and hit_tokens[best] >= CACHE_THRESHOLD * prompt_tokens:
        return best
    return least


class _CallLog:
    """Listener: latencies of completed calls per model (drained each period)."""

    def __init__(self, sink: dict[str, list[float]]):
        self.sink = sink

    def on_call_done(self, call: Any, inst: Any, now: float) -> None:
        self.sink.setdefault(call.model, []).append(now - call.revealed_at)


class ServingMixin(AllocationState):
    """The serving methods of :class:`envs.allocation.env.AllocationEnv`."""

    # -- serving -----------------------------------------------------------------------------
    def _serve_period(self, alloc: Allocation) -> float:
        placement = self._try_place(alloc)
        if placement is None:  # the mask prevents this; kept as a loud guard
            raise PlacementError(f"allocation {alloc.describe()} cannot be placed")
        start = self.period * self.period_seconds
        if self.sim is None:
            cluster = ClusterSpec(
                name=f"{self.cluster_name}/{self.topology.num_gpus}gpu",
                architecture="monolithic",
                instances=placement.instances(),
                topology=self.topology,
                source="servegym/Allocation-v0",
            )
            self.sim = Simulation(
                cluster,
                self.workflows,
                seed=self._workload_seed,
                compute_horizons=False,
                online_horizons=False,
                latency_cache=self._latency_cache,
                engine=self.engine,
                prefix_cache_blocks="kv",
                prefix_block_tokens=PREFIX_BLOCK_TOKENS,
            )
            self._replica_instance = {r.key: i for i, r in enumerate(placement.replicas)}
            self._started = {i: 0.0 for i in range(len(placement.replicas))}
            self.sim.add_listener(_CallLog(self._done_calls))
        else:
            self._reconfigure(placement, start)
        self.allocation, self.placement = alloc, placement
        self._history.append(f"period {self.period}: {alloc.describe()}")
        return self._run_until((self.period + 1) * self.period_seconds)

    def _reconfigure(self, placement: Placement, now: float) -> None:
        sim = self.sim
        assert sim is not None
        keep: dict[tuple, int] = {}
        old = dict(self._replica_instance)
        new_specs, new_keys = [], []
        for r, spec in zip(placement.replicas, placement.instances(), strict=True):
            idx = old.pop(r.key, None)
            if idx is not None:
                keep[r.key] = idx
            else:
                new_specs.append(spec)
                new_keys.append(r)
        for idx in old.values():
            sim.retire_instance(idx)
        by_ready: dict[float, list[tuple[Any, Any]]] = {}
        for r, spec in zip(new_keys, new_specs, strict=True):
            ready = now + self.load_seconds(r.model, r.tp, spec.fraction)
            by_ready.setdefault(ready, []).append((r, spec))
        for ready, pairs in by_ready.items():
            added = sim.add_instances([s for _, s in pairs], ready_at=ready)
            for (r, _), inst in zip(pairs, added, strict=True):
                keep[r.key] = inst.index
                self._started[inst.index] = ready
        self._reconfigurations += len(new_specs)
        self._replica_instance = keep

    def _route(self, calls: Sequence[Any]) -> list[Assignment]:
        """SGLang's cache-aware router (Scepsy §6 routes with it) over the ready, not retired
        replicas of each call's model; see :func:`cache_aware_choice`. Before any replica of a
        model is ready, its calls queue at the one ready first."""
        sim = self.sim
        assert sim is not None
        now = sim.now
        live = [sim.instances[i] for i in self._replica_instance.values()]
        out = []
        extra: dict[int, int] = {}
        # first prefix hash -> (replica, hashes) of the call routed last in this instant
        routed: dict[int, tuple[int, tuple[int, ...]]] = {}
        for c in calls:
            if c.prefill_instance is not None and not sim.instances[c.prefill_instance].retired:
                continue
            cands = [m for m in live if m.spec.model == c.model]
            ready = [m for m in cands if m.ready_at <= now]
            hashes = c.node.prefix_hashes
            if len(ready) > 1:
                loads = [len(m.running) + len(m.waiting) + extra.get(m.index, 0) for m in ready]
                hits = sim.estimates.prefix_hits(c) if hashes else {}
                if hashes and hashes[0] in routed:  # the router's tree holds a sibling just sent
                    sib, theirs = routed[hashes[0]]
                    shared = next(
                        (k for k, (a, b) in enumerate(zip(hashes, theirs, strict=False)) if a != b),
                        min(len(hashes), len(theirs)),
                    )
                    hits = {**hits, sib: max(hits.get(sib, 0), shared * PREFIX_BLOCK_TOKENS)}
                m = ready[
                    cache_aware_choice(loads, [hits.get(m.index, 0) for m in ready], c.input_tokens)
                ]
            elif ready:
                m = ready[0]
            else:
                m = min(cands, key=lambda m: (m.ready_at, len(m.waiting), m.index))
            extra[m.index] = extra.get(m.index, 0) + 1
            if hashes:
                routed[hashes[0]] = (m.index, hashes)
            out.append(Assignment(c, c.revealed_at, m.index))
        return out

    def _run_until(self, t_end: float, drain: bool = False) -> float:
        """Serve until ``t_end`` (when draining: or until every workflow finished); the
        reward of the workflows finished meanwhile."""
        sim = self.sim
        assert sim is not None
        sim.time_limit = t_end
        while (inv := sim.advance()) is not None:
            sim.apply(self._route(inv.calls))
        if not drain and sim.env.now < t_end:
            sim.env.run(until=t_end)  # idle until the period ends
        return self._collect(t_end, drain)

    def _collect(self, t_end: float, drain: bool) -> float:
        """Rewards of the workflows finished since the last call; per-period measurements."""
        sim = self.sim
        assert sim is not None
        reward = 0.0
        met = n = 0
        ratio_sum = 0.0
        new = sim.completed[self._completed_seen :]
        self._completed_seen = len(sim.completed)
        for run in new:
            i = self._index[run.id]
            ratio = (run.finish_time - run.arrival) / self._slo[i]
            n += 1
            met += ratio <= 1.0
            ratio_sum += min(ratio, 10.0)
            if self._measured[i]:
                reward += self._reward.on_complete(ratio)
        end = min(sim.now, t_end) if drain else t_end
        start = self.period * self.period_seconds
        span = max(end - start, 1e-9)
        arrived = sum(1 for w in self.workflows if start <= w.arrival < end)
        self._last_rate = arrived / span
        self._last_attainment = met / n if n else 0.0
        self._last_ratio = ratio_sum / n if n else 0.0
        self._measure_llms(start, end)
        if drain:
            return reward
        self._period_info = {
            "period_metrics": {
                "period": self.period,
                "rate": self.rates[self.period],
                "arrived": arrived,
                "completed": n,
                "slo_attainment": self._last_attainment,
            }
        }
        if self.apl_info and self.allocation is not None:
            pred = self._apl_prediction(self.allocation, self.rates[self.period])
            self._period_info["apl"] = pred
            self._apl_periods.append((arrived, pred))
        return reward

    def _measure_llms(self, start: float, end: float) -> None:
        sim = self.sim
        assert sim is not None
        span = max(end - start, 1e-9)
        arrivals: dict[str, int] = {}
        for c in sim.calls[self._calls_mark :]:
            arrivals[c.model] = arrivals.get(c.model, 0) + 1
        self._calls_mark = len(sim.calls)
        busy: dict[str, list[float]] = {}
        replicas: dict[str, int] = {}
        for idx in self._replica_instance.values():
            inst = sim.instances[idx]
            prev = self._busy_mark.get(idx, 0.0)
            b = inst.busy_time
            self._busy_mark[idx] = b
            alive = max(end - max(start, self._started.get(idx, 0.0)), 1e-9)
            busy.setdefault(inst.spec.model, []).append(min(1.0, (b - prev) / alive))
            replicas[inst.spec.model] = replicas.get(inst.spec.model, 0) + 1
        out = {}
        for m in self.models:
            done = self._done_calls.pop(m, [])
            rate = arrivals.get(m, 0) / span
            mean_lat = float(np.mean(done)) if done else 0.0
            r = replicas.get(m, 0)
            out[m] = LLMPeriodMetrics(
                call_rate=rate,
                completed_rate=len(done) / span,
                mean_latency=mean_lat,
                busy_fraction=float(np.mean(busy.get(m, [0.0]))),
                in_flight=(rate * mean_lat / r) if (r and done) else 0.0,
                replicas=r,
            )
        self._llm_metrics = out

    def _drain(self) -> float:
        horizon = self.periods * self.period_seconds
        reward = self._run_until(horizon + self.drain_seconds, drain=True)
        ratios = [
            self._latency(i) / self._slo[i] for i in range(len(self.workflows)) if self._measured[i]
        ]
        return reward + self._reward.terminal(np.array(ratios))

    def _latency(self, i: int) -> float:
        sim = self.sim
        assert sim is not None
        run = sim.runs[i]
        return run.finish_time - run.arrival if run.finish_time >= 0 else math.inf

    def _apl_prediction(self, alloc: Allocation, rate: float) -> dict[str, float]:
        from envs.sim.allocation.scepsy import pipeline_for

        if self._apl is None:
            self._apl = pipeline_for(
                self.workload,
                self.topology.gpu,
                self.F,
                engine=self.engine.name,
                calibration_variant=self.latency_calibration,
            )
        pred = self._apl.predict(alloc, rate)
        return {"latency": pred.latency, "throughput": pred.throughput}
