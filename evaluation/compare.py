"""Compare policies on identical episodes from Python: :func:`compare`.

The same runs ``evaluate.py`` makes (one episode per policy and seed, every action through
``env.step``, :func:`evaluation.runs.run_episode`) and the same table
(:func:`evaluation.tables.format_table`), for policies given as names, shipped checkpoints
(``ckpt:routing``), saved models (``ckpt:PATH``), outside factories (``py:FILE.py:FACTORY``),
policy objects (``act(obs, info)``) or Stable-Baselines3 models.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from envs import env_short_name
from evaluation.config import EvaluationError, env_entry
from evaluation.policies import Policy, resolve_policy
from evaluation.runs import run_episode
from evaluation.tables import format_table


@dataclass(frozen=True)
class Comparison:
    """What ``compare`` returns: the result rows and the printed table.

    :param rows: one dict per (policy, seed): ``env``, ``workload``, ``policy``, ``seed``,
        ``metrics`` (the episode-end ``info["metrics"]``), ``utilisation``, ``steps``,
        ``episode_return``, ``wall_seconds`` and the episode's per-request or per-workflow lists.
    :param text: the table ``evaluation.tables.format_table`` prints for ``rows``.
    """

    rows: list[dict[str, Any]]
    text: str

    def __iter__(self) -> Iterator[Any]:
        """``rows, text = compare(...)``."""
        return iter((self.rows, self.text))

    def __str__(self) -> str:
        return self.text


def _policy(spec: Any, env: Any, family: str) -> Policy:
    """A fresh policy for one episode of ``env`` from a spec, a policy object or an SB3 model."""
    if isinstance(spec, str):
        return resolve_policy(spec, env, family)
    if hasattr(spec, "predict") and hasattr(spec, "policy"):
        from agents.checkpoint import SB3Policy

        return SB3Policy(spec, _name(spec))
    if callable(getattr(spec, "act", None)):
        return spec
    raise EvaluationError(
        f"policy {spec!r}: expected a name (e.g. 'goodserve', 'ckpt:routing', 'py:FILE.py:make'), "
        "an object with act(obs, info), or a Stable-Baselines3 model"
    )


def _name(spec: Any) -> str:
    if isinstance(spec, str):
        return spec
    return str(getattr(spec, "name", None) or type(spec).__name__)


def compare(
    policies: Sequence[Any],
    env: str = "servegym/Routing-v0",
    seeds: Sequence[int] = (1_000_000,),
    reference: str | None = None,
    **env_kwargs: Any,
) -> Comparison:
    """Run every policy on the same episodes and tabulate the env's headline metrics.

    Each (policy, seed) is one episode of a fresh ``gymnasium.make(env, **env_kwargs)`` reset
    with that seed, so every policy sees the same workload and cluster; the policies act on the
    observation and the env's decision context (``decision_context=True`` is passed), as in
    ``evaluate.py``. For example:

    ```python
    from evaluation import compare

    policies = ["ckpt:routing", "goodserve", "least-request"]
    rows, text = compare(policies, "servegym/Routing-v0", [1_000_000, 1_000_001])
    print(text)
    ```

    :param policies: each a policy name (``python evaluate.py --env ENV --list-policies``), a
        ``<prefix>:<argument>`` spec (``ckpt:routing`` a shipped checkpoint, ``ckpt:PATH`` a
        saved model, ``py:FILE.py:FACTORY``), an object with ``reset()`` and
        ``act(obs, info) -> action``, or a Stable-Baselines3 model (acting by argmax over the
        legal actions). Names must be distinct.
    :param env: a registered id (``servegym/Routing-v0``) or a short name (``routing``).
    :param seeds: the reset seeds, one episode per policy each. Seeds 1,000,000 and above are
        the held-out range no shipped policy was trained or selected on.
    :param reference: the policy whose reduction (gain) against the best baseline the table
        reports (None: the env's expert).
    :param env_kwargs: keyword arguments of the env (``workload_count=50``, ``slo_scale=1.5``).
    :raises EvaluationError: for an unknown env or policy, duplicate names or no seeds.
    """
    import gymnasium as gym

    import envs  # noqa: F401  (registers the servegym ids)

    try:
        family = env_short_name(env)
    except ValueError as exc:
        raise EvaluationError(str(exc)) from exc
    entry = env_entry(family)
    gym_id = env if env.startswith("servegym/") else entry.gym_id
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise EvaluationError("compare needs at least one seed")
    names = [_name(p) for p in policies]
    if not names:
        raise EvaluationError("compare needs at least one policy")
    if len(set(names)) != len(names):
        raise EvaluationError(f"policy names must be distinct, got {names}")
    kwargs = {**env_kwargs, "decision_context": True}
    workload = str(env_kwargs.get("workload") or _constructor_default(gym_id, "workload"))
    rows: list[dict[str, Any]] = []
    for spec, name in zip(policies, names, strict=True):
        instance = gym.make(gym_id, **kwargs)
        try:
            for seed in seeds:
                result = run_episode(instance, _policy(spec, instance, family), seed)
                rows.append(
                    {
                        **_setting(instance, gym_id, env_kwargs),
                        "workload": workload,
                        "policy": name,
                        "seed": seed,
                        **result,
                    }
                )
        finally:
            instance.close()
    return Comparison(rows, format_table(rows, reference=reference))


def _setting(env: Any, gym_id: str, env_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The row fields that name the setting (the table's title): env, cluster, model, GPUs."""
    family = env_short_name(gym_id)
    cluster = getattr(env.unwrapped, "cluster", None)
    setting = {
        "env": family,
        "cluster": getattr(cluster, "name", env_kwargs.get("cluster")),
        "model": env_kwargs.get("model") or (env_entry(family).model or None),
    }
    if "gpus" in env_kwargs or _constructor_default(gym_id, "gpus") is not None:
        setting["gpus"] = env_kwargs.get("gpus", _constructor_default(gym_id, "gpus"))
    return setting


def _constructor_default(gym_id: str, option: str) -> Any:
    """The default of one constructor option of the class behind a registered id."""
    import importlib

    import gymnasium as gym

    entry = gym.spec(gym_id).entry_point
    if isinstance(entry, str):
        module, _, name = entry.partition(":")
        entry = getattr(importlib.import_module(module), name)
    if not callable(entry):
        return None
    parameter = inspect.signature(entry).parameters.get(option)
    return None if parameter is None else parameter.default
