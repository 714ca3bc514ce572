"""Policy resolution: a heuristic registered for the env, or ``<prefix>:<argument>`` for a
loader in :data:`POLICY_LOADERS` (``ckpt:PATH``: a saved SB3 model; ``alloc:PATH``: an
Allocation-v0 allocation file; ``py:MODULE:FACTORY``: an outside policy); and what the
reference is compared against (:func:`comparison_sets`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from envs.common.base import did_you_mean
from envs.registry import FAMILIES, EnvFamily, policy_family
from evaluation.config import EvaluationError


class Policy(Protocol):
    """The protocol every policy follows (docs/design.md, "Policies")."""

    name: str

    def reset(self) -> None: ...

    def act(self, obs: Any, info: dict[str, Any]) -> int: ...


def load_checkpoint_policy(path: str, env: Any) -> Policy:
    """``ckpt:PATH``: a saved SB3 model, acting by argmax over legal actions
    (:func:`agents.checkpoint.load_policy`)."""
    from agents.checkpoint import load_policy

    try:
        return load_policy(path, env)
    except (FileNotFoundError, ValueError) as exc:
        raise EvaluationError(f"policy 'ckpt:{path}': {exc}") from exc


def load_allocation_policy(path: str, env: Any) -> Policy:
    """``alloc:PATH``: a user-specified Allocation-v0 allocation from a YAML file (see
    :meth:`heuristics.allocation.FixedAllocation.from_yaml`), the same every period."""
    from envs.sim.allocation.allocations import AllocationError
    from heuristics.allocation import FixedAllocation

    if policy_family(env_name_of(env) or "") != "allocation":
        raise EvaluationError(f"alloc:{path}: allocation files apply to --env allocation only")
    try:
        return FixedAllocation.from_yaml(path)
    except AllocationError as exc:
        raise EvaluationError(str(exc)) from exc


def load_plugin_policy(argument: str, env: Any) -> Policy:
    """``py:MODULE:FACTORY`` or ``py:FILE.py:FACTORY``: an outside policy built by a factory
    (:mod:`heuristics.plugins`)."""
    from heuristics.plugins import PluginError, make_plugin_policy

    try:
        return make_plugin_policy(argument, env)
    except PluginError as exc:
        raise EvaluationError(str(exc)) from exc


#: Policy-spec prefixes (``<prefix>:<argument>``) -> loader(argument, env).
POLICY_LOADERS: dict[str, Callable[[str, Any], Policy]] = {
    "ckpt": load_checkpoint_policy,
    "alloc": load_allocation_policy,
    "py": load_plugin_policy,
}


#: Registered references that need the env itself, not only the decision context: name ->
#: ``MODULE:FACTORY`` of a factory called with the env (:mod:`heuristics.plugins`).
#: ``implied-triage`` is the per-request SLO basis's leak as a rule: it recovers the true output
#: length from the deadline with the public run-alone model of the SLO's reference GPU
#: (:class:`agents.teachers.ImpliedTriageRouter`), so a Routing table on that basis shows what
#: the leak alone is worth.
ENV_REFERENCES: dict[str, str] = {"implied-triage": "agents.teachers:routing_implied_triage"}


def env_name_of(env: Any) -> str | None:
    """The :data:`FAMILIES` name of a Gymnasium env (from its ``spec.id``), or None."""
    gym_id = getattr(getattr(env, "spec", None), "id", None)
    return next((name for name, e in FAMILIES.items() if e.gym_id == gym_id), None)


def heuristic_names(spec: str = "", env_name: str | None = None) -> tuple[str, ...]:
    """Names of the heuristics that act in ``env_name`` (all of them if None), imported lazily
    (heuristics build on envs).

    :param spec: the policy being resolved, named in the error if the import fails.
    """
    try:
        from heuristics import POLICIES, policies_for
    except ImportError as exc:
        raise EvaluationError(
            f"policy {spec!r}: cannot import the heuristics package: {exc}"
        ) from exc
    return tuple(POLICIES) if env_name is None else policies_for(policy_family(env_name))


def resolve_policy(spec: str, env: Any, env_name: str | None = None) -> Policy:
    """Build a fresh policy from its spec.

    :param spec: a heuristic name (``hexagent``, ``goodserve``, ...) or ``<prefix>:<argument>``
        with a prefix in :data:`POLICY_LOADERS` (``ckpt:PATH``).
    :param env: the env the policy will act in (loaders may need its spaces).
    :param env_name: its :data:`FAMILIES` name (None: read off ``env.spec.id``); only heuristics
        registered for it are accepted.
    :raises EvaluationError: unknown name or prefix, a heuristic of another env, or a loader
        that cannot load ``spec``.
    """
    prefix, sep, argument = spec.partition(":")
    if sep:
        if prefix not in POLICY_LOADERS:
            raise EvaluationError(
                f"unknown policy prefix {prefix!r} in {spec!r}; known: "
                f"{', '.join(p + ':' for p in sorted(POLICY_LOADERS))}"
            )
        return POLICY_LOADERS[prefix](argument, env)
    if spec in ENV_REFERENCES:
        return load_plugin_policy(ENV_REFERENCES[spec], env)
    env_name = env_name or env_name_of(env)
    known = heuristic_names(spec, env_name)
    if spec not in known:
        from heuristics import POLICY_ENVS

        owner = POLICY_ENVS.get(spec)
        if env_name and owner is not None and owner != env_name:
            raise EvaluationError(
                f"policy {spec!r} is not for env {env_name!r}: it acts in {owner!r} "
                f"({FAMILIES[owner].gym_id}); the policies for env {env_name!r}: "
                f"{', '.join(known)}"
            )
        where = f" for env {env_name!r}" if env_name else ""
        raise EvaluationError(
            f"unknown policy {spec!r}{where}{did_you_mean(spec, known)}; known: {', '.join(known)}"
        )
    from heuristics import make_policy

    return make_policy(spec)


def comparison_sets(entry: EnvFamily, reference: str) -> list[tuple[str, tuple[str, ...]]]:
    """What the reference is compared against, one "best of" set per table row pair: the
    paper's baselines, then (if the env has any) the paper's baselines together with our own
    strong references. Experts, ablations, learned (``ckpt:``) and outside (``py:``) policies
    are never in a set, and neither is ``reference``."""
    sets = [(entry.baselines_label, entry.baselines)]
    if entry.own_references:
        sets.append((entry.references_label, (*entry.baselines, *entry.own_references)))
    return [(label, tuple(p for p in ps if p != reference)) for label, ps in sets]
