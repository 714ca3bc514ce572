"""The error a policy raises when ``info`` holds no decision context of its env family: it
names the family the policy acts in and, for another family's env, the policies that env has
(:func:`context_error`; each family's ``base`` module calls it)."""

from __future__ import annotations

from typing import Any

from heuristics.base import policies_for


def context_error(info: Any, expected: type, family: str) -> ValueError:
    """The error of a policy of env family ``family`` whose ``info["decision_context"]`` is not
    the ``expected`` class: the context is missing (the episode is over, or the env was made
    without ``decision_context=True``), or the env is another family's (then it names the
    family the policy belongs to and the policies that env has)."""
    from envs.registry import FAMILIES

    ctx = info.get("decision_context") if isinstance(info, dict) else None
    own = (
        f"this policy acts in {family!r} ({FAMILIES[family].gym_id}) and reads "
        f"info['decision_context'] as a {expected.__name__}"
    )
    if ctx is None:
        keys = sorted(info) if isinstance(info, dict) else type(info).__name__
        return ValueError(
            f"{own}; info has no decision context ({keys}): the episode is over, or the env was "
            "made without decision_context=True (gym.make(id) leaves it out)"
        )
    other = type(ctx).__module__.split(".")[1].replace("_", "-")
    if other not in FAMILIES:
        return ValueError(f"{own}; got a {type(ctx).__name__}")
    return ValueError(
        f"{own}, but this env is {other!r} ({FAMILIES[other].gym_id}, a "
        f"{type(ctx).__name__}); its policies: {', '.join(policies_for(other))}"
    )
