"""PDCluster's action spaces: the flat ``Discrete(K·P·D)`` and the two-step decision.

``action_space="flat"`` (PDCluster-v0): one step per pick, ``a = k·P·D + p·D + d``.

``action_space="two-step"`` (PDCluster-v1): a pick takes a *slot step* and, at the prefill stage,
a *pair step*, both in one ``Discrete(max(K + 1, P·D))``:

* slot step: ``a = k < K`` picks waiting-call slot k (legal: valid, not yet picked, KV-feasible
  on some decode instance); ``a = K`` (keep) ends the invocation: every call not
  picked keeps its previous plan and queue order behind the picks, or takes the fallback's plan
  if it has none (the rule for calls beyond the K slots, HexAgent §4.3). At the decode stage the
  picked call is locked to its planned pair, so the slot step is the whole pick.
* pair step (prefill stage only): ``a = p·D + d`` places the selected slot on prefill p and
  decode d (legal: the slot's KV-feasible pairs).

Re-planning every waiting call at every invocation (HexAgent Algorithm 1 lines 12–22) is what
makes a paper-scale episode long: at the default (hetero-1, ``mixed``, 100 workflows) HexAgent
makes 88.5 k picks, 82 k of them re-picking prefill-stage calls that already have a plan. The
keep action lets a policy re-plan only the calls it chooses to; an expert that re-plans all of
them never takes it and makes exactly the picks it makes in the flat space.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ACTION_SPACES = ("flat", "two-step")
#: What ``PDClusterEnv._decode_action`` returns for the two-step space's keep action.
KEEP: tuple[()] = ()


def check_action_space(name: Any) -> str:
    """:raises ValueError: if ``name`` is not one of :data:`ACTION_SPACES`."""
    if name not in ACTION_SPACES:
        raise ValueError(f"action_space must be one of {ACTION_SPACES}, got {name!r}")
    return str(name)


def action_count(name: str, slots: int, prefill: int, decode: int) -> int:
    """``n`` of the ``Discrete(n)`` action space: K·P·D (flat) or max(K + 1, P·D) (two-step)."""
    if name == "flat":
        return slots * prefill * decode
    return max(slots + 1, prefill * decode)


def two_step_mask(feasible: np.ndarray, selected: int, n: int) -> np.ndarray:
    """The two-step mask (length ``n``) from the flat feasibility ``feasible`` (K, P, D): at the
    slot step (``selected`` < 0) the open slots and keep (index K); at the pair step the
    selected slot's feasible pairs (index p·D + d)."""
    K = feasible.shape[0]
    mask = np.zeros(n, dtype=bool)
    if selected < 0:
        mask[:K] = feasible.reshape(K, -1).any(axis=1)
        mask[K] = True
    else:
        row = feasible[selected].reshape(-1)
        mask[: row.size] = row
    return mask


def explain_flat(ctx: Any, action: int, n: int) -> str:
    """Why ``action`` is masked in the flat space (for ``invalid_action="raise"``)."""
    if not 0 <= action < n:
        return f"action {action} is outside Discrete({n})"
    slot, p, d = ctx.unflatten(action)
    if not ctx.valid[slot]:
        why = f"slot {slot} is empty (only {int(ctx.valid.sum())} calls are waiting)"
    elif ctx.picked[slot]:
        why = f"slot {slot} ({ctx.call_ids[slot]}) was already picked in this invocation"
    elif ctx.stage == "decode":
        why = (
            f"at the decode stage call {ctx.call_ids[slot]} is locked to prefill "
            f"{ctx.planned_prefill[slot]}, decode {ctx.planned_decode[slot]}"
        )
    else:
        why = (
            f"call {ctx.call_ids[slot]} needs {ctx.kv_demand[slot]:.0f} KV tokens but decode "
            f"instance {d} holds {ctx.decode_kv_capacity[d]:.0f}"
        )
    return (
        f"masked action {action} = (slot {slot}, prefill {p}, decode {d}): {why}. Use "
        "env.action_masks() or make the env with invalid_action='penalize'."
    )


def explain_two_step(ctx: Any, action: int, selected: int, n: int, num_d: int) -> str:
    """Why ``action`` is masked in the two-step space (for ``invalid_action="raise"``); a slot
    step is legal at the decode stage whenever the slot is open (its pair is locked)."""
    if not 0 <= action < n:
        return f"action {action} is outside Discrete({n})"
    K = ctx.num_slots
    if selected < 0:
        if action > K:
            return (
                f"action {action} is a pair index, but this is a slot step (0..{K - 1} pick a "
                f"slot, {K} keeps the remaining plans)"
            )
        if not ctx.valid[action]:
            return f"slot {action} is empty (only {int(ctx.valid.sum())} calls are waiting)"
        if ctx.picked[action]:
            return f"slot {action} ({ctx.call_ids[action]}) was already picked in this invocation"
        return f"slot {action} ({ctx.call_ids[action]}) has no KV-feasible decode instance"
    p, d = divmod(action, num_d)
    if p >= ctx.prefill_time.shape[1]:
        return (
            f"action {action} is not a (prefill, decode) pair index; this is the pair step of "
            f"slot {selected}"
        )
    return (
        f"pair step of slot {selected} ({ctx.call_ids[selected]}): it needs "
        f"{ctx.kv_demand[selected]:.0f} KV tokens but decode instance {d} holds "
        f"{ctx.decode_kv_capacity[d]:.0f}"
    )
