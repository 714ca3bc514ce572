"""HexAgent §5.4's decode stage in PDCluster's projection: the KV-capacity timeline of each
decode instance, the earliest capacity-feasible start and the decode-queue wait in Δ.

The hand-built case: one decode instance (an A100 TP4 at half of each GPU: a ~41k-token KV
cache) and two H200 prefill instances. Call x (20.5k-token prompt) is decoding when workflow Y
reveals y1 and y2 (20.5k-token prompts each). The ``task-mean`` predictor predicts 256 output
tokens for every call before any has finished, so every demand is m = 20,500 + 256 = 20,756
tokens: x and one y do not fit together (41,512 > 41,256), nor do y1 and y2.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.pd_cluster import (
    DecisionContext,
    PDClusterEnv,
    capacity_timeline,
    earliest_feasible_start,
)
from envs.sim.hardware.cluster import cluster_from_dict
from envs.sim.latency.model import LatencyModel, load_calibration
from traces.schema import LLMNode, Workflow

MODEL = "llama3.1-70b"
CLUSTER = {
    "name": "tiny-2p1d-small-kv",
    "architecture": "pd",
    "tensor_parallel": {MODEL: {"a100-80g": 4, "h200": 4}},
    "prefill": [{"gpu": "h200"}, {"gpu": "h200"}],
    "decode": [{"gpu": "a100-80g", "fraction": 0.5}],
    "kv_transfer": {
        "latency_s": 0.002,
        "same_class_bandwidth": 50.0e9,
        "cross_class_bandwidth": 12.5e9,
    },
}
PROMPT = 20_500  # tokens, every call
PREDICTED = 256  # task-mean's prior, tokens
T_Y = 4.0  # Y's arrival, seconds: x is decoding by then
#: The per-op calibration the env prices with (PDCluster-v0 pins ``roofline``).
ROOFLINE = load_calibration(variant="roofline")


def trace(x_out: int = 2000, y_out: int = 100) -> list[Workflow]:
    return [
        Workflow("X", 0.0, (LLMNode("x", MODEL, PROMPT, x_out),)),
        Workflow(
            "Y", T_Y, (LLMNode("y1", MODEL, PROMPT, y_out), LLMNode("y2", MODEL, PROMPT, y_out))
        ),
    ]


def at_y_arrival(**trace_kw: int) -> tuple[PDClusterEnv, DecisionContext]:
    """The env at Y's prefill invocation: x placed on (prefill 0, decode 0) and decoding."""
    env = PDClusterEnv(
        cluster=cluster_from_dict(CLUSTER, model=MODEL),
        trace=trace(**trace_kw),
        slots=4,
        output_predictor="task-mean",
    )
    _, info = env.reset(seed=0)
    ctx = info["decision_context"]
    assert (ctx.stage, ctx.call_ids[0]) == ("prefill", "X/x")
    _, *_, info = env.step(ctx.action(0, 0, 0))
    ctx = info["decision_context"]
    assert (ctx.stage, ctx.call_ids[0]) == ("decode", "X/x")
    _, *_, info = env.step(ctx.action(0, 0, 0))
    ctx = info["decision_context"]
    assert (ctx.time, ctx.stage, ctx.call_ids[:2]) == (T_Y, "prefill", ["Y/y1", "Y/y2"])
    return env, ctx


def hand_x_finish(env: PDClusterEnv) -> float:
    """x's predicted finish, seconds from T_Y, from the latency model: x started decoding when
    its KV arrived (prefill on the H200 from 0, then the cross-class transfer); by T_Y it has
    emitted ``done`` tokens (elapsed / one iteration at batch 1); the 256 − done left take one
    iteration each at batch 1 over its context."""
    pre = LatencyModel.from_names("h200", MODEL, tp=4, calibration=ROOFLINE)
    dec = LatencyModel.from_names("a100-80g", MODEL, tp=4, fraction=0.5, calibration=ROOFLINE)
    decode_start = pre.prefill_time(PROMPT) + 0.002 + PROMPT * pre.kv_bytes_per_token / 12.5e9
    x = env.sim.decode[0].running[0]
    assert x.decode_start == pytest.approx(decode_start, rel=1e-12)
    done = int((T_Y - decode_start) / dec.decode_iteration_time(1, PROMPT))
    assert 0 < done < PREDICTED
    return (PREDICTED - done) * dec.decode_iteration_time(1, PROMPT + done)


