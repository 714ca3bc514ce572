"""Serving metrics: the single implementation used by the simulator, envs, evaluate.py and train.py.

Workflow-level metrics follow HexAgent §2 and §7 ("SLO scaling metrics"): each workflow ``w`` has
a standalone horizon ``H_w`` (seconds) and a completion time ``C_w`` (seconds, measured from its
arrival); its *slowdown ratio* is ``C_w / H_w`` and it meets a scaled SLO ``alpha`` when
``C_w <= alpha * H_w``. ``Req_tau`` is the smallest ``alpha`` at which at least a ``tau`` fraction
of workflows meet their SLO (HexAgent Eq. 1); Req95 / Req99 use ``tau`` = 0.95 / 0.99.

Request-level metrics follow GoodServe §4: *goodput* is the number of requests (or workflows)
finishing within their end-to-end SLO per second of trace, and the *SLO-violation ratio* is the
fraction that do not.

Unfinished work. A latency, completion time or ratio of ``math.inf`` means "did not finish"
(e.g. still running when an episode was cut off). It never meets any SLO, so it counts against
attainment, goodput and Req_tau (Req_tau is ``inf`` when more than ``(1 - tau) * N`` workflows did
not finish), and it is left out of latency percentiles and throughput, which describe finished
work only. NaN and negative values are always rejected.

The two ``summarize_*`` functions produce the dicts that envs put in ``info`` at episode end;
their keys are listed in :data:`WORKFLOW_SUMMARY_KEYS` and :data:`REQUEST_SUMMARY_KEYS` and every
value is a plain Python ``float``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np

FloatSeq = Sequence[float] | np.ndarray

#: Relative slack when rounding ``tau * N`` up, so that e.g. ``0.07 * 100 = 7.000000000000001``
#: selects the 7th smallest ratio and not the 8th. Float error in the product is ~1e-16 relative.
_CEIL_REL_TOL = 1e-12

#: SLO scales at which :func:`summarize_workflows` reports attainment (key ``attainment_at_<a>``).
SUMMARY_ALPHAS: tuple[int, ...] = (1, 2, 5, 10)

#: Keys of :func:`summarize_workflows`, in order.
WORKFLOW_SUMMARY_KEYS: tuple[str, ...] = (
    "num_workflows",
    "completed_fraction",
    "req95",
    "req99",
    "mean_ratio",
    *(f"attainment_at_{a}" for a in SUMMARY_ALPHAS),
)

#: Keys of :func:`summarize_requests`, in order.
REQUEST_SUMMARY_KEYS: tuple[str, ...] = (
    "num_requests",
    "num_completed",
    "goodput",
    "slo_violation_ratio",
    "throughput",
    "latency_mean",
    "latency_p50",
    "latency_p90",
    "latency_p95",
    "latency_p99",
    "latency_max",
)


def _as_1d(values: FloatSeq, name: str, *, allow_empty: bool, allow_inf: bool) -> np.ndarray:
    """Convert ``values`` to a 1-D float array, rejecting NaN and negative entries.

    :param values: any sequence of numbers.
    :param name: argument name used in error messages.
    :param allow_empty: whether a zero-length input is acceptable.
    :param allow_inf: whether ``+inf`` ("did not finish") is acceptable.
    :return: a new 1-D ``float64`` array.
    :raises ValueError: on wrong shape, emptiness, NaN, negative or disallowed infinite entries.
    """
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of numbers, got shape {arr.shape}")
    if arr.size == 0 and not allow_empty:
        raise ValueError(f"{name} must be non-empty, got an empty sequence")
    bad = np.isnan(arr) | (arr < 0) | (np.isinf(arr) & (not allow_inf))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        allowed = "non-negative numbers or inf (did not finish)" if allow_inf else "finite >= 0"
        raise ValueError(f"{name}[{i}] = {float(arr[i])!r} is invalid; expected {allowed}")
    return arr


def _check_positive(value: float, name: str) -> float:
    """Return ``value`` as a float if it is finite and > 0.

    :param value: the number to check.
    :param name: argument name used in error messages.
    :raises ValueError: if ``value`` is NaN, infinite or <= 0.
    """
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return v


def slowdown_ratios(completion_times: FloatSeq, horizons: FloatSeq) -> np.ndarray:
    """Per-workflow slowdown ratio ``C_w / H_w`` (HexAgent §2, "Metrics").

    :param completion_times: ``C_w`` per workflow, seconds from its arrival to its last call's
        completion; ``inf`` if it did not finish.
    :param horizons: ``H_w`` per workflow, its standalone completion time in seconds (> 0; 0
        only for a workflow that takes no time at all, e.g. zero-latency tools alone, whose
        ratio is 1 when it also completed at once).
    :return: a float array of ratios (dimensionless), same order as the inputs.
    :raises ValueError: on mismatched lengths, NaN, negative times, negative horizons, or a zero
        horizon with a positive completion time.
    """
    c = _as_1d(completion_times, "completion_times", allow_empty=True, allow_inf=True)
    h = _as_1d(horizons, "horizons", allow_empty=True, allow_inf=False)
    if c.shape != h.shape:
        raise ValueError(
            f"completion_times and horizons must have the same length, got {c.size} and {h.size}"
        )
    instant = (h == 0) & (c == 0)  # takes no time alone and took none: on time, ratio 1
    bad = (h < 0) | ((h == 0) & ~instant)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"horizons[{i}] = {float(h[i])!r} is invalid; expected a finite horizon > 0 s"
            + (f" (completion time {float(c[i])!r} s)" if h[i] == 0 else "")
        )
    return np.divide(c, h, out=np.ones_like(c), where=~instant)


def slowdown_ratio(completion_time: float, horizon: float) -> float:
    """One workflow's ``C_w / H_w`` with :func:`slowdown_ratios`' rule for a workflow that takes
    no time at all (``0 / 0`` = 1: on time).

    :raises ValueError: for a horizon <= 0 with a positive completion time.
    """
    if horizon > 0:
        return completion_time / horizon
    if horizon == 0 and completion_time == 0:
        return 1.0
    raise ValueError(
        f"horizon {horizon!r} s is invalid for completion time {completion_time!r} s; expected "
        "a finite horizon > 0 s"
    )


def req_tau(ratios: FloatSeq, tau: float) -> float:
    """HexAgent's Req_tau: the smallest scale ``alpha`` with at least ``tau * N`` ratios <= alpha.

    Equal to the ``ceil(tau * N)``-th smallest ratio (1-indexed), with ``tau * N`` rounded down to
    the nearest integer first when it is within float error of one (``0.07 * 100`` -> 7th).
    ``tau = 1`` gives the maximum ratio. Ties need no special care: the answer is always a ratio.

    :param ratios: slowdown ratios ``C_w / H_w`` (dimensionless, >= 0, ``inf`` = unfinished).
    :param tau: target attainment fraction in (0, 1], e.g. 0.95 for Req95.
    :return: Req_tau as a float (``inf`` if too many workflows did not finish).
    :raises ValueError: on empty input, NaN or negative ratios, or ``tau`` outside (0, 1].
    """
    r = _as_1d(ratios, "ratios", allow_empty=False, allow_inf=True)
    t = float(tau)
    if not (0.0 < t <= 1.0):
        raise ValueError(f"tau must be in (0, 1], got {tau!r}")
    n = r.size
    k = math.ceil(t * n * (1.0 - _CEIL_REL_TOL))
    k = min(max(k, 1), n)
    return float(np.partition(r, k - 1)[k - 1])


def slo_attainment(ratios: FloatSeq, alpha: float) -> float:
    """Fraction of workflows meeting the scaled SLO, i.e. with ``C_w / H_w <= alpha``.

    :param ratios: slowdown ratios ``C_w / H_w`` (dimensionless, >= 0, ``inf`` = unfinished).
    :param alpha: SLO scale (dimensionless, finite, >= 0).
    :return: attainment in [0, 1].
    :raises ValueError: on empty input, NaN or negative ratios, or an invalid ``alpha``.
    """
    r = _as_1d(ratios, "ratios", allow_empty=False, allow_inf=True)
    a = float(alpha)
    if not (math.isfinite(a) and a >= 0):
        raise ValueError(f"alpha must be finite and >= 0, got {alpha!r}")
    return float(np.count_nonzero(r <= a) / r.size)


def default_alphas(max_alpha: float = 20.0, step: float = 0.1) -> np.ndarray:
    """The default SLO-scale grid for :func:`attainment_curve`: ``1, 1+step, ..., max_alpha``.

    A fixed grid (rather than one derived from the data) lets curves of different policies and
    runs share an x-axis. HexAgent's attainment figures also start at ``alpha = 1``.

    :param max_alpha: last grid point (dimensionless, >= 1).
    :param step: grid spacing (dimensionless, > 0).
    :return: an increasing float array, rounded to 10 decimals so points are e.g. exactly 1.1.
    :raises ValueError: if ``max_alpha < 1`` or ``step <= 0``.
    """
    step = _check_positive(step, "step")
    if not (math.isfinite(max_alpha) and max_alpha >= 1.0):
        raise ValueError(f"max_alpha must be finite and >= 1, got {max_alpha!r}")
    n = math.floor((max_alpha - 1.0) / step * (1.0 + _CEIL_REL_TOL)) + 1
    return np.round(1.0 + step * np.arange(n), 10)


def attainment_curve(
    ratios: FloatSeq, alphas: FloatSeq | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """SLO-attainment curve: the fraction of workflows with ratio <= alpha, for each alpha.

    This is the curve of HexAgent Figs. 3-4. It is non-decreasing because ``alphas`` must be.

    :param ratios: slowdown ratios ``C_w / H_w`` (dimensionless, >= 0, ``inf`` = unfinished).
    :param alphas: non-decreasing SLO scales (finite, >= 0); defaults to :func:`default_alphas`
        (1 to 20 in steps of 0.1).
    :return: ``(alphas, attainment)``, two float arrays of equal length, attainment in [0, 1].
    :raises ValueError: on empty/NaN/negative ratios or invalid/decreasing ``alphas``.
    """
    r = _as_1d(ratios, "ratios", allow_empty=False, allow_inf=True)
    if alphas is None:
        a = default_alphas()
    else:
        a = _as_1d(alphas, "alphas", allow_empty=False, allow_inf=False)
        if (np.diff(a) < 0).any():
            i = int(np.flatnonzero(np.diff(a) < 0)[0])
            raise ValueError(
                f"alphas must be non-decreasing, got alphas[{i}] = {float(a[i])!r} > "
                f"alphas[{i + 1}] = {float(a[i + 1])!r}"
            )
    counts = np.searchsorted(np.sort(r), a, side="right")
    return a, counts / r.size


def _slo_met(latencies: FloatSeq, slos: float | FloatSeq) -> np.ndarray:
    """Boolean mask of requests whose latency is within their SLO (``latency <= slo``).

    :param latencies: end-to-end latency per request, seconds (``inf`` = did not finish).
    :param slos: one SLO in seconds for all requests, or one per request (finite, > 0).
    :raises ValueError: on NaN/negative latencies, invalid SLOs or mismatched lengths.
    """
    lat = _as_1d(latencies, "latencies", allow_empty=True, allow_inf=True)
    if np.ndim(slos) == 0:
        s = np.full(lat.shape, _check_positive(float(cast(float, slos)), "slos"))
    else:
        s = _as_1d(cast(FloatSeq, slos), "slos", allow_empty=True, allow_inf=False)
        if s.shape != lat.shape:
            raise ValueError(
                f"latencies and slos must have the same length, got {lat.size} and {s.size}"
            )
        if (s <= 0).any():
            i = int(np.flatnonzero(s <= 0)[0])
            raise ValueError(f"slos[{i}] = {float(s[i])!r} is invalid; expected a finite SLO > 0 s")
    return lat <= s


def goodput(latencies: FloatSeq, slos: float | FloatSeq, duration: float) -> float:
    """GoodServe's goodput: requests (or workflows) finishing within their SLO per second.

    A latency exactly equal to its SLO counts as met. An empty input gives 0.0.

    :param latencies: end-to-end latency per request, seconds (``inf`` = did not finish).
    :param slos: one SLO in seconds for all requests, or one per request (finite, > 0).
    :param duration: length of the trace the requests came from, seconds (> 0).
    :return: goodput in requests per second.
    :raises ValueError: on invalid latencies/SLOs, mismatched lengths or ``duration <= 0``.
    """
    met = _slo_met(latencies, slos)
    return float(np.count_nonzero(met) / _check_positive(duration, "duration"))


def slo_violation_ratio(latencies: FloatSeq, slos: float | FloatSeq) -> float:
    """GoodServe's SLO-violation ratio: the fraction of requests with ``latency > slo``.

    :param latencies: end-to-end latency per request, seconds (``inf`` = did not finish).
    :param slos: one SLO in seconds for all requests, or one per request (finite, > 0).
    :return: violation ratio in [0, 1].
    :raises ValueError: on empty input, invalid latencies/SLOs or mismatched lengths.
    """
    met = _slo_met(latencies, slos)
    if met.size == 0:
        raise ValueError("latencies must be non-empty, got an empty sequence")
    return float(np.count_nonzero(~met) / met.size)


def latency_summary(latencies: FloatSeq) -> dict[str, float]:
    """Mean, percentiles and maximum of finished requests' latencies.

    Percentiles use ``numpy.percentile`` with its default linear interpolation: the q-th
    percentile of sorted ``x_0..x_{n-1}`` is ``x_i + f * (x_{i+1} - x_i)`` where
    ``i + f = q / 100 * (n - 1)``; so p50 of ``[1, 2, 3, 4]`` is 2.5.

    :param latencies: latency per finished request, seconds (finite, >= 0, non-empty).
    :return: ``{"mean", "p50", "p90", "p95", "p99", "max"}`` in seconds, as plain floats.
    :raises ValueError: on empty input or NaN, negative or infinite latencies.
    """
    lat = _as_1d(latencies, "latencies", allow_empty=False, allow_inf=False)
    p50, p90, p95, p99 = np.percentile(lat, [50, 90, 95, 99])
    return {
        "mean": float(lat.mean()),
        "p50": float(p50),
        "p90": float(p90),
        "p95": float(p95),
        "p99": float(p99),
        "max": float(lat.max()),
    }


def throughput(count: float, duration: float) -> float:
    """Completed requests (or workflows) per second.

    :param count: number completed (>= 0).
    :param duration: length of the trace, seconds (> 0).
    :return: throughput in completions per second.
    :raises ValueError: if ``count`` is NaN/negative/infinite or ``duration <= 0``.
    """
    c = float(count)
    if not (math.isfinite(c) and c >= 0):
        raise ValueError(f"count must be finite and >= 0, got {count!r}")
    return c / _check_positive(duration, "duration")


def summarize_workflows(completion_times: FloatSeq, horizons: FloatSeq) -> dict[str, float]:
    """Headline workflow metrics for an episode's ``info`` (keys: :data:`WORKFLOW_SUMMARY_KEYS`).

    - ``num_workflows``: N, the number of workflows passed in.
    - ``completed_fraction``: fraction with a finite completion time.
    - ``req95``, ``req99``: :func:`req_tau` of the ratios at tau = 0.95, 0.99 (``inf`` if too
      many did not finish).
    - ``mean_ratio``: mean ``C_w / H_w`` over finished workflows (``inf`` if none finished).
    - ``attainment_at_<a>`` for a in :data:`SUMMARY_ALPHAS`: :func:`slo_attainment` at ``a``.

    :param completion_times: ``C_w`` per workflow, seconds from arrival (``inf`` = unfinished).
    :param horizons: ``H_w`` per workflow, standalone completion time in seconds (> 0).
    :return: a dict of plain Python floats.
    :raises ValueError: on empty or invalid inputs (see :func:`slowdown_ratios`).
    """
    r = slowdown_ratios(completion_times, horizons)
    if r.size == 0:
        raise ValueError("completion_times must be non-empty, got an empty sequence")
    finished = r[np.isfinite(r)]
    out = {
        "num_workflows": float(r.size),
        "completed_fraction": float(finished.size / r.size),
        "req95": req_tau(r, 0.95),
        "req99": req_tau(r, 0.99),
        "mean_ratio": float(finished.mean()) if finished.size else math.inf,
    }
    for a in SUMMARY_ALPHAS:
        out[f"attainment_at_{a}"] = slo_attainment(r, a)
    return out


def summarize_requests(
    latencies: FloatSeq, slos: float | FloatSeq, duration: float
) -> dict[str, float]:
    """Headline request metrics for an episode's ``info`` (keys: :data:`REQUEST_SUMMARY_KEYS`).

    - ``num_requests``: N; ``num_completed``: how many have a finite latency.
    - ``goodput`` (requests/s) and ``slo_violation_ratio``: :func:`goodput`,
      :func:`slo_violation_ratio`, counting unfinished requests as violations.
    - ``throughput``: completed requests per second of ``duration``.
    - ``latency_mean``, ``latency_p50``, ``latency_p90``, ``latency_p95``, ``latency_p99``,
      ``latency_max`` (seconds): :func:`latency_summary` of finished requests, all ``inf`` if none
      finished.

    :param latencies: end-to-end latency per request, seconds (``inf`` = did not finish).
    :param slos: one SLO in seconds for all requests, or one per request (finite, > 0).
    :param duration: length of the trace, seconds (> 0).
    :return: a dict of plain Python floats.
    :raises ValueError: on empty or invalid inputs.
    """
    lat = _as_1d(latencies, "latencies", allow_empty=False, allow_inf=True)
    finished = lat[np.isfinite(lat)]
    out = {
        "num_requests": float(lat.size),
        "num_completed": float(finished.size),
        "goodput": goodput(lat, slos, duration),
        "slo_violation_ratio": slo_violation_ratio(lat, slos),
        "throughput": throughput(finished.size, duration),
    }
    if finished.size:
        summary = latency_summary(finished)
    else:
        summary = dict.fromkeys(("mean", "p50", "p90", "p95", "p99", "max"), math.inf)
    out.update({f"latency_{k}": v for k, v in summary.items()})
    return out
