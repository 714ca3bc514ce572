"""What a PDCluster scheduler knows: true output lengths reach it only through the configured
predictor's estimate, and a revealed tool's true latency not before the tool returns.

The paired episodes below differ only in the truth (a call's true output length, a tool's true
latency); the policy takes the same actions in both. Whatever differs in what it sees, before the
changed node finishes, leaked."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from envs.common.predictors import PREDICTORS
from envs.common.predictors.base import BasePredictor
from envs.pd_cluster import PDClusterEnv
from envs.sim import DefaultScheduler, Simulation, load_cluster
from traces.schema import LLMNode, ToolNode, Workflow

MODEL = "llama3.1-70b"


def _trace(long_output: int) -> list[Workflow]:
    """Three small two-call chains, arriving 0.05 s apart; ``w1/a``'s true output length is
    ``long_output``. Far from any KV limit, so admission never waits on the truth."""
    wfs = []
    for i in range(3):
        out = long_output if i == 1 else 40
        nodes = (
            LLMNode("a", MODEL, 300 + 50 * i, out),
            LLMNode("b", MODEL, 500, 30, parents=("a",)),
        )
        wfs.append(Workflow(f"w{i}", 0.05 * i, nodes))
    return wfs


class _Frozen(BasePredictor):
    """Predicts from a fixed table keyed by (workflow, node), blind to the call's truth."""

    name = "frozen"

    def __init__(self, table: dict[tuple[str, str], int]):
        self.table = table

    def predict(self, call: Any) -> int:
        return self.table[(call.workflow.id, call.node.id)]

    def remaining(self, call: Any) -> int:
        return max(1, self.predict(call) - int(call.generated))


def _rollout(env: PDClusterEnv) -> list[tuple[float, dict[str, np.ndarray]]]:
    """(decision time, observation) of every step under the first legal action, and the
    simulated time each changed call finished (the first instant its truth is observed)."""
    obs, info = env.reset(seed=0)
    seen = [(info["decision_context"].time, obs)]
    done = False
    while not done:
        action = int(np.flatnonzero(env.action_masks())[0])
        obs, _, term, trunc, info = env.step(action)
        done = term or trunc
        if not done:
            seen.append((info["decision_context"].time, obs))
    return seen


def _episode(
    monkeypatch: pytest.MonkeyPatch, long_output: int, predicted: int | None
) -> tuple[list[tuple[float, dict[str, np.ndarray]]], float]:
    """Roll out ``_trace(long_output)`` under the oracle (``predicted`` None) or under a frozen
    predictor that says ``predicted`` for ``w1/a`` (and the truth of the others, which both
    traces share). Returns the steps and when ``w1/a`` finished."""
    name = "oracle"
    if predicted is not None:
        table = {(w.id, n.id): n.output_tokens for w in _trace(0) for n in w.nodes}
        table[("w1", "a")] = predicted
        monkeypatch.setitem(PREDICTORS, "frozen", lambda *a, **kw: _Frozen(table))
        name = "frozen"
    env = PDClusterEnv(
        cluster="hetero-1", model=MODEL, trace=_trace(long_output), output_predictor=name, slots=8
    )
    steps = _rollout(env)
    call = next(c for c in env.sim.calls if (c.workflow.id, c.node.id) == ("w1", "a"))
    return steps, call.decode_end


def _same_until(a: list, b: list, t_star: float) -> int:
    """Assert the two step sequences are identical while the decision time is < t_star; return
    how many steps were compared."""
    compared = 0
    for (ta, oa), (tb, ob) in zip(a, b, strict=False):
        if ta >= t_star or tb >= t_star:
            break
        assert ta == tb
        for key in oa:
            np.testing.assert_array_equal(oa[key], ob[key], err_msg=f"{key} at t={ta}")
        compared += 1
    return compared


def test_true_lengths_reach_the_observation_only_through_the_predictor(monkeypatch):
    # Same predictions, different truth: identical until the changed call finishes.
    short, t_short = _episode(monkeypatch, 60, predicted=200)
    long, t_long = _episode(monkeypatch, 900, predicted=200)
    assert _same_until(short, long, min(t_short, t_long)) >= 3
    # Same truth, different predictions: what the policy sees differs as soon as w1/a is
    # revealed — the estimate is the channel (L̂_out, KV demand, R all move with it).
    other, _ = _episode(monkeypatch, 60, predicted=700)
    with pytest.raises(AssertionError):
        _same_until(short, other, t_short)


