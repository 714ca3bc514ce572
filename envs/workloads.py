"""Episode workloads for every env: a generator seeded per reset, or a fixed trace.

One function, :func:`make_records`, so that each env's ``reset`` reads the same way and the
``load_scale`` rule (multiply the paper's arrival rate) is implemented once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


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
    ):
        if not load_scale > 0:
            raise ValueError(f"load_scale must be > 0, got {load_scale}")
        if count is not None and count < 1:
            raise ValueError(f"workload count must be >= 1, got {count}")
        self.workload = workload
        self.trace = trace
        self.count = count
        self.rate = rate
        self.load_scale = load_scale
        self.model = model
        self.paper_rates = dict(paper_rates or {})
        self.extra = dict(extra or {})
        self._cached: list[Any] | None = None

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
            if isinstance(self.trace, str):
                if self._cached is None:
                    from traces.io import read_trace

                    self._cached = read_trace(self.trace)
                return self._cached
            return list(self.trace)
        from traces.generators import generate

        return generate(
            self.workload,
            seed=seed,
            count=self.count,
            rate=self.scaled_rate(),
            model=self.model,
            **self.extra,
        )


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