def test_capacity_timeline_earliest_start_is_the_first_time_the_demand_fits_for_good():
    # usage: 60 on [0, 2), 90 on [2, 4), 30 on [4, 6), 0 from 6; capacity 100
    bp, neg = capacity_timeline(np.array([[0.0, 4.0, 60.0], [2.0, 6.0, 30.0]]))
    assert bp.tolist() == [0.0, 2.0, 4.0, 6.0]
    assert (-neg).tolist() == [90.0, 90.0, 30.0, 0.0]  # the largest usage from each on
    starts = earliest_feasible_start(bp, neg, np.array([10.0, 20.0, 70.0, 71.0, 100.0]), 100.0)
    assert starts.tolist() == [0.0, 4.0, 4.0, 6.0, 6.0]
    # A demand above the capacity (a call locked at the decode stage) waits until it empties.
    assert earliest_feasible_start(bp, neg, np.array([150.0]), 100.0).tolist() == [6.0]
    # Conservative: room is needed from the start on, so the gap [1, 5) before a later
    # reservation of 60 does not take a demand of 60 (60 + 60 > 100).
    bp, neg = capacity_timeline(np.array([[0.0, 1.0, 50.0], [5.0, 9.0, 60.0]]))
    assert earliest_feasible_start(bp, neg, np.array([40.0, 60.0]), 100.0).tolist() == [0.0, 9.0]
    # No intervals: everything fits now.
    bp, neg = capacity_timeline(np.empty((0, 3)))
    assert earliest_feasible_start(bp, neg, np.array([100.0]), 100.0).tolist() == [0.0]


def test_call_that_does_not_fit_waits_for_the_running_call_hand_computed():
    env, ctx = at_y_arrival()
    cap = ctx.decode_kv_capacity[0]
    demand = PROMPT + PREDICTED
    assert ctx.predicted_output_tokens[:2].tolist() == [PREDICTED, PREDICTED]
    assert ctx.kv_demand[:2].tolist() == [demand, demand]
    assert demand <= cap < 2 * demand  # each fits alone, never beside x or each other
    finish = hand_x_finish(env)
    # The state: x alone, from now to its predicted finish, holding its predicted footprint.
    np.testing.assert_allclose(env.decode_intervals(0), [[0.0, finish, demand]], rtol=1e-12)
    # Earliest capacity-feasible start of y1 and y2: when x is predicted to finish.
    np.testing.assert_allclose(ctx.decode_free_at[:2, 0], [finish, finish], rtol=1e-12)
    # Δ = max(arrival at d, earliest start) + decode; the arrival (prefill on an idle H200 +
    # cross-class transfer) is well before x ends, so the decode-queue wait is finish − arrival.
    pre = LatencyModel.from_names("h200", MODEL, tp=4, calibration=ROOFLINE)
    arrival = pre.prefill_time(PROMPT) + 0.002 + PROMPT * pre.kv_bytes_per_token / 12.5e9
    assert finish - arrival > 5.0
    for k in (0, 1):
        delta = finish + ctx.decode_time[k, 0]
        expected = (ctx.elapsed[k] + delta) / ctx.horizon[k]
        np.testing.assert_allclose(ctx.projected_ratio[k, :, 0], [expected] * 2, rtol=1e-12)


def test_a_pick_adds_its_interval_and_shifts_the_next_calls_start():
    env, ctx = at_y_arrival()
    finish = hand_x_finish(env)
    demand = PROMPT + PREDICTED
    dec_y1 = float(ctx.decode_time[0, 0])
    kept_free_at = ctx.decode_free_at  # copy-on-write: an earlier step's array keeps its values
    kept_values = kept_free_at.copy()
    _, *_, info = env.step(ctx.action(0, 0, 0))  # y1 on (prefill 0, decode 0)
    ctx = info["decision_context"]
    # y1 starts when x ends (Algorithm 1 line 20: its interval joins the simulated state).
    np.testing.assert_allclose(
        env.decode_intervals(0),
        [[0.0, finish, demand], [finish, finish + dec_y1, demand]],
        rtol=1e-12,
    )
    # y2 fits beside neither x nor y1: it now starts when y1 ends, on either prefill instance
    # (prefill 1's arrival did not change; prefill 0's is later but still before y1 ends).
    np.testing.assert_allclose(ctx.decode_free_at[1, 0], finish + dec_y1, rtol=1e-12)
    expected = (ctx.elapsed[1] + finish + dec_y1 + ctx.decode_time[1, 0]) / ctx.horizon[1]
    np.testing.assert_allclose(ctx.projected_ratio[1, :, 0], [expected] * 2, rtol=1e-12)
    np.testing.assert_array_equal(kept_free_at, kept_values)
    assert ctx.decode_free_at is not kept_free_at


