"""``servegym/PDCluster-v0``: HexAgent's P-D cluster scheduling as a Gymnasium MDP (the spec is
the :class:`PDClusterEnv` docstring).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from gymnasium import spaces

from envs.common.base import ServegymEnv
from envs.common.options import takes_options
from envs.common.predictors.feed import PredictorFeed
from envs.common.rewards import make_reward
from envs.common.workloads import TraceSource
from envs.pd_cluster.actions import (
    KEEP,
    action_count,
    check_action_space,
    explain_flat,
    explain_two_step,
    two_step_mask,
)
from envs.pd_cluster.builder import ContextBuilderMixin, OpenNodes
from envs.pd_cluster.context import DecisionContext
from envs.pd_cluster.observation import ObservationMixin, observation_space
from envs.pd_cluster.options import (
    PDClusterOptions,
    check_planning_delay,
    episode_observations,
    prefix_cache_blocks,
)
from envs.pd_cluster.projection import (
    DecodeProjectionMixin,
)
from envs.pd_cluster.results import ResultsMixin
from envs.pd_cluster.workloads import DEFAULT_MODEL, PAPER_WORKLOADS
from envs.sim.core.scheduler import DefaultScheduler
from envs.sim.core.simulation import (
    Assignment,
    Invocation,
    LatencyCache,
    Simulation,
)
from envs.sim.core.workflows import Call
from envs.sim.hardware.cluster import ClusterSpec, load_cluster


@takes_options(PDClusterOptions)
class PDClusterEnv(
    ContextBuilderMixin, DecodeProjectionMixin, ObservationMixin, ResultsMixin, ServegymEnv
):
    """HexAgent's P-D cluster scheduling problem as a Gymnasium MDP (``servegym/PDCluster-v0``).

    ## Description

    Online-revealed agentic workflows (DAGs of LLM calls and tools) arrive at a heterogeneous
    prefill–decode disaggregated cluster. The policy places each waiting call on a (prefill,
    decode) instance pair and orders the calls in the instances' local queues (HexAgent §4–§5).
    The objective is the tail of C_w / H_w, a workflow's completion time over its standalone
    horizon: Req95 and Req99, lower is better.

    Scheduler *invocations* are raised when work enters a stage (HexAgent §4.3, §5.2): workflow
    arrival and child-call reveal (prefill stage), KV-transfer completion (decode stage). An
    invocation re-plans the calls still waiting at that stage, **one call per step**, for at most
    K of them (``slots``). The K are the oldest by the canonical order, reveal time (a neutral
    order: it favours no policy's priority rule, and a call cannot starve beyond K because it
    only gets older). Calls beyond K keep their plan and their relative queue order, behind this
    invocation's picks; those without a plan take the fallback's (least-loaded placement,
    :class:`envs.sim.core.scheduler.DefaultScheduler`). The k-th call picked in an invocation gets
    queue priority k. A call that started service never moves. The simulator advances only when
    the invocation's slots are all picked (Decima's pattern).

    ## Action Space

    ``action_space="two-step"`` (PDCluster-v1): ``Discrete(max(K + 1, P · D))``, a *slot step*
    (slot ``k < K``, or ``K``: keep, which ends the invocation and leaves the calls not picked on
    their plans) then, at the prefill stage, a *pair step* (``p · D + d``); see
    :mod:`envs.pd_cluster.actions`. A masked action becomes the fallback's choice for the
    pending step. ``DecisionContext.selected_slot`` and ``DecisionContext.action`` let the
    experts act in either space with the same picks.

    ``action_space="flat"`` (PDCluster-v0): ``Discrete(K · P · D)``: action
    ``a = k·P·D + p·D + d`` picks slot ``k`` and, at the prefill stage, prefill instance ``p`` and
    decode instance ``d``
    (pool-local indices, in cluster order). At the decode stage the call is locked to its planned
    pair: the only legal action for slot ``k`` is its own ``(p, d)``. ``action_masks()`` (also
    ``info["action_mask"]``) marks legal actions: valid, not yet picked slots, and decode KV
    feasibility m(c) = L_in + L̂_out ≤ Cap(d) (HexAgent §5.4 Eq. 3–4). It is never all-false while a
    decision is pending; on the step that ends the episode it marks action 0 alone.

    A masked action is replaced by the fallback's choice (:meth:`PDClusterEnv.fallback_action`:
    the oldest unpicked slot on the simulator's least-loaded pair) with a penalty, and flagged in
    ``info["invalid_action"]``; ``invalid_action="raise"`` raises instead (the shared rule of
    :mod:`envs.common.base`).

    ## Observation Space

    A ``Dict`` of ``float32`` boxes; all padded entries are 0:

    * ``slots``, shape (K, 12): per waiting call: valid, picked, log1p(L_in)/10,
      log1p(L̂_out)/10, elapsed/H_w(t) (≤10)/10, log1p(H_w(t))/5, log1p(elapsed)/5, log1p(time
      since reveal)/5, has plan, workflow finished/revealed calls, log1p(attained service)/5,
      the best projected ratio log1p(min R)/5
    * ``instances``, shape (P + D, 9): per instance: is prefill, log1p(prefill ms per 1k
      tokens)/5, log1p(decode step ms at batch 1)/5, log1p(ready-in s)/5, queued calls/16, KV
      used fraction (incl. this invocation's picks), batch incl. picks/64, running batch/64,
      usable memory (TB)
    * ``ratio``, shape (K, P, D), flat space only: log1p of the projected ratio R(c, p, d),
      clipped to [0, 5]
    * ``stage``, shape (3,): is prefill stage, is decode stage, picks made / K
    * ``step``, shape (2,), two-step only: is slot step, is pair step
    * ``selected``, shape (K,), two-step only: one-hot of the slot whose pair step is pending (0
      at a slot step)
    * ``pair``, shape (P, D), two-step only: that slot's row of ``ratio`` (0 at a slot step)

    The two-step space's slot step reads each call's best ratio (``slots`` column 11), its pair
    step the selected call's ``pair``.

    R(c, p, d) = ((t − a_w) + Δ(c, p, d)) / H_w(t) (HexAgent §5.1 Eq. 2), where Δ is the
    projected time to finish the stage: at the prefill stage the wait for p, the prefill, the KV
    transfer, the decode-queue wait on d and the decode on d; at the decode stage the
    decode-queue wait and the decode on d. The decode-queue wait lasts until the earliest
    capacity-feasible start on d's KV-occupancy timeline (HexAgent §5.4; ``decode_free_at`` in
    :class:`DecisionContext`). It is computed on the simulated state *including the picks
    already made in this invocation* (HexAgent Algorithm 1 line 20; a pick adds its
    KV-occupancy interval on d), from scheduler-visible estimates only (predicted output
    lengths, estimate-error-scaled times).

    With ``observations=False`` (for policies that read only the decision context) every entry
    is 0 and none of it is computed. With ``decision_context=True`` every step's
    ``info["decision_context"]`` is the structured scheduler-visible state
    (:class:`DecisionContext`) that experts act on (``env.decision_context()`` returns it either
    way).

    ## Rewards

    ``reward=`` names one of :mod:`envs.common.rewards`:

    * ``"slowdown"`` (default): when a workflow finishes, −(C_w/H_w)^p / N (``reward_kwargs``
      ``p``, default 4). The episode return is exactly −Σ_w (C_w/H_w)^p / N ≤ −1 (C_w ≥ H_w),
      a smooth surrogate of the tail (p → ∞ approaches max C_w/H_w).
    * ``"lateness"``: when a workflow finishes, −max(0, C_w/H_w − α)/N (default α = 2);
      return in (−∞, 0].
    * ``"req99"``: 0 until the end, then −Req99 (terminal, sparse; ≤ −1).

    Workflows unfinished at truncation are charged with their elapsed time as C_w. A masked
    action costs −``invalid_penalty`` (1.0) on top.

    ## Starting State

    ``reset(seed=...)`` draws a workload (generator ``workload`` seeded from the reset seed or
    ``workload_seed``, or the given ``trace``), computes every workflow's standalone horizon
    H_w, builds the cluster with empty queues and runs the simulator to the first decision: the
    first workflow's arrival.

    ## Episode End

    The episode terminates when every workflow finishes; it is truncated after ``max_steps``
    steps (None: no limit). Each call takes two steps (one at the prefill stage, one at the
    decode stage) in every invocation that re-plans it, so at the defaults (``hetero-1``,
    Llama-3.1-70B, the ``mixed`` workload: 100 workflows at 10/s) an episode is tens of
    thousands of steps (56,197 with the fallback policy at seed 0). At episode end ``info``
    carries ``metrics`` (Req95, Req99, ... from :mod:`envs.sim.core.metrics`), ``attainment_curve``,
    ``completion_times``, ``horizons``, ``invocations``, ``utilisation``. Every step's
    ``info["metrics"]`` holds the metrics as if the episode ended now (unfinished workflows:
    C_w = inf), so a ``TimeLimit`` cut reports them too.

    ## Arguments

    Every option is a keyword of the constructor and a field of
    :class:`~envs.pd_cluster.options.PDClusterOptions`
    (``options=`` takes a whole one); the table is generated from that dataclass.

    <!-- arguments-table -->

    ## Vectorized use

    ``gymnasium.make_vec("servegym/PDCluster-v0", num_envs=4, vectorization_mode="async")`` and
    SB3's ``SubprocVecEnv`` run independent copies; each copy's mask is
    ``vec_env.call("action_masks")`` (Gymnasium) or ``vec_env.env_method("action_masks")`` (SB3,
    what sb3-contrib's ``MaskablePPO`` reads). The action and observation shapes depend on
    ``cluster`` (P, D) and ``slots`` (K): every copy of a vector env must use the same ones.

    ## Version History

    * v1: ``action_space="two-step"``. v0's flat ``Discrete(16384)`` (K = 256, hetero-1) runs
      sb3-contrib MaskablePPO with its stock ``MultiInputPolicy`` at 71–72 steps/s on 2 quiet
      cores; two-step (heads K + 1 and P·D wide, the selected call's (P, D) ``pair`` instead of
      the (K, P, D) ``ratio``) at 526–539, 7.4× in the same runs (docs/envs/v1-changes.md,
      ``python -m benchmarks.pd_action_space``). A
      default episode (hetero-1, ``mixed``, 100 workflows) of a uniformly random legal action is
      44–46 k steps (seeds 0–1; v0: 43 k); placing only new calls, then keeping: 9.2 k. HexAgent
      re-plans every waiting call (Algorithm 1), never keeps: 88.5 k steps in v0, 173 k in v1
      (seed 0); 82 k of its v0 picks re-pick planned prefill-stage calls, which keep lets a
      policy decline. Every expert and baseline makes the same decisions in both spaces.
    * v0: one flat ``Discrete(K · P · D)`` step per pick.

    ## References

    HexAgent (§4.2 roofline, §4.3 invocations and the fallback, §5.1 Eq. 2 projected ratio, §5.2
    Algorithm 1, §5.4 decode feasibility, §7.1 setup, §7.6 estimate error); see the references
    page of the documentation for full citations.
    """

    metadata = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    def __init__(self, options: PDClusterOptions | None = None, **kwargs: Any) -> None:
        o = self.env_options = PDClusterOptions.build(options, kwargs)
        cluster, model, workload, trace = o.cluster, o.model, o.workload, o.trace
        workload_count, workload_rate, load_scale = o.workload_count, o.workload_rate, o.load_scale
        output_predictor, tool_estimate, slots = o.output_predictor, o.tool_estimate, o.slots
        prefix_cache, observations = o.prefix_cache, o.observations
        action_space = o.action_space

        super().__init__()
        self.cluster = (
            cluster
            if isinstance(cluster, ClusterSpec)
            else load_cluster(cluster, model=model or DEFAULT_MODEL)
        )
        if self.cluster.architecture != "pd":
            raise ValueError(
                f"PDCluster needs a prefill-decode ('pd') cluster; {self.cluster.name!r} is "
                f"{self.cluster.architecture!r}"
            )
        self.tool_estimate = tool_estimate
        self.planning_delay, self.planning_delay_scale = check_planning_delay(
            o.planning_delay, o.planning_delay_scale
        )
        self.model = self.cluster.models[0]
        self.workload = workload
        self.trace = trace
        self.workload_count = workload_count
        self.workload_rate = workload_rate
        self.load_scale = load_scale
        self._source = TraceSource(
            workload,
            trace,
            count=workload_count,
            rate=workload_rate,
            load_scale=load_scale,
            model=self.model,
            paper_rates={k: v[1] for k, v in PAPER_WORKLOADS.items()},
            model_override=model if trace is not None else None,
        )
        self.K = slots
        self.estimate_error = o.estimate_error
        self.output_predictor_name = output_predictor
        self._prefix_cache_blocks = prefix_cache_blocks(prefix_cache)
        self.prefix_cache = prefix_cache
        self.prefix_cache_visible = bool(o.prefix_cache_visible)
        # schedulers price prefills with the cache's hits
        self._prefix_visible = bool(self._prefix_cache_blocks) and self.prefix_cache_visible

        self.P = len(self.cluster.by_role("prefill"))
        self.D = len(self.cluster.by_role("decode"))
        self.action_space_name = check_action_space(action_space)
        self.action_space = spaces.Discrete(
            action_count(self.action_space_name, self.K, self.P, self.D)
        )
        self._selected = -1  # two-step: the slot whose pair step is pending
        self._observe_default = self._observe = bool(observations)
        self._cross: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # see _cross_rows
        self.observation_space = observation_space(self.K, self.P, self.D, action_space)
        self._latency_cache = LatencyCache(calibration_variant=o.latency_calibration)
        self._horizon_cache: dict[Any, float] = {}
        self.sim: Simulation | None = None
        self._ctx: DecisionContext | None = None
        self._init_common(
            o.reward,
            o.reward_kwargs,
            o.invalid_action,
            o.invalid_penalty,
            o.max_steps,
            o.workload_seed,
            o.render_mode,
            o.decision_context,
        )

    # -- gymnasium API -----------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        self._observe = episode_observations(options, self._observe_default, self.RESET_OPTIONS)
        records = self._begin_episode(seed, self._source)
        wseed = self._workload_seed
        # "oracle" keeps the simulator's own estimate: the truth with HexAgent §7.6's error.
        predictor = None
        if self.output_predictor_name != "oracle":
            from envs.common.predictors import make_predictor

            predictor = make_predictor(self.output_predictor_name, error=self.estimate_error)
            predictor.reset(seed=wseed)
        self._predictor = predictor
        self.sim = Simulation(
            self.cluster,
            records,
            seed=wseed,
            estimate_error=self.estimate_error,
            output_predictor=predictor,
            latency_cache=self._latency_cache,
            horizon_cache=self._horizon_cache,
            prefix_cache_blocks=self._prefix_cache_blocks,
            tool_estimate=self.tool_estimate,
        )
        if predictor is not None:
            self.sim.add_listener(PredictorFeed(predictor))
        self._reward = make_reward(self.reward_name, len(self.sim.runs), **self.reward_kwargs)
        self._arrival_times = np.sort([run.arrival for run in self.sim.runs])
        self._cluster_tables()
        self._completed_seen = 0
        self._remaining_cache: dict[int, OpenNodes] = {}
        self._planning_wall: list[float] = []  # measured wall seconds per plan ("measured")
        self._step_metrics: tuple[Any, dict[str, float]] | None = None  # see _metrics_so_far
        self._selected = -1
        inv = self._advance()
        if inv is None:
            raise ValueError("the workload is empty: no scheduling decision ever arises")
        self._two_step_mask()
        return self._observation(), self._info()

    #: Keys ``reset(options=...)`` accepts: ``observations`` (True / False) overrides the
    #: constructor's ``observations`` for that episode (``evaluation.runs`` turns observations
    #: off for a policy that reads only the decision context).
    RESET_OPTIONS = ("observations",)

    def step(self, action: int) -> tuple[dict[str, np.ndarray], float, bool, bool, dict[str, Any]]:
        if self.sim is None or self._ctx is None:
            raise RuntimeError("call reset() before step()")
        action, reward = self._legal_action(action)
        pick = self._decode_action(action)
        self._steps += 1
        inv: Invocation | None
        if pick is None:  # two-step: a slot chosen, its pair step next (nothing changes yet)
            inv = self.sim.pending[0]
        elif pick == KEEP:  # two-step: the calls not picked keep their plans
            picked, slotted = self._ctx.picked, self._slot_calls
            self._rest = [c for k, c in enumerate(slotted) if not picked[k]] + self._rest
            self._finish_invocation()
            inv = self._advance()
        else:
            self._pick(*pick)
            if not self._slot_pending():
                self._finish_invocation()
                inv = self._advance()
            else:
                inv = self.sim.pending[0]
                assert len(pick) == 3  # KEEP, the empty pick, took the branch above
                self._refresh(pick)
        self._two_step_mask()
        reward += self._collect_rewards()
        terminated = inv is None
        truncated = self._truncated(terminated, self._steps)
        if terminated or truncated:
            reward += self._reward.terminal(self._ratios())
        if truncated and not terminated:
            reward += self._reward.on_truncate(self._unfinished_ratios())
        obs = self._observation() if not terminated else self._terminal_observation()
        info = self._info(final=terminated or truncated)
        return obs, float(reward), terminated, truncated, info

    def _decode_action(self, action: int) -> tuple[int, int, int] | None | tuple[()]:
        """The pick a legal action makes: (slot, p, d); in the two-step space None after a
        prefill-stage slot step (its pair step is next) and :data:`KEEP` for the keep action."""
        ctx = self._ctx
        assert ctx is not None
        if self.action_space_name == "flat":
            return ctx.unflatten(action)
        if self._selected >= 0:
            slot, self._selected = self._selected, -1
            return (slot, *divmod(action, self.D))
        if action == self.K:
            return KEEP
        if ctx.stage == "decode":
            return (action, int(ctx.planned_prefill[action]), int(ctx.planned_decode[action]))
        self._selected = action
        return None

    def _two_step_mask(self) -> None:
        """Two-step space: the pending step's mask (the projection leaves a flat one)."""
        if self.action_space_name == "flat" or self._ctx is None:
            return
        self._ctx.selected_slot = self._selected
        self._mask = two_step_mask(self._feasible, self._selected, int(self.action_space.n))

    # -- invocation machinery ----------------------------------------------------------------
    def _advance(self) -> Invocation | None:
        assert self.sim is not None
        inv = self.sim.advance()
        if inv is not None:
            self._raised_at = time.perf_counter()  # planning starts: see ``planning_delay``
            self._begin_invocation(inv)
        else:
            self._ctx = None
            # a new array: the last context's ``feasible`` (the old mask's base) keeps its values
            self._end_mask()
        return inv

    def _begin_invocation(self, inv: Invocation) -> None:
        sim = self.sim
        assert sim is not None
        # Canonical order: reveal order (the simulator lists waiting calls oldest first). The K
        # oldest are re-planned; newer ones wait behind them, so no call starves beyond K.
        order = inv.calls
        self._inv = inv
        self._obs_slots: np.ndarray | None = None
        self._slot_calls: list[Call] = list(order[: self.K])
        self._rest: list[Call] = list(order[self.K :])
        self._build_context(inv)
        self._owned_refs = self._refcounts()  # see _unshare; no local names hold them here

    def _pick(self, slot: int, p: int, d: int) -> None:
        ctx = self._ctx
        assert ctx is not None
        ctx.picked[slot] = True
        ctx.picks.append((slot, p, d))
        self._open -= 1
        self._open_legal -= 1  # the slot had a legal action: it was just taken
        prefill = ctx.stage == "prefill"
        # The pick's KV-occupancy interval on d (Algorithm 1 line 20): from its projected start,
        # max(arrival, earliest capacity-feasible start) — the start its R used — for its
        # projected decode seconds. ``_base`` still holds the arrival at p's old readiness.
        start = max(float(self._base[p, d, slot]), float(self._free_at[d, slot]))
        end = start + float(self._dec_t[d, slot])
        self._iv_picks[d].append([start, end, float(self._demand[slot])])
        self._iv[d] = self._bp[d] = None
        if prefill:
            self._ready[p] += float(self._pre[slot, p])
        else:
            self._floor[d] = start
        self._kv_used[d] += float(self._lin[slot] + self._lout[slot])
        self._batch[d] += 1
        self._ctx_tokens[d] += float(self._lin[slot])
        self._decode_rate(d)
        if self._obs_slots is not None:
            # What the pick changes in the observation's per-slot and per-instance features.
            self._obs_slots[slot, 1] = 1.0
            inst, P = self._obs_inst, self.P
            if prefill:
                inst[p, 3] = np.log1p(self._ready[p]) / 5
            inst[P + d, 5] = min(self._kv_used[d] / self._cap[d], 10.0)
            inst[P + d, 6] = min(self._batch[d], 640) / 64

    def _slot_pending(self) -> bool:
        return self._open > 0

    def _finish_invocation(self) -> None:
        """Turn the picks into a plan: picks get priority 0..k−1; the rest keep placement and
        relative order behind them, or take the fallback's placement (HexAgent §4.3)."""
        sim = self.sim
        ctx = self._ctx
        assert sim is not None and ctx is not None
        inv = self._inv
        assert inv is not None
        plan: list[Assignment] = []
        decode_stage = inv.stage == "decode"
        for rank, (slot, p, d) in enumerate(ctx.picks):
            c = self._slot_calls[slot]
            if decode_stage:
                plan.append(Assignment(c, float(rank)))
            else:
                plan.append(Assignment(c, float(rank), sim.prefill[p].index, sim.decode[d].index))
        base = float(self.K)
        if decode_stage:
            rest = sorted(self._rest, key=lambda c: (c.decode_priority, c.enqueue_seq))
            plan += [Assignment(c, base + i) for i, c in enumerate(rest)]
        else:
            planned = [c for c in self._rest if c.prefill_instance is not None]
            planned.sort(key=lambda c: (c.prefill_priority, c.enqueue_seq))
            fresh = [c for c in self._rest if c.prefill_instance is None]
            for i, c in enumerate(planned):
                plan.append(Assignment(c, base + i, c.prefill_instance, c.decode_instance))
            if fresh:
                fake = Invocation(inv.stage, inv.time, inv.trigger, fresh, fresh, inv.seq)
                fb = DefaultScheduler().plan(sim, fake)
                off = base + len(planned)
                plan += [
                    Assignment(a.call, off + i, a.prefill_instance, a.decode_instance)
                    for i, a in enumerate(fb)
                ]
        delay = self._planning_delay()
        if delay > 0:
            sim.apply(plan, delay=delay)
        else:
            sim.apply(plan)  # blocking: the plan applies at the invocation's instant

    def _planning_delay(self) -> float:
        """Seconds of simulated time the plan of the invocation being finished takes to land
        (``planning_delay``); records the episode's planning statistics."""
        mode = self.planning_delay
        if mode is None:
            return 0.0
        if mode == "measured":
            wall = time.perf_counter() - self._raised_at
            self._planning_wall.append(wall)
            return wall * self.planning_delay_scale
        return float(mode)

    def fallback_action(self) -> int:
        """The fallback policy's choice (what a masked action becomes): the oldest unpicked slot
        (the canonical order) on the simulator's least-loaded pair
        (:class:`envs.sim.core.scheduler.DefaultScheduler`): among the slot's legal pairs, the
        prefill instance ready soonest, then the decode instance with the smallest KV load
        fraction, then the lowest indices. At the decode stage, the slot's locked pair."""
        ctx = self._ctx
        assert ctx is not None
        legal = self._feasible
        slot = self._selected
        if slot < 0:
            slot = int(np.flatnonzero(legal.any(axis=(1, 2)))[0])
        ps, ds = np.nonzero(legal[slot])
        load = ctx.decode_kv_used / ctx.decode_kv_capacity
        best = min(
            zip(ps.tolist(), ds.tolist(), strict=True),
            key=lambda pd: (ctx.prefill_ready[pd[0]], load[pd[1]], pd[0], pd[1]),
        )
        return ctx.action(slot, *best)

    def _explain_invalid(self, action: int) -> str:
        ctx = self._ctx
        assert ctx is not None
        n = int(self.action_space.n)
        if self.action_space_name == "flat":
            return explain_flat(ctx, action, n)
        why = explain_two_step(ctx, action, self._selected, n, self.D)
        return f"masked action {action}: {why}. Use env.action_masks()."

    # -- rendering (:mod:`envs.pd_cluster.render`) ------------------------------------------------
    def _render_ansi(self) -> str:
        from envs.pd_cluster.render import render_ansi

        return render_ansi(self)

    def _render_figure(self) -> Any:
        from envs.pd_cluster.render import render_figure

        return render_figure(self)
