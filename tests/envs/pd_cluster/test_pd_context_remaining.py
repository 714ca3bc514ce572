"""Specifications of ``DecisionContext.remaining_critical`` (envs/pd_cluster/context.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from envs.pd_cluster import DecisionContext, PDClusterEnv
from envs.sim.core.workflows import WorkflowRun
from traces.schema import LLMNode, ToolNode, Workflow

MODEL = "llama3.1-70b"
CLUSTER = "homo-h200-4p4d"


def fan_out_workflow(a_out: int = 2000, d_out: int = 100) -> Workflow:
    """r and tool t0 at arrival; r reveals a (long) and b (short); b → c → tool t (120 s) → d.

    c is revealed while a is still decoding; d only after a has finished. Every call has its
    own task, so the task-mean predictor predicts its 256-token prior for all of them."""
    return Workflow(
        "w",
        0.0,
        (
            LLMNode("r", MODEL, 1000, 50, task="r"),
            ToolNode("t0", 3.0),
            LLMNode("a", MODEL, 500, a_out, ("r",), task="a"),
            LLMNode("b", MODEL, 300, 5, ("r",), task="b"),
            LLMNode("c", MODEL, 400, 20, ("b",), task="c"),
            ToolNode("t", 120.0, ("c",)),
            LLMNode("d", MODEL, 600, d_out, ("t",), task="d"),
        ),
    )


def contexts(env: PDClusterEnv, seed: int = 0, random: bool = False) -> Iterator[DecisionContext]:
    """Every decision context of one episode, acting first-legal (or uniformly at random)."""
    rng = np.random.default_rng(seed)
    _, info = env.reset(seed=seed)
    while True:
        yield info["decision_context"]
        legal = np.flatnonzero(info["action_mask"])
        action = int(rng.choice(legal)) if random else int(legal[0])
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return


def slot_of(ctx: DecisionContext, call_id: str) -> int | None:
    return ctx.call_ids.index(call_id) if call_id in ctx.call_ids else None


def run_alone_seconds(env: PDClusterEnv, input_tokens: int, output_tokens: int) -> float:
    """Prefill + KV transfer + decode of one call at batch 1, by hand on the homogeneous
    cluster (every pair is the fastest)."""
    p, d = env.sim.prefill[0], env.sim.decode[0]
    kv_bytes = p.latency.kv_bytes_per_token * input_tokens
    return (
        p.latency.prefill_time(input_tokens)
        + env.cluster.kv_transfer.transfer_time(kv_bytes, p.gpu, d.gpu)
        + d.latency.decode_steps_time(1, input_tokens, output_tokens)
    )


def longest_unfinished_path(env: PDClusterEnv, run: WorkflowRun) -> float:
    """Reference: longest path through the revealed, unfinished nodes by DP over the DAG (no
    assumption on which nodes can be unfinished together)."""
    open_nodes = [n for n in run.revealed if n not in run.finished]
    memo: dict[str, float] = {}

    def longest_from(node_id: str) -> float:
        if node_id not in memo:
            node = run.nodes[node_id]
            cost = (
                node.latency
                if isinstance(node, ToolNode)
                else env.sim.estimates.isolated_call_time(run.calls[node_id])
            )
            tails = [longest_from(c) for c in run.children[node_id] if c in open_nodes]
            memo[node_id] = cost + max(tails, default=0.0)
        return memo[node_id]

    return max((longest_from(n) for n in open_nodes), default=0.0)


def test_remaining_critical_matches_hand_computed_values_and_shrinks_as_calls_finish():
    # tools cost their true latency, as in the hand computation (tool_estimate="oracle")
    env = PDClusterEnv(cluster=CLUSTER, trace=[fan_out_workflow()], tool_estimate="oracle")
    seen: dict[str, float] = {}
    for ctx in contexts(env):
        for call_id in ("w/r", "w/a", "w/b", "w/c", "w/d"):
            k = slot_of(ctx, call_id)
            if k is not None:
                seen.setdefault(call_id, float(ctx.remaining_critical[k]))
                if call_id == "w/r":  # nothing has finished: the tool t0 (3 s) is the longest
                    assert ctx.remaining_critical[k] == 3.0 == ctx.horizon[k]
                    assert ctx.isolated_time[k] < 3.0
    run = env.sim.runs[0]
    iso_a = run_alone_seconds(env, 500, 2000)
    iso_d = run_alone_seconds(env, 600, 100)
    assert np.isclose(seen["w/a"], iso_a) and seen["w/a"] == seen["w/b"]
    # c is revealed while its sibling branch a still decodes: a's cost counts, not c's own.
    assert seen["w/c"] == seen["w/a"]
    # d is revealed after a, b, c and both tools finished: only d is left.
    assert np.isclose(seen["w/d"], iso_d) and seen["w/d"] < seen["w/c"]
    assert run.calls["a"].decode_end < run.calls["d"].revealed_at


def test_remaining_critical_is_the_longest_unfinished_revealed_path_and_zero_when_invalid():
    env = PDClusterEnv(workload="mixed", workload_count=8, slots=32)
    branch_seen = False
    for ctx in contexts(env, seed=4, random=True):
        runs = {run.id: run for run in env.sim.runs}
        v = ctx.valid
        assert not ctx.remaining_critical[~v].any()
        for k in np.flatnonzero(v):
            run = runs[ctx.workflow_ids[k]]
            rem = ctx.remaining_critical[k]
            assert rem == longest_unfinished_path(env, run)
            assert ctx.isolated_time[k] <= rem <= ctx.horizon[k]
            if not run.finished:
                assert rem == ctx.horizon[k]
            branch_seen |= bool(rem > ctx.isolated_time[k])
    assert branch_seen, "the workload never had a call with an unfinished sibling branch"


def test_remaining_critical_does_not_depend_on_true_output_lengths():
    def context_when_c_is_revealed(a_out: int, d_out: int) -> tuple[DecisionContext, float]:
        """The first context with call c in a slot, and a's run-alone cost at 256 tokens."""
        env = PDClusterEnv(
            cluster=CLUSTER, trace=[fan_out_workflow(a_out, d_out)], output_predictor="task-mean"
        )
        for ctx in contexts(env):
            if slot_of(ctx, "w/c") is not None:
                assert env.sim.runs[0].calls["a"].decode_end < 0, "a must still be in flight"
                return ctx, run_alone_seconds(env, 500, 256)
        raise AssertionError("call c never waited for a decision")

    base, iso_a_predicted = context_when_c_is_revealed(2000, 100)
    k = slot_of(base, "w/c")
    # a, in flight, is costed from its predicted 256 tokens and dominates c's own cost.
    assert np.isclose(base.remaining_critical[k], iso_a_predicted)
    assert base.remaining_critical[k] > base.isolated_time[k]
    assert context_when_c_is_revealed(3000, 100)[0] == base  # a's true length differs
    assert context_when_c_is_revealed(2000, 900)[0] == base  # unrevealed d's true length differs
