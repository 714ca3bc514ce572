"""Privileged teachers: experts that read what no deployable policy sees, used only to label
states for behaviour cloning / DAgger (ours; "learning by cheating", Chen et al. 2019).

A privileged teacher reads the simulator's truth (here a request's true output length), so it is
**not** a policy one could deploy and never appears among the non-learned policies a learned one
is compared with; the student it trains sees only the env's observation. Use one as a BC expert
through the plugin spec, e.g.::

    python train.py --env routing --bc-expert py:agents/teachers.py:routing_hindsight_triage

(``evaluate.py --policies py:agents/teachers.py:routing_hindsight_triage`` runs it as an oracle
reference.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from envs.routing.context import RoutingContext


class HindsightTriageRouter:
    """Routing-v0 teacher with the true output length (privileged; ours).

    At a route decision, for every feasible instance g: the true-length Eq. 2 estimate
    ``T_g = q_g + (L_in − H_rg)·p_g + L_out·d_g`` (GoodServe §3.3 with L_out for L̂_out) times
    ``margin``, and the request's run-alone latency ``A_g`` on g's GPU. g *can make it* if
    ``max(margin · T_g, A_g) ≤ slack``.

    * Some instance can make it: ``among``'s choice over those instances only (least-request by
      default: the fewest outstanding requests).
    * None can (the request is lost wherever it goes): triage -- the instance whose GPU is
      slowest for it alone (largest ``A_g``), ties by Preble's load, so that it takes capacity
      from no request that could still meet its SLO.

    At a migrate decision it stays (as Preble and least-request do), or with ``migrate`` moves
    a request that no longer makes it where it is to one where it would.

    Measured on training seeds 0–2 (default settings, 500 requests; Preble 0.891, least-request
    0.899): goodput 0.999 / 0.969 / 0.968 with ``margin`` 1.0 / 1.2 / 1.4 (``among`` Preble);
    ``among`` least-request 1.005, earliest-finish 0.994, just-enough (the slowest that can
    make it) 0.709; ``migrate`` 0.781 (Preble; one seed fell to 0.505) and 0.999
    (least-request). Chosen: margin 1, least-request, no migration -- the best, and a rule
    nearly linear in the student's features (``can make it``, outstanding requests).

    :param env: the Routing-v0 env it labels (possibly wrapped); read for the true lengths and
        the per-GPU run-alone models.
    :param margin: factor on the true-length estimate, ≥ 1.
    :param among: a Routing-v0 heuristic name (``heuristics``) or ``just-enough``.
    :param migrate: answer migrate decisions as above (else stay).
    """

    name = "hindsight-triage"

    def __init__(
        self, env: Any, margin: float = 1.0, among: str = "least-request", migrate: bool = False
    ):
        if not margin >= 1.0:
            raise ValueError(f"margin must be >= 1, got {margin!r}")
        from heuristics import make_policy

        self.env = env
        self.margin = float(margin)
        self.among_name = among
        # a Routing-v0 heuristic: it has choose(ctx) -> an index into ctx's instances
        self.among: Any = None if among == "just-enough" else make_policy(among)
        self.migrate = bool(migrate)
        self._alone: list[Any] | None = None

    def reset(self) -> None:
        self._alone = None

    def _base(self) -> Any:
        base = getattr(self.env, "unwrapped", self.env)
        if getattr(base, "sim", None) is None:
            raise RuntimeError(
                f"{self.name}: the env {type(base).__name__} has no running simulation; it "
                "teaches on servegym/Routing-v0 after reset()"
            )
        return base

    def _run_alone(self, base: Any) -> list[Any]:
        """Per instance, ``(L_in, L_out) -> seconds`` alone on its GPU (the SLO's own model)."""
        if self._alone is None:
            from envs.common.run_alone import RunAloneLatency
            from envs.sim.engines.presets import resolve_token_budget

            out = []
            for spec in base.cluster.instances:
                lat = base._latency_cache.get(spec, base.engine)
                budget = resolve_token_budget(base.engine, lat.gpu, base.token_budget)
                out.append(RunAloneLatency(lat, base.prefill_mode, budget))
            self._alone = out
        return self._alone

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        from heuristics.routing.base import argmin_lex, feasible_indices, routing_context
        from heuristics.routing.routers import preble_load

        ctx: RoutingContext = routing_context(info)
        if ctx.kind == "migrate" and not self.migrate:
            return int(ctx.current)
        base = self._base()
        call = base._queue[0]
        if call.id != ctx.call_id:
            raise RuntimeError(
                f"{self.name}: the env's pending call {call.id!r} is not the context's "
                f"{ctx.call_id!r}"
            )
        out_tokens = self._length(base, ctx, call)
        feasible = feasible_indices(ctx)
        alone = self._run_alone(base)
        if ctx.kind == "migrate":
            return self._migrate(ctx, call, feasible, alone)
        a = np.array([alone[g](ctx.input_tokens, out_tokens) for g in range(len(alone))])
        missed = np.maximum(0.0, ctx.input_tokens - ctx.prefix_hit_tokens)
        est = ctx.q + missed * ctx.p + out_tokens * ctx.d
        can = feasible[np.maximum(self.margin * est[feasible], a[feasible]) <= ctx.slack]
        if can.size:
            return self._choose(ctx, can)
        slowest = feasible[a[feasible] == a[feasible].max()]
        return argmin_lex(ctx, slowest, [preble_load(ctx)])

    def _length(self, base: Any, ctx: RoutingContext, call: Any) -> int:
        """The request's output length: the truth (privileged)."""
        return int(call.output_tokens)

    def _migrate(self, ctx: RoutingContext, call: Any, feasible: np.ndarray, alone: list) -> int:
        """Stay if the request still makes it where it is (true remaining length); else move it
        to an instance where it would (``among``'s choice there); else stay."""
        rem_true = max(1, int(call.output_tokens) - int(ctx.generated))
        est = ctx.estimate + (rem_true - ctx.predicted_remaining_tokens) * ctx.d
        if self.margin * est[ctx.current] <= ctx.slack:
            return int(ctx.current)
        prompt = ctx.input_tokens + ctx.generated
        a = np.array([alone[g](prompt, rem_true) for g in range(len(alone))])
        others = feasible[feasible != ctx.current]
        can = others[np.maximum(self.margin * est[others], a[others]) <= ctx.slack]
        if can.size:
            return self._choose(ctx, can)
        return int(ctx.current)

    def _choose(self, ctx: RoutingContext, can: np.ndarray) -> int:
        """``among``'s pick of the instances ``can``; ``just-enough``: the slowest of them
        (largest capability seconds), ties by Preble's load."""
        from heuristics.routing.base import argmin_lex
        from heuristics.routing.routers import preble_load

        if self.among is None:
            cap = np.asarray(ctx.capability)[can]
            return argmin_lex(ctx, can[cap == cap.max()], [preble_load(ctx)])
        return int(can[self.among.choose(_restricted(ctx, can))])


def _restricted(ctx: RoutingContext, keep: np.ndarray) -> RoutingContext:
    """``ctx`` with only the instances ``keep`` (per-instance arrays sliced, the rest shared)."""
    from dataclasses import fields, replace

    m = ctx.num_instances
    changes = {}
    for f in fields(ctx):
        v = getattr(ctx, f.name)
        if isinstance(v, np.ndarray) and v.shape[:1] == (m,):
            changes[f.name] = v[keep]
        elif isinstance(v, list) and len(v) == m:
            changes[f.name] = [v[i] for i in keep]
    changes["current"] = -1
    return replace(ctx, **changes)


class ImpliedTriageRouter(HindsightTriageRouter):
    """:class:`HindsightTriageRouter`'s rule on the length the deadline implies instead of the
    true one: ``L̂_out · ρ`` with ρ of ``observation="extended"``
    (:class:`envs.routing.observation.ExtendedObservationMixin`), from the request's SLO, its
    prompt and the public run-alone model of the SLO's reference GPU. **Not privileged**: a
    hand-written rule on the per-request SLO's leak (``slo_basis="request"``), written to measure
    how much of a learned router's gain that leak explains (docs/training.md, "Learned policies
    (shipped)"). Registered as ``implied-triage`` (``evaluation.policies.ENV_REFERENCES``), an
    own reference of the Routing-v0 tables. Route decisions only (it stays at migrate ones)."""

    name = "implied-triage"

    def _length(self, base: Any, ctx: RoutingContext, call: Any) -> int:
        from envs.routing.observation import RHO_MAX

        ref = base._run_alone
        predicted = max(1, int(ctx.predicted_output_tokens))
        first = ref(ctx.input_tokens, 1)
        decode_pred = ref(ctx.input_tokens, predicted) - first
        implied = ctx.slo / base.slo_scale - first
        rho = float(np.clip(implied / decode_pred, 0.0, RHO_MAX)) if decode_pred > 0 else 1.0
        return max(1, int(round(rho * predicted)))


def routing_implied_triage(env: Any) -> ImpliedTriageRouter:
    """Plugin factory (``py:agents/teachers.py:routing_implied_triage``): see
    :class:`ImpliedTriageRouter`."""
    return ImpliedTriageRouter(env)


def routing_hindsight_triage(env: Any) -> HindsightTriageRouter:
    """Plugin factory (``py:agents/teachers.py:routing_hindsight_triage``): see
    :class:`HindsightTriageRouter`."""
    return HindsightTriageRouter(env)


class PerWorkloadTeacher:
    """An expert per workload: labels each episode with the policy named for the workload the
    env runs (read off the unwrapped env's ``workload``, which a :class:`agents.randomize.
    DomainRandomized` redraw changes, or its trace source's). Not privileged: each expert it
    delegates to is a registered heuristic. Used to clone the best heuristic of each training
    workload (DAgger from the best heuristic rather than the paper's alone).

    :param env: the env it labels (possibly wrapped).
    :param experts: workload name -> policy spec (``evaluation.resolve_policy``).
    :param env_name: the env family (``pd-cluster``).
    """

    def __init__(self, env: Any, experts: dict[str, str], env_name: str):
        if not experts:
            raise ValueError("PerWorkloadTeacher needs at least one workload -> expert entry")
        self.env = env
        self.experts = dict(experts)
        self.env_name = env_name
        self.name = "per-workload(" + ",".join(f"{w}:{p}" for w, p in experts.items()) + ")"
        self._current: tuple[str, Any] | None = None

    def reset(self) -> None:
        self._current = None

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        from evaluation.policies import resolve_policy

        base = getattr(self.env, "unwrapped", self.env)
        workload = getattr(base, "workload", None)
        if workload is None:  # Routing-v0 keeps it on its trace source
            workload = getattr(getattr(base, "_source", None), "workload", None)
        if workload not in self.experts:
            raise ValueError(
                f"{self.name}: the env runs workload {workload!r}, which has no expert; "
                f"known: {sorted(self.experts)}"
            )
        if self._current is None or self._current[0] != workload:
            policy = resolve_policy(self.experts[workload], self.env, self.env_name)
            policy.reset()
            self._current = (workload, policy)
        return int(self._current[1].act(obs, info))


def pd_best_heuristic(env: Any) -> PerWorkloadTeacher:
    """Plugin factory (``py:agents/teachers.py:pd_best_heuristic``): on PDCluster, the best
    non-learned policy of each training workload at 40 workflows on training seeds --
    workflow-FCFS + earliest finish on BFCL, HexAgent on Mixed (docs/training.md, "Learned
    policies (shipped)"). Both act in either action space (in v1's two-step space a slot step,
    then a pair step, never keep), so they label v0 and v1 states alike. At 100 workflows
    HexAgent is the best on both workloads and workflow-FCFS starves short workflows; a clone
    of this teacher does too (checkpoints/pd-cluster/README.md)."""
    return PerWorkloadTeacher(
        env, {"bfcl": "workflow-fcfs+earliest-finish", "mixed": "hexagent"}, "pd-cluster"
    )
