"""The policy protocol and the policy registry, shared by every env family.

A policy is any object with ``reset()`` and ``act(obs, info) -> int`` (:class:`Policy`); it
reads only the env's documented ``info["decision_context"]``. A policy that never reads ``obs``
may say so with a class attribute ``context_only = True`` (every PDCluster heuristic does):
``evaluate.py`` then runs its PDCluster episodes without building observations (the reset
option ``observations=False``; results identical, ``tests/evaluation/test_eval_context_only.py``).
Without
the attribute a policy gets observations, as a learned policy needs. Policies are registered by name
and env family (Vidur's registry + small-variant shape) and built with :func:`make_policy`.
PDCluster-v0's ordering × placement composition is :mod:`heuristics.pd_cluster.base`; the
routers' base is :mod:`heuristics.routing.base`; the allocators' is
:mod:`heuristics.allocation.base`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Policy(Protocol):
    """What ``evaluate.py`` drives: ``reset()`` at episode start, ``act`` at every step."""

    name: str

    def reset(self) -> None:
        """Forget per-episode state (call after ``env.reset``)."""
        ...

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """A legal flat action for the current step.

        :param obs: the env observation (policies here read ``info`` instead).
        :param info: the step's info dict; must hold ``decision_context``.
        """
        ...


POLICIES: dict[str, Callable[..., Policy]] = {}
#: Policy name -> the env family it acts in (``envs.CLI_ENVS`` keys: ``pd-cluster``, ``routing``).
POLICY_ENVS: dict[str, str] = {}


def register(
    name: str, env: str = "pd-cluster"
) -> Callable[[Callable[..., Policy]], Callable[..., Policy]]:
    """Decorator: register a policy factory (a class or a function returning a :class:`Policy`)
    under ``name``, for the env family ``env``.

    :param name: registry name, e.g. ``"hexagent"``.
    :param env: the env family whose action space the policy acts in.
    :raises ValueError: if ``name`` is already registered.
    """

    def deco(factory: Callable[..., Policy]) -> Callable[..., Policy]:
        if name in POLICIES:
            raise ValueError(f"policy name {name!r} is already registered ({POLICIES[name]!r})")
        POLICIES[name] = factory
        POLICY_ENVS[name] = env
        return factory

    return deco


def policies_for(env: str) -> tuple[str, ...]:
    """Names of the registered policies that act in the env family ``env`` (a versioned name,
    ``routing-v1``, is its family's: every version takes the same policies)."""
    family = re.sub(r"-v\d+$", "", env)
    return tuple(n for n in POLICIES if POLICY_ENVS[n] == family)


def make_policy(name: str, **kwargs: Any) -> Policy:
    """Build the registered policy ``name``.

    :param name: a key of :data:`POLICIES`.
    :param kwargs: forwarded to the policy's factory (e.g. ``threshold`` for ``hexagent``,
        ``seed`` for ``random``).
    :raises ValueError: for an unknown name, listing the known ones.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; known policies: {sorted(POLICIES)}")
    return POLICIES[name](**kwargs)
