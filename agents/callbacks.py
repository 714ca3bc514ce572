"""Logging and evaluation during training, through SB3's extension points.

* :class:`WandbWriter` — an SB3 ``KVWriter``: every ``logger.dump`` goes to ``wandb.log`` with
  ``global_step`` as its x-axis (no TensorBoard sync).
* :class:`EpisodeMetricsCallback` — episode-end headline metrics (Req95 / Req99, goodput, ...)
  of the training envs, averaged per logging interval (``rollout/<metric>``).
* :class:`PeriodicEvalCallback` — every N steps, the current policy on held-out seeds
  (``eval/<metric>``), next to the expert's and the best baseline's numbers on the same seeds
  (``eval/<metric>_<policy>``, constant reference lines); keeps the best model.
* :class:`TimingCallback` — wall time split into rollout (env + inference) and update, plus
  the env's own share measured by :class:`TimedVecEnv`; steps per second.
* :class:`TqdmCallback` — a progress bar (SB3's needs ``rich``; this needs only tqdm).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter
from stable_baselines3.common.vec_env import VecEnvWrapper


class WandbWriter(KVWriter):
    """Sends SB3 logger dumps to an active ``wandb`` run.

    :param run: the ``wandb`` run (from ``wandb.init``).
    """

    def __init__(self, run: Any):
        self.run = run

    def write(
        self,
        key_values: dict[str, Any],
        key_excluded: dict[str, tuple[str, ...]],
        step: int = 0,
    ) -> None:
        data = {
            k: float(v)
            for k, v in key_values.items()
            if isinstance(v, int | float | np.floating | np.integer)
            and "wandb" not in (key_excluded.get(k) or ())
        }
        if data:
            self.run.log({**data, "global_step": int(step)})

    def close(self) -> None:
        """The run is finished by its owner (``train.py``)."""


class EpisodeMetricsCallback(BaseCallback):
    """Logs ``info["metrics"][key]`` of every finished training episode as ``rollout/<key>``
    (mean over the episodes of the logging interval).

    :param keys: metric names to log (those present).
    """

    def __init__(self, keys: Sequence[str]):
        super().__init__()
        self.keys = tuple(keys)
        self.episodes = 0

    def _on_step(self) -> bool:
        for info, done in zip(
            self.locals.get("infos", ()), self.locals.get("dones", ()), strict=True
        ):
            metrics = info.get("metrics") if done else None
            if not metrics:
                continue
            self.episodes += 1
            for key in self.keys:
                value = metrics.get(key)
                if value is not None and np.isfinite(value):
                    self.logger.record_mean(f"rollout/{key}", float(value))
        self.logger.record("rollout/episodes", self.episodes)
        return True


class PeriodicEvalCallback(BaseCallback):
    """Evaluates the current model every ``every`` env steps (and at the end of training).

    :param evaluate_fn: ``model -> {metric: value}`` on the held-out seeds (mean over seeds).
    :param every: env steps between evaluations.
    :param references: ``{policy name: {metric: value}}`` on the same seeds, logged alongside
        as ``eval/<metric>_<policy>``.
    :param best_path: where the model with the best ``select`` metric is saved (or None).
    :param select: the metric that picks the best model (the env family's ``select`` metric,
        ``envs.registry``).
    :param better: ``"lower"`` or ``"higher"``: which direction of ``select`` is better.
    :param history_path: JSON file that receives the evaluation history after each evaluation.
    """

    def __init__(
        self,
        evaluate_fn: Callable[[Any], Mapping[str, float]],
        every: int,
        select: str,
        better: str = "lower",
        references: Mapping[str, Mapping[str, float]] | None = None,
        best_path: str | Path | None = None,
        history_path: str | Path | None = None,
    ):
        super().__init__()
        if every < 1:
            raise ValueError(f"eval interval must be >= 1 env step, got {every}")
        self.evaluate_fn = evaluate_fn
        self.every = every
        self.references = {k: dict(v) for k, v in (references or {}).items()}
        self.best_path = Path(best_path) if best_path else None
        if better not in ("lower", "higher"):
            raise ValueError(f"better must be 'lower' or 'higher', got {better!r}")
        self.select = select
        self.sign = 1.0 if better == "lower" else -1.0
        self.history_path = Path(history_path) if history_path else None
        self.history: list[dict[str, Any]] = []
        self.best = float("inf")
        self._next = every

    def _on_training_start(self) -> None:
        self._next = (self.num_timesteps // self.every + 1) * self.every

    def _on_step(self) -> bool:
        if self.num_timesteps >= self._next:
            self._next += self.every
            self.run_eval(trigger="interval")
        return True

    def _on_training_end(self) -> None:
        if not self.history or self.history[-1]["global_step"] != self.num_timesteps:
            self.run_eval(trigger="end")

    def run_eval(self, trigger: str = "manual") -> dict[str, Any]:
        """Evaluate now, log, and keep the best model; returns the history row.

        :param trigger: recorded in the row: ``interval`` (during a rollout), ``end``, ``manual``.
        """
        start = time.perf_counter()
        metrics = dict(self.evaluate_fn(self.model))
        row = {"global_step": int(self.num_timesteps), "trigger": trigger, **metrics}
        row["eval_seconds"] = time.perf_counter() - start
        for key, value in metrics.items():
            self.logger.record(f"eval/{key}", value)
            for name, ref in self.references.items():
                if key in ref:
                    self.logger.record(f"eval/{key}_{name}", ref[key])
        value = self.sign * metrics.get(self.select, self.sign * float("inf"))
        if self.best_path is not None and math.isfinite(value) and value < self.best:
            self.best = value
            self.model.save(self.best_path)
            row["saved_best"] = str(self.best_path)
        self.history.append(row)
        if self.history_path is not None:
            self.history_path.write_text(json.dumps(self.history, indent=1))
        return row


class TimedVecEnv(VecEnvWrapper):
    """Measures the wall time the learner spends waiting for the envs (steps, resets and
    ``env_method`` calls such as ``action_masks``).

    :param venv: the vectorised env.
    :param clock: seconds now (``time.perf_counter``: wall time; ``time.process_time``: the
        process's CPU time, for in-process envs on a shared machine).
    """

    def __init__(self, venv: Any, clock: Callable[[], float] = time.perf_counter):
        super().__init__(venv)
        self.clock = clock
        self.env_seconds = 0.0
        self._t = 0.0

    def reset(self) -> Any:
        t = self.clock()
        obs = self.venv.reset()
        self.env_seconds += self.clock() - t
        return obs

    def step_async(self, actions: np.ndarray) -> None:
        self._t = self.clock()
        self.venv.step_async(actions)

    def step_wait(self) -> Any:
        out = self.venv.step_wait()
        self.env_seconds += self.clock() - self._t
        return out

    def env_method(self, method_name: str, *args: Any, indices: Any = None, **kwargs: Any) -> Any:
        t = self.clock()
        out = self.venv.env_method(method_name, *args, indices=indices, **kwargs)
        self.env_seconds += self.clock() - t
        return out


class TimingCallback(BaseCallback):
    """Wall-time split (or that of another ``clock``): ``time/rollout_s`` (env + policy
    inference), ``time/update_s`` (gradient steps), ``time/env_s`` (waiting for the envs, from
    :class:`TimedVecEnv`), and ``time/env_steps_per_s`` over the whole run so far.

    :param timed_env: the :class:`TimedVecEnv` (or None: no env share).
    :param clock: seconds now, as :class:`TimedVecEnv`'s (the same clock for both).
    """

    def __init__(
        self, timed_env: TimedVecEnv | None = None, clock: Callable[[], float] = time.perf_counter
    ):
        super().__init__()
        self.timed_env = timed_env
        self.clock = clock
        self.rollout_s = 0.0
        self.update_s = 0.0
        self._rollout_start = 0.0
        self._rollout_end: float | None = None
        self._start = 0.0
        self._start_steps = 0

    def _on_training_start(self) -> None:
        self._start = self.clock()
        self._start_steps = self.num_timesteps

    def _on_rollout_start(self) -> None:
        now = self.clock()
        if self._rollout_end is not None:
            self.update_s += now - self._rollout_end
        self._rollout_start = now

    def _on_rollout_end(self) -> None:
        now = self.clock()
        self.rollout_s += now - self._rollout_start
        self._rollout_end = now
        self.logger.record("time/rollout_s", self.rollout_s)
        self.logger.record("time/update_s", self.update_s)
        if self.timed_env is not None:
            self.logger.record("time/env_s", self.timed_env.env_seconds)
        wall = now - self._start
        if wall > 0:
            self.logger.record(
                "time/env_steps_per_s", (self.num_timesteps - self._start_steps) / wall
            )

    def _on_training_end(self) -> None:
        if self._rollout_end is not None:
            self.update_s += self.clock() - self._rollout_end
            self._rollout_end = None

    def _on_step(self) -> bool:
        return True

    def summary(self) -> dict[str, float]:
        """Totals: wall, rollout, update and env seconds; env steps per second; env share."""
        wall = self.clock() - self._start
        env = self.timed_env.env_seconds if self.timed_env is not None else float("nan")
        steps = self.num_timesteps - self._start_steps
        return {
            "wall_s": wall,
            "rollout_s": self.rollout_s,
            "update_s": self.update_s,
            "env_s": env,
            "env_steps": steps,
            "env_steps_per_s": steps / wall if wall > 0 else float("nan"),
            "env_share": env / wall if wall > 0 else float("nan"),
            "learner_share": (wall - env) / wall if wall > 0 else float("nan"),
        }


class TqdmCallback(BaseCallback):
    """A tqdm progress bar over env steps.

    :param total: env steps of this ``learn`` call.
    :param disable: no bar (quiet runs, tests).
    """

    def __init__(self, total: int, disable: bool = False):
        super().__init__()
        self.total = total
        self.disable = disable
        self.bar: Any = None
        self._last = 0

    def _on_training_start(self) -> None:
        import sys

        from envs.sim.core.progress import progress

        self._last = self.num_timesteps
        # A live bar on a terminal; into a log file, a plain line every 30 s.
        self.bar = progress(
            total=self.total, desc="train", unit="step", disable=self.disable, file=sys.stderr
        )

    def _on_step(self) -> bool:
        if self.bar is not None:
            self.bar.update(self.num_timesteps - self._last)
            self._last = self.num_timesteps
        return True

    def _on_training_end(self) -> None:
        if self.bar is not None:
            self.bar.close()
