"""Routing-v0's decision contexts: the :class:`~envs.routing.context.RoutingContext` of each route
and migrate decision (GoodServe Eq. 2 for every instance, the action mask), and a risk check's
per-decision arrays computed once for all its calls (routing at 512 instances).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envs.routing.context import RoutingContext
from envs.routing.state import RoutingState
from envs.sim.core.simulation import TOKEN_ID_BYTES
from envs.sim.core.workflows import WAIT_PREFILL, Call


@dataclass(frozen=True)
class RiskCheckRows:
    """One risk check's per-decision arrays (row i: the check's i-th call at risk; see
    :meth:`RoutingEnv._risk_check_rows`): (k, M) ``transfer``, ``estimate``, ``meets``
    (deadline), ``prefill_tokens``; (k, 4, M) ``observation`` (instance feature rows 8-11);
    per call the ``hits`` and ``feasible`` (M,) arrays; ``index``: call uid -> row."""

    index: dict[int, int]
    hits: list[np.ndarray]
    feasible: list[np.ndarray]
    transfer: np.ndarray
    estimate: np.ndarray
    meets: np.ndarray
    prefill_tokens: np.ndarray
    observation: np.ndarray


class ContextMixin(RoutingState):
    """The decision-context methods of :class:`envs.routing.env.RoutingEnv`."""

    #: The open risk check's per-decision arrays (declared here, not in RoutingState: its type
    #: lives in this module).
    _rows: RiskCheckRows | None

    def _build_context(self, call: Call) -> None:
        """The :class:`RoutingContext` of ``call``'s decision (GoodServe Eq. 2 for every
        instance). The monitor's arrays come from its snapshot, shared (read-only) by every
        decision until the monitor changes; the request's own arrays are computed here (a
        route) or come from the risk check's rows (:meth:`_risk_check_rows`), in the same
        floating-point operations, in the same order, as from scratch:
        ``((transfer + q) + prefill · p) + L̂ · d``."""
        sim, mon = self.sim, self.monitor
        assert sim is not None
        now = sim.now
        assert self._inv is not None
        migrate = self._inv.stage == "migrate"
        run = call.workflow
        slo = float(self._slo[run.index])
        deadline = run.arrival + slo
        generated = call.generated if migrate else 0
        remaining = self._remaining[call.uid] if migrate else call.predicted_output_tokens
        current = mon.pos[call.prefill_instance] if migrate else -1
        queued = migrate and call.stage == WAIT_PREFILL
        snap = mon.snapshot(now)
        derived = self._derived
        if derived is None or derived[0] is not snap:
            free_kv = self._kv_capacity - snap.kv_used
            route_q = self._zeros + snap.q
            free_kv.flags.writeable = route_q.flags.writeable = False
            derived = self._derived = (snap, free_kv, route_q)
        obs_rows = None
        if migrate:
            rows = self._rows
            assert rows is not None
            i = rows.index[call.uid]
            hits, feasible = rows.hits[i], rows.feasible[i]
            transfer, estimate, meets = rows.transfer[i], rows.estimate[i], rows.meets[i]
            self._prefill_tokens = rows.prefill_tokens[i]
            obs_rows = rows.observation[i]
        else:
            found = sim.estimates.prefix_hits(call)
            hits = self._zeros
            if found:
                hits = np.zeros(self.M)
                for i, tokens in found.items():
                    hits[mon.pos[i]] = tokens
                prefill_tokens: np.ndarray | float = np.maximum(0.0, call.input_tokens - hits)
                prefill = prefill_tokens * snap.p
            else:  # max(0, prompt − 0) = prompt on every instance
                prefill_tokens = float(call.input_tokens)
                prefill = call.input_tokens * snap.p
            self._prefill_tokens = prefill_tokens
            transfer = self._zeros
            estimate = derived[2] + prefill + remaining * snap.d
            meets = now + estimate <= deadline
            feasible, any_legal = self._legal(call)
            if not any_legal:
                raise ValueError(
                    f"request {call.id} ({call.input_tokens} prompt tokens, model "
                    f"{call.model!r}) fits no instance: context windows "
                    f"{self._max_context.tolist()}, KV capacities "
                    f"{self._kv_capacity.tolist()}, models {sorted(set(self._served))}"
                )
        self._ctx = RoutingContext(
            time=now,
            kind="migrate" if migrate else "route",
            call_id=call.id,
            task=call.node.task,
            input_tokens=call.input_tokens,
            generated=generated,
            predicted_output_tokens=int(generated + remaining),
            predicted_remaining_tokens=int(remaining),
            arrival=run.arrival,
            slo=slo,
            deadline=deadline,
            slack=deadline - now,
            current=current,
            gpus=self._gpu_names,
            capability=self._capability,
            q=snap.q,
            p=snap.p,
            d=snap.d,
            running=snap.running,
            waiting=snap.waiting,
            outstanding=snap.outstanding,
            free_kv_tokens=derived[1],
            kv_capacity=self._kv_capacity,
            queued_prefill_tokens=snap.queued_prefill,
            outstanding_output_tokens=snap.owed_output,
            tokens_per_minute=snap.tokens_per_minute,
            prefix_hit_tokens=hits,
            transfer_time=transfer,
            estimate=estimate,
            meets_deadline=meets,
            feasible=feasible,
            queued=queued,
        )
        self._obs_rows = None if obs_rows is None else (self._ctx, obs_rows)
        self._mask = feasible
        if migrate:
            self._migration_decisions += 1

    def _legal(self, call: Call) -> tuple[np.ndarray, bool]:
        """The action mask of ``call`` at a route decision (read-only, shared by every request
        of its model reaching the same context windows) and whether any instance is legal."""
        key = (call.model, bisect_right(self._windows, call.input_tokens))
        cached = self._feasible.get(key)
        if cached is None:
            holds = self._holds.get(call.model)
            if holds is None:  # serves the model, and its context window fits the KV capacity
                holds = self._holds[call.model] = (self._served == call.model) & self._footprint_ok
            legal = holds & (call.input_tokens < self._max_context)
            legal.flags.writeable = False
            cached = self._feasible[key] = (legal, bool(legal.any()))
        return cached

    def _risk_check_rows(self, calls: Sequence[Call], instance: int) -> RiskCheckRows:
        """The request-dependent arrays of every decision of one risk check, as (k, M) rows,
        each computed elementwise exactly as :meth:`_build_context` would for that call alone.
        Valid for the whole check: nothing they read changes between its decisions (the
        simulator waits; a move changes the monitor's counts, never q, p, d; the calls' stage,
        generated tokens and prefix hits stay as they are)."""
        sim, mon = self.sim, self.monitor
        assert sim is not None
        now = sim.now
        snap = mon.snapshot(now)
        cur = mon.pos[instance]
        k, m = len(calls), self.M
        prefill_tokens = np.empty((k, m))
        scale = np.empty(k)  # bytes per second of link time: per-token bytes × tokens
        hits_rows, legal_rows = [], []
        deadline = np.empty(k)
        slo = np.empty(k)
        denom = np.empty(k)
        remaining = np.empty(k)
        stay = np.empty(k)
        for i, c in enumerate(calls):
            run = c.workflow
            slo[i] = float(self._slo[run.index])
            deadline[i] = run.arrival + slo[i]
            prompt = c.input_tokens + c.generated
            kv_move = self.migration == "kv" and c.stage != WAIT_PREFILL
            found = sim.estimates.prefix_hits(c)
            hits = self._zeros
            if found:
                hits = np.zeros(m)
                for j, tokens in found.items():
                    hits[mon.pos[j]] = tokens
                hits.flags.writeable = False
            hits_rows.append(hits)
            if kv_move:  # the KV travels: nothing to prefill on the target
                prefill_tokens[i] = 0.0
            elif found:
                prefill_tokens[i] = np.maximum(0.0, prompt - hits)
            else:  # max(0, prompt − 0) = prompt on every instance
                prefill_tokens[i] = float(prompt)
            # a queued request holds no KV: it always ships token IDs and prefills on arrival
            scale[i] = (self._kvb[cur] if kv_move else TOKEN_ID_BYTES) * prompt
            remaining[i] = self._remaining[c.uid]
            stay[i] = self._stay[c.uid]
            denom[i] = max(1, c.input_tokens)
            legal = self._legal(c)[0]
            if not legal[cur]:  # staying is always legal
                legal = legal.copy()
                legal[cur] = True
                legal.flags.writeable = False
            legal_rows.append(legal)
        transfer = self._link_latency + np.multiply.outer(scale, self._inv_bw[cur])
        transfer[:, cur] = 0.0
        estimate = transfer + snap.q + prefill_tokens * snap.p + remaining[:, None] * snap.d
        estimate[:, cur] = stay
        meets = now + estimate <= deadline[:, None]
        # Rows 8-11 of the instance features (observation.py), clipped as there.
        obs = np.zeros((k, 4, m), dtype=np.float32)
        obs[:, 0] = np.stack(hits_rows) / denom[:, None]
        obs[:, 1] = np.minimum(estimate / slo[:, None], 10.0)
        obs[:, 2] = meets
        obs[:, 3] = np.stack(legal_rows)
        np.clip(obs, 0.0, 10.0, out=obs)
        for a in (transfer, estimate, meets, prefill_tokens, obs):
            a.flags.writeable = False
        return RiskCheckRows(
            index={c.uid: i for i, c in enumerate(calls)},
            hits=hits_rows,
            feasible=legal_rows,
            transfer=transfer,
            estimate=estimate,
            meets=meets,
            prefill_tokens=prefill_tokens,
            observation=obs,
        )
