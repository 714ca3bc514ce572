"""Episode workloads for every env: a generator seeded per reset, or a fixed trace.

One function, :func:`make_records`, so that each env's ``reset`` reads the same way and the
``load_scale`` rule (multiply the paper's arrival rate) is implemented once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

#: Generated workloads a :class:`TraceSource` keeps, by seed (the oldest is dropped first).
SEEDS_KEPT = 8


class TraceSource:
    """Where an env's records come from: a generator name, or a trace (path or records).

    :param workload: generator name (``traces.generators.GENERATORS``).
    :param trace: a servegym JSONL trace path, or a list of records; overrides ``workload``.
    :param count: records per episode (None: the generator's or paper's default).
    :param rate: arrival rate (None: the paper's).
    :param load_scale: multiplies the arrival rate (> 0).
    :param model: model the generator targets.
    :param paper_rates: generator name -> the paper's arrival rate, needed to scale a rate that
        was not given.
    :param extra: further generator keyword arguments.
    :param model_override: with a trace, serve every LLM call of it with this model instead of
        the one the trace names (None: as named).

    With a trace, ``count`` keeps its first ``count`` records (an error if it has fewer),
    ``load_scale`` divides every arrival time (the arrival rate times ``load_scale``), and the
    seed changes nothing; ``rate`` and generator options do not apply and are rejected.
    """

    def __init__(
        self,
        workload: str,
        trace: str | Sequence[Any] | None = None,
        count: int | None = None,
        rate: float | None = None,
        load_scale: float = 1.0,
        model: str | None = None,
        paper_rates: Mapping[str, float] | None = None,
        extra: Mapping[str, Any] | None = None,
        model_override: str | None = None,
    ):
        if not load_scale > 0:
            raise ValueError(f"load_scale must be > 0, got {load_scale}")
        if count is not None and count < 1:
            raise ValueError(f"workload count must be >= 1, got {count}")
        if trace is not None and rate is not None:
            raise ValueError(
                f"workload_rate {rate} does not apply to a trace (its arrivals are recorded); "
                "use load_scale to scale its arrival rate"
            )
        if trace is not None and extra:
            raise ValueError(
                f"generator options {sorted(extra)} do not apply to a trace (a trace replays "
                "recorded records)"
            )
        self.model_override = model_override
        self.workload = workload
        self.trace = trace
        self.count = count
        self.rate = rate
        self.load_scale = load_scale
        self.model = model
        self.paper_rates = dict(paper_rates or {})
        self.extra = dict(extra or {})
        self._cached: list[Any] | None = None
        self._by_seed: dict[int, list[Any]] = {}

    def scaled_rate(self) -> float | None:
        """The arrival rate after ``load_scale`` (None: the generator's default, unscaled)."""
        rate = self.rate
        if self.load_scale == 1.0:
            return rate
        if rate is None:
            if self.workload not in self.paper_rates:
                raise ValueError(
                    f"load_scale needs workload_rate for workload {self.workload!r} (paper "
                    f"rates are known for {sorted(self.paper_rates)})"
                )
            rate = self.paper_rates[self.workload]
        return rate * self.load_scale

    def records(self, seed: int) -> list[Any]:
        """The episode's records for workload seed ``seed`` (a trace ignores the seed)."""
        if self.trace is not None:
            if self._cached is None:
                self._cached = self._trace_records()
            return list(self._cached)
        # Records are immutable: the last few seeds' are kept, so resets that repeat a seed
        # (one workload for several policies, checkers' determinism tests) skip the generator.
        hit = self._by_seed.get(seed)
        if hit is None:
            from traces.generators import generate

            hit = generate(
                self.workload,
                seed=seed,
                count=self.count,
                rate=self.scaled_rate(),
                model=self.model,
                **self.extra,
            )
            if len(self._by_seed) >= SEEDS_KEPT:
                self._by_seed.pop(next(iter(self._by_seed)))
            self._by_seed[seed] = hit
        return list(hit)

    def _trace_records(self) -> list[Any]:
        """The trace's records with ``count``, ``load_scale`` and ``model_override`` applied."""
        if isinstance(self.trace, str):
            from traces.io import read_trace

            records = read_trace(self.trace)
            where = f"trace {self.trace!r}"
        else:
            records = list(self.trace)  # type: ignore[arg-type]
            where = "the trace"
        if self.count is not None:
            if self.count > len(records):
                raise ValueError(
                    f"{where} has {len(records)} records; workload count {self.count} asks for "
                    "more (a trace is replayed, never extended)"
                )
            records = records[: self.count]
        if self.load_scale != 1.0:
            records = [dataclasses.replace(r, arrival=r.arrival / self.load_scale) for r in records]
        if self.model_override is not None:
            records = [_with_model(r, self.model_override) for r in records]
        return records


def _with_model(record: Any, model: str) -> Any:
    """``record`` (a Workflow or Request) with every LLM call served by ``model``."""
    from traces.schema import LLMNode, Request

    if isinstance(record, Request):
        return dataclasses.replace(record, model=model)
    nodes = tuple(
        dataclasses.replace(n, model=model) if isinstance(n, LLMNode) else n for n in record.nodes
    )
    return dataclasses.replace(record, nodes=nodes)


def trace_models(records: Sequence[Any]) -> list[str]:
    """The models a trace's LLM calls name, sorted."""
    from traces.schema import LLMNode, Request

    models = set()
    for r in records:
        if isinstance(r, Request):
            models.add(r.model)
        else:
            models.update(n.model for n in r.nodes if isinstance(n, LLMNode))
    return sorted(models)


def episode_seed(env: Any, seed: int | None, fixed: int | None) -> int:
    """The workload seed of an episode: ``fixed`` if the env was made with one, else the reset
    seed, else a draw from the env's ``np_random`` (seeded by ``reset``).

    :param env: the env (after ``super().reset(seed=seed)``).
    :param seed: the reset seed.
    :param fixed: the env's ``workload_seed`` option.
    """
    if fixed is not None:
        return int(fixed)
    if seed is not None:
        return int(seed)
    return int(env.np_random.integers(0, 2**31 - 1))
