"""Options checked before any work starts: values (:func:`check_config`), then what needs a
built env (:func:`check_run`: the env resets, every policy loads, ``--hyperparams`` fit the
algorithm); the policies a run is compared against (:func:`baselines_of`); and the warnings a
run prints about itself (:func:`schedule_warnings`, :func:`clone_warnings`).
"""

from __future__ import annotations

import inspect
from dataclasses import asdict
from typing import Any

import numpy as np

from envs.registry import Metric, family
from training.config import ENV_OPTIONS, VECS, TrainConfig, TrainError, short_repr


def check_config(cfg: TrainConfig) -> None:
    """Reject bad options before any work starts.

    :raises TrainError: naming the option and the expected values.
    """
    from agents import TRAIN_ENVS

    if cfg.env not in TRAIN_ENVS:
        from envs.common.base import did_you_mean

        raise TrainError(
            f"--env {cfg.env!r} is not trainable"
            # a family's plain name before its versioned alias
            f"{did_you_mean(cfg.env, [e for e in TRAIN_ENVS if e[-3:] not in ('-v0', '-v1')])}; "
            "known: "
            f"{sorted(TRAIN_ENVS)}"
        )
    spec = TRAIN_ENVS[cfg.env]
    for name in ENV_OPTIONS:
        if name not in spec.options and getattr(cfg, name) is not None:
            raise TrainError(
                f"env {cfg.env!r} does not take --{name.replace('_', '-')} (got "
                f"{getattr(cfg, name)!r}); its options: "
                f"{', '.join('--' + o.replace('_', '-') for o in ENV_OPTIONS if o in spec.options)}"
            )
    if cfg.dagger_count is not None and "count" not in spec.options:
        raise TrainError(
            f"--dagger-count sets the DAgger episodes' --count, which env {cfg.env!r} does not "
            "take (its episode length is set by its other options)"
        )
    _check_values(cfg)
    if cfg.randomize:
        from agents import train_env_spec
        from agents.randomize import check_randomization

        try:
            check_randomization(cfg.randomize, train_env_spec(cfg.env).options)
        except ValueError as exc:
            raise TrainError(f"--{exc}") from exc
    if not isinstance(cfg.hyperparams, dict):
        raise TrainError(
            f"--hyperparams must be a JSON object of algorithm keyword -> value, got "
            f"{short_repr(cfg.hyperparams)}"
        )
    _check_policies(cfg)


def _check_values(cfg: TrainConfig) -> None:
    """:raises TrainError: for an unknown algorithm, vec or W&B mode, or a number out of its
    range (:func:`_check_numbers`)."""
    from agents import ALGOS
    from agents.wandb_utils import MODES

    if cfg.algo not in ALGOS:
        raise TrainError(f"--algo {cfg.algo!r} unknown; known: {sorted(ALGOS)}")
    if cfg.vec not in VECS:
        raise TrainError(f"--vec must be one of {', '.join(VECS)}, got {cfg.vec!r}")
    if cfg.ray is not None and cfg.vec != "subproc":
        raise TrainError(f"--ray and --vec {cfg.vec} both say where the envs run; give one")
    if cfg.wandb not in MODES:
        raise TrainError(f"--wandb must be one of {MODES}, got {cfg.wandb!r}")
    _check_numbers(cfg)


def _check_numbers(cfg: TrainConfig) -> None:
    """:raises TrainError: for a count, rate, probability or seed out of its range."""
    for name in (
        "n_envs", "eval_episodes", "eval_every", "ckpt_every", "bc_batch_size", "torch_threads",
    ):  # fmt: skip
        if getattr(cfg, name) < 1:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(cfg, name)}")
    for name in ("bc_lr", "hidden"):
        if not getattr(cfg, name) > 0:
            raise TrainError(f"--{name.replace('_', '-')} must be > 0, got {getattr(cfg, name)}")
    if not cfg.bc_vf_coef >= 0:
        raise TrainError(f"--bc-vf-coef must be >= 0, got {cfg.bc_vf_coef}")
    if not 0.0 <= cfg.dagger_beta <= 1.0:
        raise TrainError(f"--dagger-beta must be in [0, 1], got {cfg.dagger_beta}")
    if not 0.0 < cfg.dagger_keep <= 1.0:
        raise TrainError(f"--dagger-keep must be in (0, 1], got {cfg.dagger_keep}")
    if cfg.dagger_count is not None and cfg.dagger_count < 1:
        raise TrainError(f"--dagger-count must be >= 1, got {cfg.dagger_count}")
    for name in ("timesteps", "bc_episodes", "bc_epochs", "dagger_rounds"):
        if getattr(cfg, name) < 0:
            raise TrainError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(cfg, name)}")
    if cfg.seed < 0:  # Gymnasium's reset takes seeds >= 0
        raise TrainError(f"--seed must be an integer >= 0, got {cfg.seed}")
    if cfg.val_episodes is not None and cfg.val_episodes < 1:
        raise TrainError(f"--val-episodes must be >= 1, got {cfg.val_episodes}")
    if cfg.count is not None and cfg.count < 1:
        raise TrainError(f"--count must be >= 1, got {cfg.count}")