def test_predicted_not_true_lengths_drive_the_decode_timeline():
    env_short, short = at_y_arrival(x_out=2000, y_out=100)
    env_long, long = at_y_arrival(x_out=3000, y_out=5000)
    np.testing.assert_array_equal(short.projected_ratio, long.projected_ratio)
    np.testing.assert_array_equal(short.decode_free_at, long.decode_free_at)
    np.testing.assert_array_equal(env_short.decode_intervals(0), env_long.decode_intervals(0))


def test_decode_stage_pick_cannot_start_before_the_picks_ahead_of_it():
    # y (20.5k prompt) reaches the decode queue while x decodes and waits for room; z (1k
    # prompt) arrives behind it. z alone fits beside x now, but the engine admits in strict
    # priority order (the first waiting call that does not fit blocks the rest), so once y is
    # picked ahead of z, z cannot start before y does.
    env = PDClusterEnv(
        cluster=cluster_from_dict(CLUSTER, model=MODEL),
        trace=[
            Workflow("X", 0.0, (LLMNode("x", MODEL, PROMPT, 2000),)),
            Workflow("Y", T_Y, (LLMNode("y", MODEL, PROMPT, 100),)),
            Workflow("Z", 2 * T_Y, (LLMNode("z", MODEL, 1000, 100),)),
        ],
        slots=4,
        output_predictor="task-mean",
    )
    _, info = env.reset(seed=0)
    for call in ("X/x", "X/x", "Y/y", "Y/y", "Z/z"):  # prefill, decode, prefill, decode, prefill
        ctx = info["decision_context"]
        assert ctx.call_ids[: ctx.num_waiting] == [call]
        _, *_, info = env.step(ctx.action(0, 0, 0))
    ctx = info["decision_context"]
    assert (ctx.stage, ctx.call_ids[:2]) == ("decode", ["Y/y", "Z/z"])
    (x_interval,) = env.decode_intervals(0)
    x_end = x_interval[1]
    assert ctx.kv_demand[1] + x_interval[2] <= ctx.decode_kv_capacity[0]
    assert ctx.decode_free_at[:2, 0].tolist() == [x_end, 0.0]  # y waits for x, z fits now
    _, *_, info = env.step(ctx.action(0, 0, 0))  # y first
    ctx = info["decision_context"]
    assert env.decode_intervals(0)[1, 0] == x_end  # y starts when x ends
    assert ctx.decode_free_at[1, 0] == x_end  # and z no earlier
    expected = (ctx.elapsed[1] + x_end + ctx.decode_time[1, 0]) / ctx.horizon[1]
    np.testing.assert_allclose(ctx.projected_ratio[1, 0, 0], expected, rtol=1e-12)


def run_hexagent_contexts(limit: int, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    import envs.pd_cluster.projection as pd_cluster
    from heuristics import make_policy

    monkeypatch.setattr(pd_cluster, "WHOLE_REFRESH_LIMIT", limit)
    # Long prompts arriving together: the decode instances' KV runs short.
    tight = [
        Workflow(f"w{i}", 0.01 * i, (LLMNode("a", MODEL, 100_000 + 37 * i, 3000 + 11 * i),))
        for i in range(60)
    ]
    env = PDClusterEnv(cluster="hetero-1", trace=tight, max_steps=300)
    policy = make_policy("hexagent")
    policy.reset()
    obs, info = env.reset(seed=1)
    seen = []
    while True:
        ctx = info["decision_context"]
        seen.append((ctx.projected_ratio.copy(), ctx.decode_free_at.copy(), obs["ratio"]))
        obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
        if terminated or truncated:
            return seen


def test_incremental_refresh_matches_whole_refresh(monkeypatch: pytest.MonkeyPatch):
    # After a pick only the changed prefill plane and decode column are re-projected (above
    # WHOLE_REFRESH_LIMIT entries); that must equal re-projecting everything.
    partial = run_hexagent_contexts(0, monkeypatch)
    whole = run_hexagent_contexts(1 << 40, monkeypatch)
    assert len(partial) == len(whole) == 300
    assert any(np.isfinite(r).sum() > 1 and (f > 0).any() for r, f, _ in partial)
    for a, b in zip(partial, whole, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
