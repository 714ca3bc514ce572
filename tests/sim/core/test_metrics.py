"""Specification of envs/sim/core/metrics.py: Req_tau, attainment, goodput and summaries."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from envs.sim.core.metrics import (
    REQUEST_SUMMARY_KEYS,
    WORKFLOW_SUMMARY_KEYS,
    attainment_curve,
    default_alphas,
    goodput,
    latency_summary,
    req_tau,
    slo_attainment,
    slo_violation_ratio,
    slowdown_ratios,
    summarize_requests,
    summarize_workflows,
    throughput,
)

INF = math.inf

# --- req_tau ---------------------------------------------------------------------------------


def test_req_tau_n7_tau095_is_the_7th_smallest_because_ceil_6_65_is_7() -> None:
    assert req_tau([3.0, 1.0, 2.0, 5.0, 4.0, 7.0, 6.0], 0.95) == 7.0


def test_req_tau_n10_tau095_is_the_10th_smallest_because_ceil_9_5_is_10() -> None:
    ratios = [4.0, 9.0, 1.0, 10.0, 2.0, 8.0, 3.0, 7.0, 5.0, 6.0]
    assert req_tau(ratios, 0.95) == 10.0


def test_req_tau_n10_tau09_is_the_9th_smallest_when_tau_n_is_an_integer() -> None:
    ratios = [4.0, 9.0, 1.0, 10.0, 2.0, 8.0, 3.0, 7.0, 5.0, 6.0]
    assert req_tau(ratios, 0.9) == 9.0


def test_req_tau_n100_tau099_is_the_99th_and_tau095_the_95th_smallest() -> None:
    ratios = np.arange(100, 0, -1) / 10.0  # 10.0, 9.9, ..., 0.1; k-th smallest is k / 10
    assert req_tau(ratios, 0.99) == 9.9
    assert req_tau(ratios, 0.95) == 9.5


@pytest.mark.parametrize("tau, k", [(0.07, 7), (0.14, 14), (0.28, 28), (0.55, 55), (0.56, 56)])
def test_req_tau_is_not_pushed_one_rank_up_when_tau_times_n_overshoots_in_floating_point(
    tau: float, k: int
) -> None:
    assert tau * 100 > k  # e.g. 0.07 * 100 == 7.000000000000001: a naive ceil would give k + 1
    ratios = np.arange(1, 101, dtype=float)  # k-th smallest is k
    assert req_tau(ratios, tau) == float(k)


def test_req_tau_with_ties_returns_the_tied_value() -> None:
    ratios = [2.0, 1.0, 2.0, 3.0, 2.0]  # sorted 1, 2, 2, 2, 3
    assert req_tau(ratios, 0.5) == 2.0  # ceil(2.5) = 3rd
    assert req_tau(ratios, 0.8) == 2.0  # ceil(4.0) = 4th
    assert req_tau(ratios, 0.2) == 1.0  # ceil(1.0) = 1st
    assert req_tau(ratios, 0.81) == 3.0  # ceil(4.05) = 5th


def test_req_tau_at_tau_one_is_the_maximum_ratio() -> None:
    assert req_tau([1.5, 4.25, 2.0], 1.0) == 4.25


def test_req_tau_for_tiny_tau_is_the_minimum_ratio() -> None:
    assert req_tau([1.5, 4.25, 2.0], 1e-9) == 1.5


def test_req_tau_counts_unfinished_workflows_as_never_meeting_the_slo() -> None:
    ratios = [1.0, 2.0, INF, INF]
    assert req_tau(ratios, 0.5) == 2.0
    assert req_tau(ratios, 0.75) == INF


def test_req_tau_returns_a_plain_python_float() -> None:
    assert type(req_tau(np.array([1.0, 2.0]), 0.5)) is float


@pytest.mark.parametrize("tau", [0.0, -0.1, 1.0000001, 1.5, math.nan, INF])
def test_req_tau_rejects_tau_outside_zero_one(tau: float) -> None:
    with pytest.raises(ValueError, match=r"tau must be in \(0, 1\]"):
        req_tau([1.0, 2.0], tau)


@pytest.mark.parametrize(
    "ratios, message",
    [
        ([], "non-empty"),
        ([1.0, math.nan], r"ratios\[1\] = nan"),
        ([-0.5, 1.0], r"ratios\[0\] = -0.5"),
        ([[1.0, 2.0]], "1-D"),
    ],
)
def test_req_tau_rejects_bad_ratios_naming_the_value(ratios: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        req_tau(ratios, 0.95)


# --- slowdown_ratios ---------------------------------------------------------------------------


def test_slowdown_ratios_divide_completion_time_by_horizon_elementwise() -> None:
    np.testing.assert_array_equal(
        slowdown_ratios([10.0, 30.0, 4.0, INF], [5.0, 10.0, 4.0, 2.0]), [2.0, 3.0, 1.0, INF]
    )


@pytest.mark.parametrize(
    "completion, horizons, message",
    [
        ([1.0, 2.0], [1.0], "same length, got 2 and 1"),
        ([1.0], [0.0], r"horizons\[0\] = 0.0"),
        ([1.0], [-2.0], r"horizons\[0\] = -2.0"),
        ([1.0], [INF], r"horizons\[0\] = inf"),
        ([-1.0], [1.0], r"completion_times\[0\] = -1.0"),
        ([math.nan], [1.0], r"completion_times\[0\] = nan"),
    ],
)
def test_slowdown_ratios_reject_bad_inputs_naming_the_value(
    completion: list, horizons: list, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        slowdown_ratios(completion, horizons)


# --- attainment ----------------------------------------------------------------------------


def test_slo_attainment_counts_ratios_at_or_below_alpha() -> None:
    ratios = [1.0, 2.0, 2.0, 3.0, INF]
    assert slo_attainment(ratios, 2.0) == 3 / 5  # equality meets the SLO
    assert slo_attainment(ratios, 1.99) == 1 / 5
    assert slo_attainment(ratios, 0.5) == 0.0
    assert slo_attainment(ratios, 1e9) == 4 / 5  # the unfinished one never meets it


@pytest.mark.parametrize("alpha", [-1.0, math.nan, INF])
def test_slo_attainment_rejects_invalid_alpha(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha must be finite and >= 0"):
        slo_attainment([1.0], alpha)


def test_attainment_curve_on_given_alphas_matches_hand_counts() -> None:
    alphas, att = attainment_curve([1.0, 2.0, 2.0, 3.0], [0.5, 1.0, 2.0, 2.5, 3.0])
    np.testing.assert_array_equal(alphas, [0.5, 1.0, 2.0, 2.5, 3.0])
    np.testing.assert_array_equal(att, [0.0, 0.25, 0.75, 0.75, 1.0])


def test_default_alpha_grid_runs_from_1_to_20_in_steps_of_0_1() -> None:
    grid = default_alphas()
    assert grid.size == 191
    assert grid[0] == 1.0 and grid[1] == 1.1 and grid[-1] == 20.0


def test_attainment_curve_uses_the_default_grid_when_alphas_is_none() -> None:
    alphas, att = attainment_curve([1.05, 19.95])
    np.testing.assert_array_equal(alphas, default_alphas())
    assert att[0] == 0.0  # alpha = 1.0 < 1.05
    assert att[1] == 0.5  # alpha = 1.1
    assert att[-2] == 0.5  # alpha = 19.9 < 19.95
    assert att[-1] == 1.0  # alpha = 20.0


def test_attainment_curve_rejects_decreasing_alphas() -> None:
    with pytest.raises(ValueError, match=r"non-decreasing, got alphas\[1\] = 3.0 > alphas\[2\]"):
        attainment_curve([1.0], [1.0, 3.0, 2.0])


# --- goodput, violation ratio, throughput -------------------------------------------------------


def test_goodput_counts_requests_within_their_own_slo_per_second() -> None:
    # met: 1 <= 2, 2 <= 2 (boundary), 4 <= 5; missed: 3 > 2 -> 3 requests in 10 s
    assert goodput([1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 5.0], 10.0) == pytest.approx(0.3)


def test_goodput_accepts_one_slo_for_all_requests_and_counts_unfinished_as_missed() -> None:
    assert goodput([1.0, 2.0, 3.0, INF], 2.5, 4.0) == 0.5


def test_goodput_of_no_requests_is_zero() -> None:
    assert goodput([], 1.0, 5.0) == 0.0


def test_slo_violation_ratio_is_the_fraction_strictly_over_slo() -> None:
    assert slo_violation_ratio([1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 2.0, 5.0]) == 0.25
    assert slo_violation_ratio([1.0, INF], 10.0) == 0.5


def test_throughput_is_count_per_second() -> None:
    assert throughput(30, 60.0) == 0.5


@pytest.mark.parametrize("duration", [0.0, -1.0, math.nan, INF])
def test_duration_must_be_finite_and_positive(duration: float) -> None:
    with pytest.raises(ValueError, match="duration must be finite and > 0"):
        goodput([1.0], 1.0, duration)
    with pytest.raises(ValueError, match="duration must be finite and > 0"):
        throughput(1, duration)


@pytest.mark.parametrize(
    "latencies, slos, message",
    [
        ([1.0, 2.0], [1.0], "same length, got 2 and 1"),
        ([1.0], 0.0, "slos must be finite and > 0, got 0.0"),
        ([1.0], [-3.0], r"slos\[0\] = -3.0"),
        ([-1.0], 1.0, r"latencies\[0\] = -1.0"),
        ([math.nan], 1.0, r"latencies\[0\] = nan"),
    ],
)
def test_goodput_and_violation_ratio_reject_bad_inputs(
    latencies: list, slos: float | list, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        goodput(latencies, slos, 1.0)
    with pytest.raises(ValueError, match=message):
        slo_violation_ratio(latencies, slos)


def test_slo_violation_ratio_of_no_requests_is_an_error() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        slo_violation_ratio([], 1.0)


def test_throughput_rejects_negative_count() -> None:
    with pytest.raises(ValueError, match="count must be finite and >= 0, got -1"):
        throughput(-1, 1.0)


# --- latency_summary -----------------------------------------------------------------------


def test_latency_summary_uses_linear_interpolation_percentiles() -> None:
    s = latency_summary([10.0, 9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0])
    # sorted 1..10; position q/100 * 9: p50 -> 4.5 -> 5.5, p90 -> 8.1 -> 9.1, p99 -> 8.91 -> 9.91
    assert s == pytest.approx(
        {"mean": 5.5, "p50": 5.5, "p90": 9.1, "p95": 9.55, "p99": 9.91, "max": 10.0}
    )


@pytest.mark.parametrize("latencies", [[], [1.0, INF], [1.0, -2.0], [math.nan]])
def test_latency_summary_rejects_empty_infinite_negative_or_nan(latencies: list) -> None:
    with pytest.raises(ValueError):
        latency_summary(latencies)


# --- summaries -----------------------------------------------------------------------------


def test_summarize_workflows_hand_computed() -> None:
    s = summarize_workflows([2.0, 4.0, 6.0, 20.0], [2.0, 2.0, 2.0, 2.0])  # ratios 1, 2, 3, 10
    assert tuple(s) == WORKFLOW_SUMMARY_KEYS
    assert s == {
        "num_workflows": 4.0,
        "completed_fraction": 1.0,
        "req95": 10.0,  # ceil(3.8) = 4th
        "req99": 10.0,
        "mean_ratio": 4.0,
        "attainment_at_1": 0.25,
        "attainment_at_2": 0.5,
        "attainment_at_5": 0.75,
        "attainment_at_10": 1.0,
    }
    assert all(type(v) is float for v in s.values())
    json.dumps(s)


def test_summarize_workflows_with_unfinished_workflow() -> None:
    s = summarize_workflows([3.0, INF], [3.0, 1.0])
    assert s["completed_fraction"] == 0.5
    assert s["req95"] == INF
    assert s["mean_ratio"] == 1.0
    assert s["attainment_at_10"] == 0.5


def test_summarize_workflows_rejects_empty_input() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        summarize_workflows([], [])


def test_summarize_requests_hand_computed() -> None:
    s = summarize_requests([1.0, 2.0, 3.0, INF], 2.0, 8.0)
    assert tuple(s) == REQUEST_SUMMARY_KEYS
    assert s == pytest.approx(
        {
            "num_requests": 4.0,
            "num_completed": 3.0,
            "goodput": 0.25,  # 2 within SLO / 8 s
            "slo_violation_ratio": 0.5,
            "throughput": 0.375,  # 3 finished / 8 s
            "latency_mean": 2.0,
            "latency_p50": 2.0,
            "latency_p90": 2.8,
            "latency_p95": 2.9,
            "latency_p99": 2.98,
            "latency_max": 3.0,
        }
    )
    assert all(type(v) is float for v in s.values())
    json.dumps(s)


def test_summarize_requests_with_nothing_finished_reports_infinite_latency() -> None:
    s = summarize_requests([INF, INF], [1.0, 1.0], 1.0)
    assert s["latency_p50"] == INF and s["latency_max"] == INF
    assert s["goodput"] == 0.0 and s["slo_violation_ratio"] == 1.0 and s["throughput"] == 0.0


def test_summarize_requests_rejects_empty_input() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        summarize_requests([], 1.0, 1.0)


# --- properties ----------------------------------------------------------------------------

ratio_lists = st.lists(
    st.one_of(
        st.floats(min_value=0.0, max_value=1e6, allow_nan=False),
        st.sampled_from([1.0, 2.0, INF]),  # force ties and unfinished workflows
    ),
    min_size=1,
    max_size=60,
)
taus = st.floats(min_value=1e-6, max_value=1.0, allow_nan=False)
# tau = j / 1000 keeps tau * N (N <= 60) either an integer up to float error or >= 1e-3 away
# from one, so the expected rank does not depend on the size of the rounding tolerance.
grid_taus = st.integers(min_value=1, max_value=1000).map(lambda j: j / 1000)


@given(ratio_lists, grid_taus)
def test_req_tau_is_the_smallest_ratio_whose_attainment_reaches_tau(
    ratios: list[float], tau: float
) -> None:
    # brute force over the definition: min alpha in the data with count(r <= alpha) >= tau * N
    n = len(ratios)
    feasible = [a for a in ratios if sum(r <= a for r in ratios) >= tau * n - 1e-6]
    assert req_tau(ratios, tau) == min(feasible)


@given(ratio_lists, grid_taus)
def test_req_tau_equals_sorted_ratio_at_ceil_index_and_attains_tau(
    ratios: list[float], tau: float
) -> None:
    k = math.ceil(round(tau * len(ratios), 6))
    value = req_tau(ratios, tau)
    assert value == sorted(ratios)[k - 1]
    if math.isfinite(value):
        assert slo_attainment(ratios, value) >= tau - 1e-9


@given(ratio_lists, taus)
def test_req_tau_attains_tau_for_any_tau(ratios: list[float], tau: float) -> None:
    value = req_tau(ratios, tau)
    if math.isfinite(value):
        assert slo_attainment(ratios, value) >= tau - 1e-9
    else:  # only when more than (1 - tau) * N workflows did not finish
        assert sum(math.isinf(r) for r in ratios) > (1 - tau) * len(ratios) - 1e-9


@given(ratio_lists, taus, taus)
def test_req_tau_is_monotone_in_tau(ratios: list[float], t1: float, t2: float) -> None:
    lo, hi = sorted((t1, t2))
    assert req_tau(ratios, lo) <= req_tau(ratios, hi)


@given(ratio_lists)
def test_attainment_curve_is_non_decreasing_and_matches_slo_attainment(
    ratios: list[float],
) -> None:
    alphas, att = attainment_curve(ratios)
    assert np.all(np.diff(att) >= 0)
    assert np.all((att >= 0) & (att <= 1))
    for i in (0, 57, alphas.size - 1):
        assert att[i] == slo_attainment(ratios, alphas[i])
