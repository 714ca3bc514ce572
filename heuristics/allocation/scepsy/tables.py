"""The search space of the Scepsy GPU scheduler (§5): per-LLM tables of (TP, replicas) options
by GPU-fraction units, and the enumeration of fraction vectors with pruning (i) (latency-ratio
order), the per-LLM bounds and the budget rule.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from envs.sim.allocation.allocations import (
    Allocation,
    LLMAllocation,
)
from heuristics.allocation.scepsy.interface import INF, NO_SPAN_LIMIT, PipelineModel

# --------------------------------------------------------------------------------------------
# per-LLM tables


@dataclass
class Cfg:
    tp: int
    replicas: int
    latency: float
    throughput: float


@dataclass
class _Entry:
    """Valid parallelisms of one LLM at some units and span, best first."""

    configs: list[Cfg]  # all valid
    sust: list[Cfg]  # sustaining, by (latency, -throughput)
    by_t: list[Cfg]  # all, by (-throughput, latency)


class LLMTable:
    """Parallelism choices of one LLM per (units, GPUs spanned)."""

    def __init__(
        self,
        model: str,
        apl: PipelineModel,
        rate: float,
        stat: str,
        F: int,
        tps: Sequence[int],
        min_share: Mapping[int, int],
        fractional: bool,
        missing: str,
        counters: dict[str, Any],
        span_rule: bool = True,
        max_replicas: int | None = None,
        headroom: float = 1.0,
    ):
        self.model = model
        self.headroom = headroom
        self.apl, self.rate, self.stat, self.F = apl, rate, stat, F
        self.tps = tuple(tps)
        self.min_share = dict(min_share)
        self.fractional = fractional
        self.missing = missing
        self.counters = counters
        self.span_rule = span_rule
        self.max_replicas = NO_SPAN_LIMIT if max_replicas is None else max_replicas
        self._stage: dict[tuple[int, int, int], Cfg | None] = {}
        self._entries: dict[tuple[int, int], _Entry] = {}
        self._configs: dict[int, list[Cfg]] = {}
        # fast rows for the enumeration: units -> (entry at span s0, entry at s0 + 1)
        self.rows: dict[int, tuple[_Entry, _Entry]] = {}

    def stage(self, tp: int, share: int, replicas: int) -> Cfg | None:
        key = (tp, share, replicas)
        if key in self._stage:
            return self._stage[key]
        units = tp * share * replicas
        alloc = Allocation((LLMAllocation(self.model, units, tp, replicas),), self.F)
        try:
            s = self.apl.stage(alloc, self.model, self.rate, self.stat)
        except KeyError:
            if self.missing == "raise":
                raise
            self.counters["unprofiled"].add((self.model, tp, share))
            cfg = None
        else:
            self.counters["stage_evaluations"] += 1
            cfg = Cfg(tp, replicas, float(s.latency), float(s.throughput))
        self._stage[key] = cfg
        return cfg

    def configs(self, units: int) -> list[Cfg]:
        """Every valid (tp, replicas) at ``units`` (any span)."""
        out = []
        F = self.F
        for tp in self.tps:
            ms = self.min_share.get(tp)
            if ms is None or units % tp:
                continue
            per_tp = units // tp  # = share × replicas
            for share in range(min(F, per_tp), ms - 1, -1):
                if self.fractional is False and share != F:
                    continue
                if per_tp % share or per_tp // share > self.max_replicas:
                    continue
                cfg = self.stage(tp, share, per_tp // share)
                if cfg is not None:
                    out.append(cfg)
        return out

    def entry(self, units: int, span: int) -> _Entry:
        if not self.span_rule:
            span = NO_SPAN_LIMIT
        key = (units, span)
        e = self._entries.get(key)
        if e is None:
            cfgs = [c for c in self.configs_cached(units) if c.tp <= span]
            sust = sorted(
                (c for c in cfgs if self.headroom * c.throughput >= self.rate and c.latency < INF),
                key=lambda c: (c.latency, -c.throughput, c.tp, c.replicas),
            )
            by_t = sorted(cfgs, key=lambda c: (-c.throughput, c.latency, c.tp, c.replicas))
            e = self._entries[key] = _Entry(cfgs, sust, by_t)
        return e

    def configs_cached(self, units: int) -> list[Cfg]:
        cfgs = self._configs.get(units)
        if cfgs is None:
            cfgs = self._configs[units] = self.configs(units)
        return cfgs

    def row(self, units: int) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """(summary at span ⌈u/F⌉, summary at span ⌈u/F⌉+1); a summary is (best sustaining
        latency or inf, its throughput, #sustaining, max throughput, its latency, #valid)."""
        r = self.rows.get(units)
        if r is None:
            s0 = -(-units // self.F)
            out = []
            for span in (s0, s0 + 1):
                e = self.entry(units, span)
                b = e.sust[0] if e.sust else None
                t = e.by_t[0] if e.by_t else None
                out.append(
                    (
                        b.latency if b else INF,
                        b.throughput if b else -INF,
                        len(e.sust),
                        t.throughput if t else -INF,
                        t.latency if t else INF,
                        len(e.configs),
                    )
                )
            r = self.rows[units] = (out[0], out[1])  # type: ignore[assignment]
        return r  # type: ignore[return-value]


# --------------------------------------------------------------------------------------------
# enumeration of fraction vectors (pruning (i) + bounds + budget rule)


def fraction_vectors(
    lo: Sequence[int], budget: int, step: int, fill: bool
) -> Iterator[tuple[int, ...]]:
    """Unit vectors in latency order: u[0] ≥ u[1] ≥ … , u[i] ≥ lo[i] (lo already a suffix max,
    multiples of ``step``), Σ = budget (``fill``) or ≤ budget."""
    k = len(lo)
    # rest_lo[i] = Σ_{j>i} lo[j]: what the lower-latency LLMs need at least (upper bound rule)
    rest_lo = [sum(lo[i + 1 :]) for i in range(k)]
    vec = [0] * k

    def rec(i: int, remaining: int, cap: int) -> Iterator[tuple[int, ...]]:
        hi = min(cap, remaining - rest_lo[i])
        if i == k - 1:
            if fill:
                if lo[i] <= remaining <= cap:
                    vec[i] = remaining
                    yield tuple(vec)
                return
            u = lo[i]
            while u <= hi:
                vec[i] = u
                yield tuple(vec)
                u += step
            return
        u_min = lo[i]
        if fill:  # the k - i - 1 later LLMs get at most u each
            need = -(-remaining // (k - i))
            need = -(-need // step) * step
            u_min = max(u_min, need)
        u = hi - (hi - u_min) % step if hi >= u_min else u_min - step
        while u >= u_min:
            vec[i] = u
            yield from rec(i + 1, remaining - u, u)
            u -= step

    if k == 0:
        return
    yield from rec(0, budget, budget)