def test_the_oracle_default_exposes_the_truth(monkeypatch):
    """The documented oracle assumption: under ``oracle`` the truth is visible at once — the
    property the first test checks would fail (this guards the test's power, too)."""
    short, t_short = _episode(monkeypatch, 60, predicted=None)
    long, t_long = _episode(monkeypatch, 900, predicted=None)
    with pytest.raises(AssertionError):
        _same_until(short, long, min(t_short, t_long))


def _tool_workflows(second_latency: float) -> list[Workflow]:
    """w0: call → tool ``search`` (2 s) → call; w1 arrives later with the same shape, its tool
    taking ``second_latency`` s."""

    def chain(wid: str, arrival: float, latency: float) -> Workflow:
        return Workflow(
            wid,
            arrival,
            (
                LLMNode("a", MODEL, 200, 20),
                ToolNode("t", latency, parents=("a",), name="search"),
                LLMNode("b", MODEL, 200, 20, parents=("t",)),
            ),
        )

    return [chain("w0", 0.0, 2.0), chain("w1", 5.0, second_latency)]


def _horizons_while_tool_runs(tool_estimate: str, second_latency: float) -> list[float]:
    """H_w(t) of each workflow just after its tool was revealed, before it returns."""
    sim = Simulation(
        load_cluster("hetero-1", model=MODEL),
        _tool_workflows(second_latency),
        tool_estimate=tool_estimate,
    )
    sched, seen = DefaultScheduler(), {}
    while sim.pending or sim.env.peek() != math.inf:  # event by event, to look while the tools run
        if sim.pending:
            inv = sim.advance()
            assert inv is not None
            sim.apply(sched.plan(sim, inv))
        else:
            sim.env.step()
        for run in sim.runs:
            if "t" in run.revealed and "t" not in run.finished and run.id not in seen:
                seen[run.id] = run.online_horizon
    assert sim.done
    return [seen["w0"], seen["w1"]]


def test_a_running_tool_is_charged_an_estimate_not_its_true_latency():
    fast = _horizons_while_tool_runs("history", second_latency=1.0)
    slow = _horizons_while_tool_runs("history", second_latency=9.0)
    # w1's horizon while its tool runs does not depend on that tool's true latency ...
    assert fast == slow
    # ... and charges the measured mean of the finished ``search`` tools (w0's: 2 s), while w0's
    # first ``search`` had no history (0 s): the two horizons differ by exactly that 2 s.
    assert fast[1] - fast[0] == pytest.approx(2.0, abs=1e-9)
    # The oracle charges the true latencies: 2 s for w0's tool, 9 s for w1's.
    oracle = _horizons_while_tool_runs("oracle", second_latency=9.0)
    assert oracle[0] - fast[0] == pytest.approx(2.0, abs=1e-9)
    assert oracle[1] - fast[0] == pytest.approx(9.0, abs=1e-9)


def test_a_finished_tool_is_charged_its_measured_latency():
    sim = Simulation(load_cluster("hetero-1", model=MODEL), _tool_workflows(7.0))
    result = sim.run(DefaultScheduler())
    # At the end every node is finished: H_w(t) is the true isolated path, tools included.
    for run, wf in zip(sim.runs, _tool_workflows(7.0), strict=True):
        tool = next(n for n in wf.nodes if isinstance(n, ToolNode))
        assert run.path_end["t"] - run.path_end["a"] == pytest.approx(tool.latency)
    assert result.metrics["req99"] >= 1.0


@pytest.mark.parametrize("bad", ["truth", "", None])
def test_tool_estimate_rejects_unknown_values(bad):
    with pytest.raises(ValueError, match="tool_estimate"):
        Simulation(load_cluster("hetero-1", model=MODEL), _tool_workflows(1.0), tool_estimate=bad)
    with pytest.raises(ValueError, match="tool_estimate"):
        PDClusterEnv(model=MODEL, trace=_tool_workflows(1.0), tool_estimate=bad)
