"""What a router knows at one decision of ``servegym/Routing-v0``: the black-box instance monitor
(GoodServe §3.3) and the :class:`RoutingContext` that experts and baselines act on.

A router in GoodServe is a proxy: it sees the requests it routes and what the instances report
back (admission, first token, each streamed token, completion), never the engines' internals or a
request's true output length. :class:`InstanceMonitor` turns those reports into the three
EMA-smoothed, per-instance coefficients of GoodServe Eq. 2:

* ``q_g`` — queueing delay, seconds, one sample per admission (time from entering the instance's
  queue to admission);
* ``p_g`` — prefill seconds per prompt token, one sample per finished prefill (prefill wall time
  over the tokens actually computed, so with chunked prefill it includes the decode work the
  chunks share their iterations with);
* ``d_g`` — decode seconds per output token: every decode iteration is one sample (a segment of
  n iterations of mean time x counts as n samples of x), what a client measures between streamed
  tokens. Weighting per iteration matters under chunked prefill: a long pure-decode segment and a
  single mixed prefill+decode iteration are one report each, but not one token each.

Before an instance has reported anything its coefficients come from a warm-up probe (one 1,024
token prefill and one decode step at batch 1 of the instance's latency model), as a deployed
proxy would measure each backend once at start-up. The EMA weight is ``ema_alpha`` (default 0.2).

The estimate of request r on instance g (GoodServe Eq. 2) is
``T(r, g) = q_g + (L_in − H_rg) · p_g + L̂_out · d_g``
with H_rg the prompt tokens already in g's prefix cache. At a migration check (every τ decode
iterations, §3.4) the estimate for the instance the request runs on is ``L̂_rem · d_g`` (it needs
no queue and no prefill; a request still queued there pays the rest of the expected queueing
and its prefill, see :attr:`RoutingContext.queued`), and for any other instance ``transfer +
q_g + (L_in + generated − H_rg) · p_g + L̂_rem · d_g`` (token-ID migration re-prefills the
prompt and the generated tokens).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.common.base import DecisionContextBase

#: Seconds of history for tokens-per-minute (LiteLLM's lowest-TPM window).
TPM_WINDOW_S = 60.0


class InstanceMonitor:
    """Black-box, EMA-smoothed per-instance latency coefficients (GoodServe §3.3), and what a
    proxy counts itself from the requests it sent and the reports it got back.

    A simulation listener (``Simulation.add_listener``); the env also calls :meth:`on_routed`
    and :meth:`on_departed`. Per instance, as (M,) arrays updated in O(1) per event:

    * ``q``, ``p``, ``d``: the EMAs of Eq. 2;
    * ``outstanding``: requests sent to g and not finished (including ones migrating to g);
    * ``waiting``: sent and not yet admitted; ``running``: admitted and not finished;
    * ``queued_prefill``: prompt tokens sent to g whose prefill has not finished (each request
      counted as L_in − H_rg at the time it was sent, plus generated tokens after a token-ID
      migration);
    * ``kv_used``: KV tokens of the running requests at admission (prompt, plus generated tokens
      of a migrated request); tokens generated since admission are not counted;
    * ``owed_output``: the proxy's own predictions L̂_out of the requests sent to g and not
      finished, summed (tokens; the prediction made when routed, never the truth).

    Routers read the arrays through :meth:`snapshot`: read-only copies, taken once per
    (:attr:`version`, time) and shared by every decision until something changes (at a risk
    check, the decisions that keep their request in place change nothing).

    :param instances: the simulation's monolithic instances, in cluster order.
    :param ema_alpha: weight of a new sample, in (0, 1].
    """

    def __init__(self, instances: list[Any], ema_alpha: float = 0.2):
        if not 0.0 < ema_alpha <= 1.0:
            raise ValueError(f"ema_alpha must be in (0, 1], got {ema_alpha}")
        self.alpha = ema_alpha
        self.pos = {inst.index: j for j, inst in enumerate(instances)}
        m = len(instances)
        self.q = np.zeros(m)
        self.p = np.array([inst.latency.prefill_time(1024) / 1024.0 for inst in instances])
        self.d = np.array([inst.latency.decode_iteration_time(1, 1024) for inst in instances])
        self.samples = np.zeros((m, 3), dtype=np.int64)  # q, p, d sample counts
        self.outstanding = np.zeros(m)
        self.waiting = np.zeros(m)
        self.running = np.zeros(m)
        self.queued_prefill = np.zeros(m)
        self.kv_used = np.zeros(m)
        self.owed_output = np.zeros(m)
        self._output_owed: dict[int, tuple[int, float]] = {}  # uid -> (instance, L̂_out)
        self._prefill_owed: dict[int, tuple[int, float]] = {}  # uid -> (instance, tokens)
        self._kv_held: dict[int, tuple[int, float]] = {}  # uid -> (instance, tokens)
        self._tpm: deque[tuple[float, int, int]] = deque()  # (time, instance, tokens)
        self._tpm_sum = np.zeros(m)
        #: Bumped by every hook that may change the arrays above (the snapshot's cache key).
        self.version = 0
        self._snapshot: MonitorSnapshot | None = None

    def _ema(self, arr: np.ndarray, j: int, value: float, col: int, n: int = 1) -> None:
        """Fold ``n`` samples of ``value`` into the EMA: x + (1 − α)^n · (old − x)."""
        if not math.isfinite(value) or value < 0:
            return
        if self.samples[j, col] == 0:
            arr[j] = value
        else:
            arr[j] = value + (1.0 - self.alpha) ** n * (arr[j] - value)
        self.samples[j, col] += n

    # -- simulation listener hooks -----------------------------------------------------------
    def on_admit(self, call: Any, inst: Any, now: float) -> None:
        self.version += 1
        j = self.pos[inst.index]
        self._ema(self.q, j, now - call.enqueued_at, 0)
        self.waiting[j] -= 1
        self.running[j] += 1
        held = call.input_tokens + call.generated
        self._kv_held[call.uid] = (j, held)
        self.kv_used[j] += held
        if call.resident:  # KV-migrated: nothing to prefill
            self._settle_prefill(call.uid)

    def on_prefill_done(self, call: Any, inst: Any, now: float, tokens: int, seconds: float):
        self.version += 1
        if tokens > 0:
            self._ema(self.p, self.pos[inst.index], seconds / tokens, 1)
        self._settle_prefill(call.uid)

    def on_decode_progress(self, inst: Any, iterations: int, seconds: float, batch: int) -> None:
        self.version += 1
        if iterations > 0:
            self._ema(self.d, self.pos[inst.index], seconds / iterations, 2, iterations)

    def on_preempted(self, call: Any, inst: Any, now: float) -> None:
        """A paging engine evicted running ``call`` back to its queue (it re-prefills)."""
        self.version += 1
        j = self.pos[inst.index]
        self.running[j] -= 1
        self.waiting[j] += 1
        self._release_kv(call.uid)

    def on_call_done(self, call: Any, inst: Any, now: float) -> None:
        self.version += 1
        j = self.pos.get(inst.index)
        if j is None:
            return
        self.outstanding[j] -= 1
        self.running[j] -= 1
        self._release_kv(call.uid)
        self._settle_output(call.uid)
        self._count_tokens(j, now, call.output_tokens)

    # -- proxy-side events -------------------------------------------------------------------
    def on_routed(self, call: Any, j: int, now: float, prefill_tokens: float) -> None:
        """The proxy sent ``call`` to instance ``j``, expecting ``prefill_tokens`` of prefill."""
        self.version += 1
        self.outstanding[j] += 1
        self.waiting[j] += 1
        self._owe_prefill(call.uid, j, prefill_tokens)
        self._owe_output(call.uid, j, float(call.predicted_output_tokens))
        self._count_tokens(j, now, call.input_tokens)

    def on_departed(
        self, call: Any, src: int, dst: int, prefill_tokens: float, queued: bool = False
    ) -> None:
        """The proxy migrates ``call`` from ``src`` to ``dst`` (it leaves the batch -- or, if
        ``queued``, the queue -- now and is pending at ``dst``, expecting ``prefill_tokens`` of
        (re-)prefill there)."""
        self.version += 1
        self.outstanding[src] -= 1
        if queued:
            self.waiting[src] -= 1
            self._settle_prefill(call.uid)
        else:
            self.running[src] -= 1
        self._release_kv(call.uid)
        self.outstanding[dst] += 1
        self.waiting[dst] += 1
        self._owe_prefill(call.uid, dst, prefill_tokens)
        owed = self._settle_output(call.uid)
        self._owe_output(call.uid, dst, owed)

    def _owe_prefill(self, uid: int, j: int, tokens: float) -> None:
        self._prefill_owed[uid] = (j, tokens)
        self.queued_prefill[j] += tokens

    def _owe_output(self, uid: int, j: int, tokens: float) -> None:
        self._output_owed[uid] = (j, tokens)
        self.owed_output[j] += tokens

    def _settle_output(self, uid: int) -> float:
        owed = self._output_owed.pop(uid, None)
        if owed is None:
            return 0.0
        self.owed_output[owed[0]] -= owed[1]
        return owed[1]

    def _settle_prefill(self, uid: int) -> None:
        owed = self._prefill_owed.pop(uid, None)
        if owed is not None:
            self.queued_prefill[owed[0]] -= owed[1]

    def _release_kv(self, uid: int) -> None:
        held = self._kv_held.pop(uid, None)
        if held is not None:
            self.kv_used[held[0]] -= held[1]

    def _count_tokens(self, j: int, now: float, tokens: int) -> None:
        self._tpm.append((now, j, tokens))
        self._tpm_sum[j] += tokens

    def snapshot(self, now: float) -> MonitorSnapshot:
        """The arrays as they are now, read-only; the same object until :attr:`version` or
        ``now`` changes."""
        snap = self._snapshot
        if snap is not None and snap.version == self.version and snap.time == now:
            return snap
        tpm = self.tokens_per_minute(now)
        snap = self._snapshot = MonitorSnapshot(
            self.version,
            now,
            _frozen(self.q),
            _frozen(self.p),
            _frozen(self.d),
            _frozen(self.running),
            _frozen(self.waiting),
            _frozen(self.outstanding),
            _frozen(self.queued_prefill),
            _frozen(self.kv_used),
            _frozen(self.owed_output),
            _frozen(tpm, copy=False),
        )
        return snap

    def tokens_per_minute(self, now: float) -> np.ndarray:
        """Prompt tokens routed plus output tokens returned per instance in the last 60 s."""
        cutoff = now - TPM_WINDOW_S
        window = self._tpm
        while window and window[0][0] < cutoff:
            _, j, tokens = window.popleft()
            self._tpm_sum[j] -= tokens
        return self._tpm_sum * (60.0 / TPM_WINDOW_S)


def _frozen(a: np.ndarray, copy: bool = True) -> np.ndarray:
    """A read-only copy of ``a`` (or ``a`` itself made read-only)."""
    out = a.copy() if copy else a
    out.flags.writeable = False
    return out


@dataclass(frozen=True, slots=True)
class MonitorSnapshot:
    """:class:`InstanceMonitor`'s (M,) arrays at one (version, time), read-only; see its
    docstring for each array (``tokens_per_minute``: :meth:`InstanceMonitor.tokens_per_minute`
    at ``time``)."""

    version: int
    time: float
    q: np.ndarray
    p: np.ndarray
    d: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    outstanding: np.ndarray
    queued_prefill: np.ndarray
    kv_used: np.ndarray
    owed_output: np.ndarray
    tokens_per_minute: np.ndarray


@dataclass(eq=False)
class RoutingContext(DecisionContextBase):
    """The scheduler-visible state at one decision (``info["decision_context"]``).

    Axis g = instance (M, in cluster order; the action is an index on it). Seconds and tokens
    unless named otherwise. Nothing here depends on a request's true output length.

    :param time: simulated time t.
    :param kind: ``route`` (a request arrived) or ``migrate`` (a τ-iteration risk check found the
        request likely to miss its deadline, GoodServe §3.4).
    :param call_id: the request's id.
    :param task: its task type (``sql``, ``code``, ``swe``, ...).
    :param input_tokens: L_in.
    :param generated: tokens generated so far (0 when routing).
    :param predicted_output_tokens: L̂_out, the predictor's total output estimate (at a check:
        generated + predicted remaining).
    :param predicted_remaining_tokens: L̂_rem = L̂_out − generated.
    :param arrival: the request's arrival time.
    :param slo: its E2E-SLO, seconds.
    :param deadline: arrival + slo.
    :param slack: deadline − t (negative: already late).
    :param current: instance the request runs on (-1 when routing).
    :param gpus: (M,) GPU type names.
    :param capability: (M,) seconds a reference request (1,024 prompt tokens, 256 output tokens)
        takes alone on g: static speed, smaller = more capable.
    :param q: (M,) EMA queueing delay q_g.
    :param p: (M,) EMA prefill seconds per token p_g.
    :param d: (M,) EMA decode seconds per token d_g.
    :param running: (M,) requests admitted to g and not finished.
    :param waiting: (M,) requests sent to g and not yet admitted (including ones migrating to g).
    :param outstanding: (M,) requests sent to g and not finished (running + waiting; the proxy's
        own count, including this invocation's earlier picks).
    :param free_kv_tokens: (M,) capacity minus the KV the running requests held at admission
        (prompt, plus generated tokens of a migrated request; tokens generated since are not
        counted). Not the engine's reservation, which would reveal true output lengths.
    :param kv_capacity: (M,) KV capacity, tokens.
    :param queued_prefill_tokens: (M,) prompt tokens sent to g whose prefill has not finished
        (each counted as L_in − H_rg when sent).
    :param outstanding_output_tokens: (M,) the predicted output tokens L̂_out (made when
        routed) of the requests sent to g and not finished, summed.
    :param tokens_per_minute: (M,) prompt tokens routed + output tokens returned in the last 60 s.
    :param prefix_hit_tokens: (M,) H_rg, prompt tokens of this request cached on g (at a migrate
        decision: of its prompt; the generated tokens are never cached elsewhere).
    :param transfer_time: (M,) seconds to move the request to g (0 when routing or g = current).
    :param estimate: (M,) T(r, g), estimated seconds from t until the request finishes on g.
    :param meets_deadline: (M,) t + T(r, g) ≤ deadline.
    :param feasible: (M,) the action mask. At a migrate decision ``current`` (stay) is always
        feasible, and the request is at risk: ``meets_deadline[current]`` is False.
    :param queued: at a migrate decision, the request is still waiting in ``current``'s queue
        (not admitted): its stay estimate is ``max(0, q_g − waited) + (L_in + generated −
        H_rg) · p_g + L̂_rem · d_g``; else it is decoding (``L̂_rem · d_g``).
    """

    time: float
    kind: str
    call_id: str
    task: str
    input_tokens: int
    generated: int
    predicted_output_tokens: int
    predicted_remaining_tokens: int
    arrival: float
    slo: float
    deadline: float
    slack: float
    current: int
    gpus: list[str]
    capability: np.ndarray
    q: np.ndarray
    p: np.ndarray
    d: np.ndarray
    running: np.ndarray
    waiting: np.ndarray
    outstanding: np.ndarray
    free_kv_tokens: np.ndarray
    kv_capacity: np.ndarray
    queued_prefill_tokens: np.ndarray
    outstanding_output_tokens: np.ndarray
    tokens_per_minute: np.ndarray
    prefix_hit_tokens: np.ndarray
    transfer_time: np.ndarray
    estimate: np.ndarray
    meets_deadline: np.ndarray
    feasible: np.ndarray
    queued: bool = False

    @property
    def num_instances(self) -> int:
        return int(self.feasible.shape[0])
