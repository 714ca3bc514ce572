"""The scheduler hook of the simulator, and two simple schedulers that need no RL.

A scheduler is any object with ``plan(sim, invocation) -> list[Assignment]`` (see
:class:`envs.sim.core.protocol.Invocation`). It may read the simulation's scheduler-visible state:
waiting calls (``input_tokens``, ``predicted_output_tokens``, ``time_error``, workflow arrival,
``workflow.online_horizon``), instance queues and engines, and the latency models. It must not
read ``Call.output_tokens`` (the truth) — the Gymnasium environments enforce this by exposing only
a documented decision context; here it is a convention.

Priorities: lower is served first. Both schedulers below are FCFS by reveal time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from envs.sim.core.protocol import Assignment, Invocation, Scheduler, SchedulerView

__all__ = ["DefaultScheduler", "EarliestFinishScheduler", "Scheduler"]


class DefaultScheduler:
    """Least-loaded placement, FCFS order — the simulator's no-RL default.

    * ``prefill``: each call without a plan goes to the prefill instance with the least queued
      prefill work in seconds (ties: the one that prefills this call fastest, then lowest index)
      and the decode instance with the smallest KV load fraction (reserved + queued predicted
      tokens over capacity) among those where m(c) = L_in + L̂_out fits (ties: fastest decode
      step, then lowest index). Priority = reveal time (FCFS).
    * ``decode``: keeps the FCFS priorities set at prefill time.
    * ``route``: among the instances serving the call's model whose KV capacity holds m(c) (all
      too small: the largest), the one with the fewest running + waiting calls (ties: fastest
      prefill, then lowest index).
    """

    def plan(self, sim: SchedulerView, inv: Invocation) -> list[Assignment]:
        if inv.stage in ("decode", "migrate"):
            return []  # decode: keep the prefill-time priorities; migrate: never move
        out: list[Assignment] = []
        if inv.stage == "prefill":
            prefill, decode = sim.prefill, sim.decode
            # Loads at the invocation plus what this plan adds (the queues do not change while
            # it is made), so each instance's queue is summed once per plan, not once per call.
            work = [p.queued_work_seconds() for p in prefill]
            base_kv = [d.reserved + d.waiting_predicted_kv for d in decode]
            planned_kv = [0] * len(decode)
            caps = [d.capacity for d in decode]
            every = list(range(len(decode)))
            smallest = min(caps) if caps else 0
            for c in inv.new_calls:
                n_in = c.input_tokens
                low = min(work)  # _argmin_then(work, ...), inline for the common unique minimum
                if work.count(low) == 1:
                    i = work.index(low)
                else:
                    i = _argmin_then(work, lambda i, n=n_in: prefill[i].latency.prefill_time(n))
                need = c.input_tokens + c.predicted_output_tokens  # c.predicted_kv_tokens
                if need <= smallest:  # every decode instance holds it
                    fits = every
                    loads = [
                        (b + p) / cap for b, p, cap in zip(base_kv, planned_kv, caps, strict=True)
                    ]
                else:
                    fits = [j for j in every if need <= caps[j]] or every
                    loads = [(base_kv[j] + planned_kv[j]) / caps[j] for j in fits]
                low = min(loads)
                if loads.count(low) == 1:
                    j = fits[loads.index(low)]
                else:
                    j = fits[
                        _argmin_then(
                            loads,
                            lambda k, f=fits, n=n_in: decode[f[k]].latency.decode_iteration_time(
                                1, n
                            ),
                        )
                    ]
                work[i] += prefill[i].latency.prefill_time(n_in)
                planned_kv[j] += need
                out.append(Assignment(c, c.revealed_at, prefill[i].index, decode[j].index))
            return out
        planned = {m.index: 0 for m in sim.monolithic}
        for c in inv.new_calls:
            serving = [m for m in sim.monolithic if m.spec.model == c.model]
            # instances whose KV holds the call by its estimate (else the largest one)
            cands = [m for m in serving if c.predicted_kv_tokens <= m.capacity] or [
                max(serving, key=lambda m: (m.capacity, -m.index))
            ]
            queued = [len(m.running) + len(m.waiting) + planned[m.index] for m in cands]
            n_in = c.input_tokens
            m = cands[
                _argmin_then(queued, lambda k, ms=cands, n=n_in: ms[k].latency.prefill_time(n))
            ]
            planned[m.index] += 1
            out.append(Assignment(c, c.revealed_at, m.index))
        return out


def _argmin_then(primary: list, secondary: Callable[..., float]) -> int:
    """The lexicographically smallest ``(primary[i], secondary(i), i)``'s index ``i``;
    ``secondary`` is only evaluated for the indices that tie on the smallest ``primary``."""
    low = min(primary)
    if primary.count(low) == 1:
        return primary.index(low)
    ties = [i for i, v in enumerate(primary) if v == low]
    return min(ties, key=lambda i: (secondary(i), i))


class EarliestFinishScheduler:
    """Earliest-estimated-finish placement, FCFS order; used to compute standalone horizons.

    For each call without a plan (in reveal order) it picks the (prefill, decode) pair — or the
    monolithic instance — minimising the estimated finish: the instance's queued work, the call's
    prefill, the KV transfer between the pair's GPU classes, and its decode at the decode
    instance's current batch size. With a single workflow on an empty cluster this is the
    heterogeneity-aware standalone placement that defines H_w (HexAgent §5.1, §7.3).
    """

    def plan(self, sim: SchedulerView, inv: Invocation) -> list[Assignment]:
        if inv.stage in ("decode", "migrate"):
            return []
        now = sim.now
        out: list[Assignment] = []
        if inv.stage == "prefill":
            prefill, decode = sim.prefill, sim.decode
            ready = [now + p.queued_work_seconds() for p in prefill]
            transfer = sim.cluster.kv_transfer
            extra_batch = [0] * len(decode)
            # transfer_time(kv_bytes, prefill GPU, decode GPU) = latency + kv_bytes / bandwidth;
            # the (prefill instance, decode instance) bandwidths, with the same arithmetic
            bandwidth, capacity = sim.estimates.kv_links()
            # KV bytes per prompt token leaving each prefill instance (its KV precision's)
            kv_per_token = np.array([p.latency.kv_bytes_per_token for p in prefill])
            all_decode = np.arange(len(decode))
            for c in inv.new_calls:
                out_tokens = c.predicted_output_tokens
                n_in = c.input_tokens
                holds = c.predicted_kv_tokens <= capacity
                if holds.all():
                    fits, links = all_decode, bandwidth
                else:
                    fits = np.flatnonzero(holds)
                    if fits.size == 0:
                        raise ValueError(
                            f"call {c.id} needs {c.predicted_kv_tokens} KV tokens, more than any "
                            "decode instance holds"
                        )
                    links = bandwidth[:, fits]
                p_end = np.array(
                    [ready[i] + p.latency.prefill_time(n_in) for i, p in enumerate(prefill)]
                )
                if out_tokens:
                    td = []
                    priced: dict[tuple[int, int], float] = {}  # (latency model, batch) -> s
                    for j in fits.tolist():
                        d = decode[j]
                        b = len(d.running) + len(d.waiting) + extra_batch[j] + 1
                        key = (id(d.latency), b)
                        t = priced.get(key)
                        if t is None:
                            t = priced[key] = d.latency.decode_steps_time(b, b * n_in, out_tokens)
                        td.append(t)
                    seconds = transfer.latency_s + (kv_per_token[:, None] * n_in) / links
                    finish = (p_end[:, None] + np.array(td)[None, :]) + seconds
                else:
                    finish = p_end[:, None] + np.zeros(fits.size)[None, :]
                # earliest estimated finish; ties: the first pair in (prefill, decode) order
                i, k = divmod(int(np.argmin(finish)), fits.size)
                j = int(fits[k])
                ready[i] += prefill[i].latency.prefill_time(n_in)
                extra_batch[j] += 1
                out.append(Assignment(c, c.revealed_at, prefill[i].index, decode[j].index))
            return out
        backlog = {m.index: 0.0 for m in sim.monolithic}
        for c in inv.new_calls:
            best_m: tuple[float, int] | None = None
            for m in sim.monolithic:
                if m.spec.model != c.model:
                    continue
                lat = m.latency
                t = backlog[m.index] + lat.prefill_time(c.input_tokens)
                if c.predicted_output_tokens:
                    b = len(m.running) + 1
                    t += lat.decode_steps_time(b, b * c.input_tokens, c.predicted_output_tokens)
                if best_m is None or t < best_m[0]:
                    best_m = (t, m.index)
            assert best_m is not None
            backlog[best_m[1]] += sim.instances[best_m[1]].latency.prefill_time(c.input_tokens)
            out.append(Assignment(c, c.revealed_at, best_m[1]))
        return out
