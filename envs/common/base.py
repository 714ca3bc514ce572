"""What every servegym env shares: the masked-action protocol and its one invalid-action rule,
the common options, the per-step ``info`` every env gives, and decision contexts that compare by
value.

An env subclasses :class:`ServegymEnv`, calls :meth:`ServegymEnv._init_common` from its
``__init__`` (after building its action and observation spaces), keeps ``self._mask`` up to date,
and implements :meth:`ServegymEnv._explain_invalid`, :meth:`ServegymEnv.fallback_action` and
:meth:`ServegymEnv._metrics_now`. :meth:`ServegymEnv._legal_action` turns a step's action into a
legal one (or raises), :meth:`ServegymEnv._common_info` starts every step's ``info`` and
:meth:`ServegymEnv._truncated` applies ``max_steps``, so the envs' ``step`` methods read the same
way.

## Actions: one rule for every env (Gymnasium's convention: any action in the space is accepted)

* **In the space and legal** (``action_masks()[a]``): taken as is.
* **In the space but masked**, ``invalid_action="penalize"`` (the default): replaced by the env's
  fallback policy's choice (:meth:`ServegymEnv.fallback_action`, documented per env: the
  simulator's least-loaded placement for PDCluster, the least-loaded instance (or "stay") for
  Routing, an even split of the pool for Allocation); the step's reward gets
  ``−invalid_penalty`` and its ``info["invalid_action"]`` is True (``info["requested_action"]``
  holds the masked action). ``invalid_action="raise"``: a ``ValueError`` saying why the action
  is masked (for debugging a policy).
* **Outside the space** (not an integer in ``[0, n)``): always a ``ValueError`` naming the env,
  the action and the range. Nothing outside the space is accepted, and no action corrupts state.

Experts and baselines take legal actions, so the rule never changes their numbers.

## Every step's ``info``

* ``action_mask``: legal actions after this step. On the step that ends the episode no decision
  is pending; the mask then marks action 0 alone (never all-false, so a masked sampler does not
  fail under Gymnasium's next-step autoreset; the action taken after it is ignored by reset).
* ``invalid_action``: this step's action was masked and replaced (see above).
* ``metrics``: the episode's headline metrics as if it ended now (:meth:`_metrics_now`: the
  finished part, with what did not finish counted as the metric defines, e.g. an unfinished
  workflow's C_w = inf, an unfinished request an SLO violation), plus ``num_unfinished`` (arrived,
  not finished) and ``num_not_arrived``. So an episode cut by any wrapper (``TimeLimit``,
  ``max_episode_steps``) still ends with its metrics; when it terminates they are the episode's.
* ``decision_context`` only with ``decision_context=True`` (the structured scheduler-visible
  state the experts act on; :meth:`ServegymEnv.decision_context` returns it on request either
  way). It is the heavy part of ``info`` (PDCluster at K = 256: ~374 KB pickled per step), so
  the registered ids leave it out (``gym.make(id)`` is for learners); ``evaluate.py``, BC, DAgger
  and the heuristics' examples make their envs with ``decision_context=True``. Constructing the
  env class directly keeps it on (``decision_context=True`` is the class default).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envs.common.rewards import make_reward
from envs.common.workloads import episode_seed

INVALID_ACTIONS = ("penalize", "raise")
#: What a terminal step's mask marks: action 0 alone (see the module docstring).
TERMINAL_MASK_ACTION = 0


class DecisionContextBase:
    """Mixin for the dataclass an env puts in ``info["decision_context"]``: equality compares
    every field, arrays by value (declare the dataclass with ``eq=False`` to keep it)."""

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for f in fields(self):  # type: ignore[arg-type]
            a, b = getattr(self, f.name), getattr(other, f.name)
            if isinstance(a, np.ndarray):
                if not np.array_equal(a, b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None  # type: ignore[assignment]


class ServegymEnv(gym.Env):
    """Base of the servegym envs (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}
    #: Every servegym env acts through one ``Discrete(n)`` (docs/design.md, "The MDPs").
    action_space: gym.spaces.Discrete
    _mask: np.ndarray

    def _init_common(
        self,
        reward: str,
        reward_kwargs: dict[str, Any] | None,
        invalid_action: str,
        invalid_penalty: float,
        max_steps: int | None,
        workload_seed: int | None,
        render_mode: str | None,
        decision_context: bool = True,
    ) -> None:
        """Check and store the options every env takes; start with an all-false mask.

        :raises ValueError: for an unknown reward or reward option, ``invalid_action`` or
            ``render_mode``.
        """
        make_reward(reward, 1, **(reward_kwargs or {}))  # fail fast on a bad name or option
        if invalid_action not in INVALID_ACTIONS:
            raise ValueError(
                f"invalid_action must be one of {INVALID_ACTIONS}, got {invalid_action!r}"
                + did_you_mean(str(invalid_action), INVALID_ACTIONS)
            )
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode {render_mode!r} not in {self.metadata['render_modes']}")
        self.reward_name = reward
        self.reward_kwargs = dict(reward_kwargs or {})
        self.invalid_action = invalid_action
        self.invalid_penalty = invalid_penalty
        self.max_steps = max_steps
        self.workload_seed = workload_seed
        self.render_mode = render_mode
        self.context_in_info = bool(decision_context)
        self._mask = np.zeros(self.action_space.n, dtype=bool)
        self._invalid: int | None = None  # the masked action replaced at this step
        self._metrics_cache: tuple[Any, dict[str, float]] | None = None

    def _begin_episode(self, seed: int | None, source: Any) -> list[Any]:
        """Seed the env (``gym.Env.reset``), pick the episode's workload seed
        (:func:`envs.common.workloads.episode_seed`) and return its records from ``source`` (a
        :class:`envs.common.workloads.TraceSource`); resets the step counter."""
        gym.Env.reset(self, seed=seed)
        self._workload_seed = episode_seed(self, seed, self.workload_seed)
        self._steps = 0
        self._invalid = None
        self._metrics_cache = None
        return source.records(self._workload_seed)

    @staticmethod
    def _check_predictor(name: str) -> None:
        """:raises ValueError: if ``name`` is not in :data:`envs.common.predictors.PREDICTORS`."""
        from envs.common.predictors import PREDICTORS

        if name not in PREDICTORS:
            raise ValueError(f"unknown output_predictor {name!r}; known: {sorted(PREDICTORS)}")

    def action_masks(self) -> np.ndarray:
        """Legal actions now (sb3-contrib MaskablePPO convention)."""
        return self._mask.copy()

    @property
    def env_name(self) -> str:
        """The registered id (``servegym/...``) when made by ``gym.make``, else the class name."""
        spec = getattr(self, "spec", None)
        return spec.id if spec is not None else type(self).__name__

    def _legal_action(self, action: Any) -> tuple[int, float]:
        """``(action, reward)`` by the module's invalid-action rule: the action and 0.0 if legal;
        else raise (``invalid_action="raise"``) or :meth:`fallback_action` and
        ``−invalid_penalty`` (recorded for ``info["invalid_action"]``).

        :raises ValueError: for an action outside the space (naming env, action and range), or a
            masked one under ``invalid_action="raise"``.
        """
        n = int(self.action_space.n)
        # The common case first: a legal Python or numpy integer (the same result as below,
        # without the array conversion; env.step calls this on every step).
        if (type(action) is int or type(action) is np.int64) and 0 <= action < n:
            if self._mask[action]:
                self._invalid = None
                return int(action), 0.0
        arr = np.asarray(action)
        integral = arr.size == 1 and np.issubdtype(arr.dtype, np.integer)
        a = int(arr.reshape(())) if integral else -1
        if not 0 <= a < n:
            raise ValueError(
                f"{self.env_name}: action {action!r} is outside the action space Discrete({n}); "
                f"valid actions are integers 0..{n - 1}"
            )
        self._invalid = None
        if self._mask[a]:
            return a, 0.0
        if self.invalid_action == "raise":
            raise ValueError(f"{self.env_name}: {self._explain_invalid(a)}")
        self._invalid = a
        fallback = self.fallback_action()
        assert self._mask[fallback], "the fallback policy's choice must be legal"
        return fallback, -self.invalid_penalty

    def fallback_action(self) -> int:
        """The legal action the env's fallback policy takes now: what a masked action is
        replaced by (see the module docstring; each env documents its fallback)."""
        raise NotImplementedError

    def decision_context(self) -> Any:
        """The structured scheduler-visible state of the pending decision (what
        ``info["decision_context"]`` holds with ``decision_context=True``); None when the
        episode is over."""
        return getattr(self, "_ctx", None)

    def _end_mask(self) -> None:
        """The mask of a step that ends the episode: action 0 alone (module docstring)."""
        self._mask = np.zeros(self.action_space.n, dtype=bool)
        self._mask[TERMINAL_MASK_ACTION] = True

    def _common_info(self) -> dict[str, Any]:
        """What every step's ``info`` starts with (see the module docstring)."""
        info: dict[str, Any] = {
            "action_mask": self._mask.copy(),
            "invalid_action": self._invalid is not None,
        }
        if self._invalid is not None:
            info["requested_action"] = self._invalid
        ctx = getattr(self, "_ctx", None)
        if self.context_in_info and ctx is not None:
            info["decision_context"] = ctx
        return info

    def _metrics_so_far(self) -> dict[str, float]:
        """:meth:`_metrics_now`, recomputed only when its cache key changes, with the counts of
        :meth:`_live_metrics` (which change with time alone) brought up to date."""
        key = self._metrics_key()
        if self._metrics_cache is None or self._metrics_cache[0] != key:
            self._metrics_cache = (key, self._metrics_now())
        return {**self._metrics_cache[1], **self._live_metrics()}

    def _metrics_key(self) -> Any:
        """What :meth:`_metrics_now` depends on, besides :meth:`_live_metrics` (default:
        the completions so far: an unfinished workflow or request counts the same whatever the
        time)."""
        sim = getattr(self, "sim", None)
        return None if sim is None else len(sim.completed)

    def _live_metrics(self) -> dict[str, float]:
        """The metrics that change without a completion, computed at every step:
        ``num_unfinished`` (arrived, not finished) and ``num_not_arrived`` now, from the
        episode's sorted arrival times (``self._arrival_times``, set at reset) and its
        completions; {} for an env that counts them in :meth:`_metrics_now`."""
        arrivals = getattr(self, "_arrival_times", None)
        sim = getattr(self, "sim", None)
        if arrivals is None or sim is None:
            return {}
        arrived = int(np.searchsorted(arrivals, sim.now, side="right"))
        return {
            "num_unfinished": float(arrived - len(sim.completed)),
            "num_not_arrived": float(len(arrivals) - arrived),
        }

    def _metrics_now(self) -> dict[str, float]:
        """The headline metrics as if the episode ended now, with ``num_unfinished`` and
        ``num_not_arrived`` (module docstring)."""
        raise NotImplementedError

    def _truncated(self, terminated: bool, steps: int) -> bool:
        return (not terminated) and self.max_steps is not None and steps >= self.max_steps

    def export_timeline(self, path: str | Path) -> Path:
        """Write the episode so far as a Chrome-trace / Perfetto JSON timeline: per-instance
        prefill, KV-transfer and decode slices, queue counters and workflow spans with C_w and
        H_w (see :mod:`envs.sim.core.timeline`). Open it at ui.perfetto.dev or ``chrome://tracing``.

        :return: the path written.
        :raises RuntimeError: before the first ``reset``.
        """
        sim = getattr(self, "sim", None)
        if sim is None:
            raise RuntimeError(
                f"{type(self).__name__} has no episode to export yet: call reset() (and step) first"
            )
        from envs.sim.core.timeline import write_timeline

        return write_timeline(sim.result(), sim.cluster, path)

    def _explain_invalid(self, action: int) -> str:
        """Why ``action`` (inside the space) is not legal now, naming the offending value."""
        raise NotImplementedError

    def render(self) -> str | np.ndarray | None:
        """``ansi``: a text table of the state; ``rgb_array``: a picture of it (H×W×3 uint8,
        :mod:`envs.common.render`); None without a ``render_mode``."""
        if self.render_mode is None:
            return None
        if self.render_mode == "ansi":
            return self._render_ansi()
        from envs.common.render import figure_to_rgb

        return figure_to_rgb(self._render_figure())

    def _render_ansi(self) -> str:
        raise NotImplementedError

    def _render_figure(self) -> Any:
        raise NotImplementedError

    def _terminal_observation(self) -> dict[str, np.ndarray]:
        """All-zero observation returned with the terminal step."""
        space = self.observation_space
        assert isinstance(space, gym.spaces.Dict)
        return {k: np.zeros(s.shape or (), dtype=np.float32) for k, s in space.items()}


def did_you_mean(name: str, known: Any) -> str:
    """`` did you mean 'x'?`` for the known names closest to a misspelt ``name`` ("" if none is
    close), to append to an error that lists the known names."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(k) for k in known], n=3, cutoff=0.6)
    if not close:
        return ""
    return " (did you mean " + " or ".join(repr(c) for c in close) + "?)"