def _check_policies(cfg: TrainConfig) -> None:
    """:raises TrainError: for a repeated baseline, an unknown policy prefix, or a policy that
    is not one of the env's."""
    import evaluation

    known = evaluation.heuristic_names("", cfg.env)
    dupes = sorted({b for b in cfg.baselines if cfg.baselines.count(b) > 1})
    if dupes:
        raise TrainError(f"--baselines lists {', '.join(dupes)} more than once")
    for option, spec in policy_options(cfg):
        prefix, sep, _ = spec.partition(":")
        if sep and prefix not in evaluation.POLICY_LOADERS:
            raise TrainError(
                f"{option} {spec!r}: unknown policy prefix {prefix!r}; known: "
                f"{', '.join(p + ':' for p in sorted(evaluation.POLICY_LOADERS))}"
            )
        if not sep and spec not in known:
            from heuristics import POLICY_ENVS

            owner = POLICY_ENVS.get(spec)
            which = "unknown policy" if owner is None else f"a policy of env {owner!r}, not one"
            raise TrainError(
                f"{option} {spec!r}: {which} for env {cfg.env!r}; known: "
                f"{', '.join(known)}, or py:MODULE:FACTORY / py:FILE.py:FACTORY for your own"
            )


def policy_options(cfg: TrainConfig) -> list[tuple[str, str]]:
    """(option, policy spec) of every policy the run uses besides the one it trains."""
    expert = [] if cfg.bc_expert in (None, "none") else [("--bc-expert", cfg.bc_expert)]
    return [*expert, *(("--baselines", b) for b in cfg.baselines)]


def check_run(cfg: TrainConfig) -> None:
    """What :func:`check_config` cannot see without building things, checked before anything
    is written: the env builds and resets with the run's options, every policy the run uses
    (expert, baselines) loads on it — a ``py:`` file that does not import, a ``ckpt:`` for
    another env — and ``--hyperparams`` names only arguments the algorithm takes.

    :raises TrainError: naming the option.
    """
    import evaluation
    from agents import algo_spec, env_kwargs, make_env, train_env_spec

    algo_class = algo_spec(cfg.algo).load_class()
    takes = set(inspect.signature(algo_class.__init__).parameters) - {"self", "policy", "env"}
    unknown = sorted(set(cfg.hyperparams) - takes)
    if unknown:
        raise TrainError(
            f"--hyperparams: {algo_class.__name__} takes no {', '.join(map(repr, unknown))}; "
            f"it takes: {', '.join(sorted(takes))}"
        )
    spec = train_env_spec(cfg.env)
    try:
        env = make_env(spec, env_kwargs(spec, asdict(cfg)))
        env.reset(seed=cfg.seed)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise TrainError(f"cannot build env {cfg.env!r} with these options: {exc}") from exc
    try:
        for option, policy in policy_options(cfg):
            try:
                evaluation.resolve_policy(policy, env, cfg.env)
            except evaluation.EvaluationError as exc:
                raise TrainError(f"{option}: {exc}") from exc
    finally:
        env.close()


def baselines_of(cfg: TrainConfig) -> tuple[str, ...]:
    """The policies the run is compared against besides the expert: ``--baselines`` (default:
    the env family's paper baselines and own references), and ``--bc-expert`` when it is
    another policy (your own ``py:`` scheduler). The expert is always evaluated, so naming it in
    ``--baselines`` adds nothing (said so on stdout)."""

    entry = family(cfg.env)
    reference = cfg.reference or entry.reference
    chosen = cfg.baselines or (*entry.baselines, *entry.own_references)
    if reference in chosen:
        role = "expert" if reference == entry.reference else "reference"
        print(f"      --baselines: {reference} is the {role}, always evaluated once")
    chosen = tuple(b for b in chosen if b != reference)
    if reference != entry.reference and entry.reference not in chosen:
        chosen += (entry.reference,)  # the env's expert stays in the table
    expert = cfg.bc_expert
    if expert is not None and expert not in ("none", reference, *chosen):
        chosen += (expert,)  # the policy being cloned belongs in the table
    return chosen


def rollout_size(cfg: TrainConfig) -> int:
    """Env steps per rollout of the run's algorithm: ``n_steps`` (its default, or
    ``--hyperparams``) times ``--n-envs`` for an on-policy algorithm, else ``--n-envs`` (one
    vectorised step)."""
    from agents import algo_spec

    spec = algo_spec(cfg.algo)
    params = inspect.signature(spec.load_class().__init__).parameters
    if "n_steps" not in params:
        return cfg.n_envs
    hp = {**spec.machinery, **spec.defaults, **cfg.hyperparams}
    return int(hp.get("n_steps", params["n_steps"].default)) * cfg.n_envs


