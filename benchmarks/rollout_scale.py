"""Training rollouts on 1, 2, 4 workers: env steps per second with SB3's ``SubprocVecEnv`` and
with Ray actors (``agents.distributed.RayVecEnv``), and the speed-up over one worker and over
one env in this process (``dummy``, the serial reference).

    python -m benchmarks.rollout_scale [--env pd-cluster[,routing-v1,...]] [--workers 1,2,4]
        [--steps 400] [--backends dummy,subproc,ray] [--json FILE]

Several ``--env`` families run in one process, one after the other, so their ratios share the
machine's load.
Each measurement builds ``n`` training envs exactly as ``train.py`` does
(``agents.make_vec_env``: the env family's training defaults, env ``i`` seeded ``seed + i``),
resets them, then times ``--steps`` vectorised steps: each step asks every env for its action
mask (as MaskablePPO does) and plays a uniformly random legal action. Env steps/s counts the
steps of all envs, so perfect scaling is ``n ×`` the one-worker rate; the learner is left out
(it runs in the driver either way). Ray's start-up (``ray.init``) and actor creation are
outside the clock, as on a long-lived cluster; the local Ray is told it has max(workers, cores)
CPUs so that every row runs (with fewer cores than workers, envs share cores). Measure on a
quiet machine with at least as many free cores as workers: the issue's target is ≥ 1.6× with 2
workers on 2+ cores.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def rollout_rate(
    env: str,
    kwargs: Mapping[str, Any],
    n_workers: int,
    steps: int,
    backend: str,
    seed: int = 0,
) -> float:
    """Env steps per wall second of ``steps`` vectorised steps on ``n_workers`` envs.

    :param env: a key of ``agents.TRAIN_ENVS``.
    :param kwargs: env keyword arguments.
    :param n_workers: envs (one process or actor each).
    :param steps: vectorised steps timed (each is ``n_workers`` env steps).
    :param backend: ``subproc``, ``ray`` or ``dummy`` (all in this process; the serial figure).
    :param seed: base seed of the envs and of the random actions.
    """
    from agents import make_vec_env

    vec = make_vec_env(env, kwargs, n_workers, seed, backend)
    rng = np.random.default_rng(seed)
    try:
        vec.reset()
        start = time.perf_counter()
        for _ in range(steps):
            masks = np.stack(vec.env_method("action_masks"))
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            vec.step(actions)
        wall = time.perf_counter() - start
    finally:
        vec.close()
    return n_workers * steps / wall


def run(
    env: str, workers: Sequence[int], steps: int, backends: Sequence[str], seed: int = 0
) -> list[dict[str, Any]]:
    """One row per (backend, workers): env steps/s, the speed-up over the backend's one worker
    (``speedup``) and, when ``dummy`` is among ``backends``, over one env in this process
    (``vs_serial``; ``dummy`` is then measured first)."""
    import training
    from agents import env_kwargs, train_env_spec

    cfg = training.resolve(training.TrainConfig(env=env))
    kwargs = env_kwargs(train_env_spec(env), cfg.__dict__)
    if "ray" in backends:
        import ray

        from agents.distributed import init_ray

        if not ray.is_initialized():
            # one CPU per env actor: declare at least max(workers) CPUs so that every row runs
            # (on fewer cores than workers the extra actors share them, as subprocesses do)
            cpus = max(max(workers), os.cpu_count() or 1)
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        init_ray("local")
    rows: list[dict[str, Any]] = []
    serial: float | None = None
    ordered = sorted(backends, key=lambda b: b != "dummy")  # the serial reference first
    for backend in ordered:
        base: float | None = None
        for n in workers:
            rate = rollout_rate(env, kwargs, n, steps, backend, seed)
            base = rate if base is None else base
            if backend == "dummy" and n == 1:
                serial = rate
            row = {
                "env": env,
                "backend": backend,
                "workers": n,
                "env_steps_per_s": round(rate, 1),
                "speedup": round(rate / base, 2),
            }
            versus = ""
            if serial is not None:
                row["vs_serial"] = round(rate / serial, 2)
                versus = f", {rate / serial:.2f}× one env in this process"
            rows.append(row)
            print(
                f"{env:>14} {backend:>8} × {n}: {rate:8.1f} env steps/s  "
                f"({rate / base:.2f}× one worker{versus})"
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--env",
        default="pd-cluster-v0",
        help="trainable env families, comma-separated (default: the measured pd-cluster-v0)",
    )
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--steps", type=int, default=400, help="vectorised steps timed per row")
    ap.add_argument("--backends", default="subproc,ray")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args(argv)
    workers = [int(w) for w in args.workers.split(",")]
    backends = [b for b in args.backends.split(",") if b]
    if "ray" in backends:
        try:
            import ray  # noqa: F401
        except ImportError:
            print("ray is not installed (pip install -e '.[ray]'): measuring subproc only")
            backends = [b for b in backends if b != "ray"]
    rows = [
        row
        for env in args.env.split(",")
        if env
        for row in run(env, workers, args.steps, backends, args.seed)
    ]
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
