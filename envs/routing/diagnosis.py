"""Why requests miss their SLO in ``servegym/Routing-v0``: the episode-end ``info["diagnosis"]``.

Env-side bookkeeping (it reads true output lengths, so it is never shown to a policy; it appears
only in the final ``info``). Keys of :meth:`RoutingDiagnosis.summary`:

* ``migrations_attempted``: migrate decisions answered with another instance (running and
  queued requests; ``..._queued`` counts the queued ones); ``migrated_requests``: distinct
  requests moved at least once; ``migrated_met``: of those, the ones that met their SLO
  ("saved": at risk when moved, on time in the end).
* ``misses``: requests over their SLO, and ``miss_<cause>`` the share of them by cause, each miss
  counted once, in this order:

  1. ``unfinished``: never finished (truncated episode);
  2. ``under_prediction``: when routed, the chosen instance's Eq. 2 estimate met the deadline,
     but the same estimate with the true output length (``+ (L_out − L̂_out) · d_g``) would not
     have -- the predictor, not the instance, misled the router;
  3. otherwise the phase that overshot its share of the SLO the most, each phase measured against
     α × its run-alone time on the SLO's reference GPU: ``queueing`` (arrival to the start of the
     first prefill, share 0), ``prefill`` (the first prefill, share α · prefill alone) or
     ``decode`` (end of prefill to finish, including any migration and re-prefill, share
     α · (run-alone − prefill alone)).
* ``prediction_nmae_<task>`` / ``prediction_bias_<task>``: per task class, Σ|L̂_out − L_out| /
  ΣL_out and ΣL̂_out / ΣL_out − 1 of the routing-time predictions (GoodServe §3.2's error).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

CAUSES = ("unfinished", "under_prediction", "queueing", "prefill", "decode")


class RoutingDiagnosis:
    """Records each request's routing-time estimate; explains its outcome at the end.

    :param run_alone: ``(L_in, L_out) -> seconds`` alone on the SLO's reference GPU.
    :param slo_scale: α.
    """

    def __init__(self, run_alone: Callable[[int, int], float], slo_scale: float):
        self.run_alone = run_alone
        self.alpha = float(slo_scale)
        self._routed: dict[int, tuple[str, int, bool]] = {}  # uid -> task, L̂_out, misled
        self.attempted = 0
        self.attempted_queued = 0
        self._moved: set[int] = set()

    def on_routed(self, call: Any, ctx: Any, action: int) -> None:
        """The router sent ``call`` to ``action``; keep what it believed."""
        # Counterfactual slack: the chosen estimate with the true length, against the deadline.
        true_extra = (call.output_tokens - ctx.predicted_output_tokens) * float(ctx.d[action])
        true_meets = ctx.time + float(ctx.estimate[action]) + true_extra <= ctx.deadline
        self._routed[call.uid] = (
            ctx.task,
            int(ctx.predicted_output_tokens),
            bool(ctx.meets_deadline[action]) and not true_meets,
        )

    def on_migrated(self, call: Any, ctx: Any) -> None:
        """The router moved ``call`` away from ``ctx.current``."""
        self.attempted += 1
        self.attempted_queued += int(bool(ctx.queued))
        self._moved.add(call.uid)

    def summary(
        self, calls: Sequence[Any], latencies: np.ndarray, slos: np.ndarray
    ) -> dict[str, float]:
        """The episode's diagnosis (see the module docstring)."""
        out: dict[str, float] = {
            "migrations_attempted": float(self.attempted),
            "migrations_attempted_queued": float(self.attempted_queued),
            "migrated_requests": float(len(self._moved)),
        }
        met_moved = 0
        causes = dict.fromkeys(CAUSES, 0)
        pred: dict[str, list[tuple[int, int]]] = {}
        for c in calls:
            i = c.workflow.index
            lat, slo = float(latencies[i]), float(slos[i])
            met = lat <= slo
            routed = self._routed.get(c.uid)
            if routed is not None:
                pred.setdefault(routed[0], []).append((routed[1], c.output_tokens))
            if c.uid in self._moved and met:
                met_moved += 1
            if met:
                continue
            if not np.isfinite(lat):
                causes["unfinished"] += 1
            elif routed is not None and routed[2]:
                causes["under_prediction"] += 1
            else:
                causes[self._phase(c, lat)] += 1
        out["migrated_met"] = float(met_moved)
        misses = sum(causes.values())
        out["misses"] = float(misses)
        for k, v in causes.items():
            out[f"miss_{k}"] = v / misses if misses else 0.0
        for task, pairs in sorted(pred.items()):
            p, t = np.array(pairs, dtype=float).T
            out[f"prediction_nmae_{task}"] = float(np.abs(p - t).sum() / max(1.0, t.sum()))
            out[f"prediction_bias_{task}"] = float(p.sum() / max(1.0, t.sum()) - 1.0)
        return out

    def _phase(self, c: Any, latency: float) -> str:
        """The phase of a finished, missed request that overshot its SLO share the most."""
        arrival = c.workflow.arrival
        start = c.prefill_start if c.prefill_start >= 0 else arrival + latency
        end = c.prefill_end if c.prefill_end >= 0 else arrival + latency
        prefill_alone = self.run_alone(c.input_tokens, 1)
        decode_alone = self.run_alone(c.input_tokens, c.output_tokens) - prefill_alone
        over = {
            "queueing": start - arrival,
            "prefill": (end - start) - self.alpha * prefill_alone,
            "decode": (arrival + latency - end) - self.alpha * decode_alone,
        }
        return max(over, key=lambda k: over[k])