def schedule_warnings(timesteps: int, eval_every: int, rollout: int) -> list[str]:
    """What the RL stage will do that ``--timesteps`` and ``--eval-every`` do not say.

    An on-policy learner collects whole rollouts of ``rollout`` env steps until it has
    ``timesteps`` or more, so it runs ``ceil(timesteps / rollout) × rollout`` steps; the
    validation evaluations fire at the first step past each multiple of ``eval_every`` and once
    at the end of RL (``agents.callbacks.PeriodicEvalCallback``).

    :param timesteps: ``--timesteps`` (0: behaviour cloning only, nothing to say).
    :param eval_every: ``--eval-every``.
    :param rollout: :func:`rollout_size`.
    :return: one message per surprise (empty when the schedule is what the options say).
    """
    if timesteps <= 0:
        return []
    runs = -(-timesteps // rollout) * rollout
    during = list(range(eval_every, runs + 1, eval_every))
    warnings = []
    if timesteps < eval_every:
        curve = f"one at step {during[0]} and " if during else ""
        warnings.append(
            f"--timesteps {timesteps} < --eval-every {eval_every}: no evaluation curve, only "
            f"{curve}the end-of-RL evaluation on the validation seeds; set --eval-every to "
            f"timesteps / k (e.g. {max(1, timesteps // 4)}) for a curve of k points"
        )
    if runs != timesteps:
        asked = [s for s in during if s <= timesteps]
        extra = [s for s in during if s > timesteps]
        warnings.append(
            f"--timesteps {timesteps} is not a multiple of the rollout ({rollout} env steps: "
            f"n_steps × n_envs): RL runs {runs} steps, evaluating at "
            f"{_steps(asked + extra) or 'no interval'} and at the end"
            + (f" (evaluation at {_steps(extra)} beyond --timesteps)" if extra else "")
            + f"; --timesteps {runs} or {max(rollout, runs - rollout)} says what runs"
        )
    return warnings


def _steps(steps: list[int]) -> str:
    """``[10, 20, 30]`` -> ``"steps 10, 20, 30"``; empty for none."""
    return ("step " if len(steps) == 1 else "steps ") + ", ".join(map(str, steps)) if steps else ""


def chance_accuracy(masks: Any) -> float:
    """The accuracy of a uniform pick among the legal actions, averaged over demonstrated
    states: mean of 1 / (legal actions) over the rows of ``masks`` (``agents.bc.PaddedRows`` or
    an (N, n_actions) boolean array)."""
    rows = getattr(masks, "rows", masks)
    counts = np.array([max(1, int(np.count_nonzero(row))) for row in rows], dtype=float)
    return float(np.mean(1.0 / counts)) if counts.size else float("nan")


def clone_warnings(
    accuracy: float,
    chance: float,
    clone: float,
    random: float,
    metric: Metric,
) -> list[str]:
    """Why a behaviour clone should not be trusted: its accuracy at or below ``chance``, or
    its validation ``metric`` worse than a random legal policy's.

    :param accuracy: the last epoch's share of the expert's actions the clone ranks first.
    :param chance: :func:`chance_accuracy` of the demonstrations.
    :param clone: the clone's ``metric`` (mean over the validation seeds).
    :param random: :class:`RandomLegalPolicy`'s ``metric`` on the same seeds.
    :param metric: the family's selection metric (its direction).
    """
    warnings = []
    if accuracy <= chance:
        warnings.append(
            f"behaviour cloning: accuracy {accuracy:.3f} is at or below chance ({chance:.3f}, "
            f"a uniform pick among the legal actions): the clone has not learned the expert; "
            f"more --bc-episodes and --bc-epochs help"
        )
    worse = clone < random if metric.better == "higher" else clone > random
    if worse:
        warnings.append(
            f"behaviour cloning: the clone's {metric.key} {clone:.3f} is worse than a random "
            f"legal policy's {random:.3f} on the validation seeds ({metric.better} is better)"
        )
    return warnings


class RandomLegalPolicy:
    """A uniform pick among the legal actions (``info["action_mask"]``), seeded per episode
    by its ``reset`` count: the floor a clone must clear."""

    name = "random-legal"

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.episodes = 0
        self.rng = np.random.default_rng(seed)

    def reset(self) -> None:
        self.rng = np.random.default_rng([self.seed, self.episodes])
        self.episodes += 1

    def act(self, obs: Any, info: dict[str, Any]) -> int:
        """:raises ValueError: if ``info`` has no ``action_mask``."""
        mask = info.get("action_mask") if isinstance(info, dict) else None
        if mask is None:
            raise ValueError("random-legal policy needs info['action_mask'] to act")
        return int(self.rng.choice(np.flatnonzero(mask)))
