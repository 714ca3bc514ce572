"""PPO training speed on PDCluster: the reference learner vs the optimised one, in one run.

    python -m benchmarks.train_speed [--slots 16,256] [--envs 1] [--rollouts 4] [--warmup 1]
        [--configs ...] [--reference DIR] [--quick]

For each slot count K and each configuration, a fresh MaskablePPO model (``agents.build_model``,
the training defaults of ``agents.algos.PPO_DEFAULTS``) runs ``learn()`` on ``--envs``
in-process envs (one ``DummyVecEnv``; the policy acts on all of them in one batch; mixed
workload, ``--count`` workflows per episode): ``--warmup`` rollouts of ``--n-steps`` env steps
(with the envs' first resets and first calls), then ``--rollouts`` measured ones continuing the
same episodes (``learn(reset_num_timesteps=False)``), i.e. the steady rate of a training run,
where each env resets once per episode (~2,300 steps at K = 256 here) rather than once per
measurement. A fixed set of observations recorded from HexAgent's episode is then acted on one
at a time with ``model.predict(obs, action_masks=...)``, as ``evaluate.py`` and ``train.py``'s
evaluation do. Printed per row:

* ``steps/s``: env steps per second of wall time of the measured rollouts (and updates);
  ``cpu st/s``: the same per second of the process's CPU time (``time.process_time``: what a
  quiet machine gives with one torch thread; other processes on a shared machine inflate the
  wall time, hardly this), the figure judged;
* ``env %``: share of that CPU time spent inside the envs (steps, resets, ``action_masks``:
  ``agents.callbacks.TimedVecEnv``); ``infer %``: the rest of rollout collection (the policy
  acting, the rollout buffer); ``update %``: everything outside rollout collection
  (``train()``: minibatches, gradient steps);
* ``cold cpu``: env steps per CPU second of the warm-up ``learn()`` (a fresh model: the envs'
  first resets weigh on so few steps);
* ``predict ms``: mean wall time of one single-observation ``model.predict``;
* ``x steps/s`` and ``x predict``: speed-up over the first configuration of the same K,
  measured in this run (house rule: speed targets print ratios against a reference measured
  side by side); with ``--reference DIR`` (an exported tree, e.g. ``git archive e107553 | tar
  -x -C /tmp/ref``), each configuration also runs on that code in a subprocess just before
  (``ref cpu``) and ``x ref`` is this tree's CPU rate over it.

Configurations: ``reference`` is the learner without its optimisations: the dense extractor
(``PDClusterScorer(sparse=False)``: the per-action hidden layer for every (k, p, d)) and
sb3-contrib's stock ``MaskableCategoricalDistribution``, one torch thread (``train.py``'s
default); ``sparse`` swaps in the sparse extractor only; ``default`` is today's learner (sparse
extractor and :class:`agents.policies.LogSoftmaxMaskableCategoricalDistribution`), one thread;
``default-2t`` the same with two torch threads (not run unless named in ``--configs``: on a
busy 2-core machine idle OpenMP threads spin-wait and the row takes minutes); ``factored`` is
``default`` with the factorised slot-then-pair head (algorithm ``maskable-ppo-factored``,
:mod:`agents.factored`: the same distribution, without the K·P·D per-action layer, and its
compact rollout buffer :mod:`agents.factored_buffer`); ``factored-2t`` the same with two torch
threads. A closing line says PASS or FAIL for the fastest row at K = 256 (steady CPU-time rate)
against the target (>= 1,000 env steps/s). ``target_kl`` is off so that every update does
the same number of gradient steps in every configuration (early stopping would make the update
time depend on the sampled actions). The header prints the load average: other processes on
the machine slow every row, so compare ratios within one run. ``--profile`` runs the measured
``learn()`` under ``cProfile`` and prints the share of its time in the env, the rollout forward,
the rollout buffer, minibatch assembly, ``evaluate_actions``, ``backward``, the optimizer and
the rest (:data:`PROFILE_GROUPS`; with ``--reference``, for that tree too).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from agents import build_model, env_kwargs, make_env, train_env_spec
from agents.callbacks import TimedVecEnv, TimingCallback


@dataclass(frozen=True)
class Config:
    """One learner configuration.

    :param name: row label.
    :param sparse: ``PDClusterScorer(sparse=...)``.
    :param stock_distribution: use sb3-contrib's ``MaskableCategoricalDistribution`` instead of
        the policy's own (log_softmax-normalised) one.
    :param threads: ``torch.set_num_threads`` during the measurement.
    :param algo: ``agents.ALGOS`` name (``maskable-ppo-factored``: the factorised slot-then-pair
        head of :mod:`agents.factored`).
    """

    name: str
    sparse: bool
    stock_distribution: bool
    threads: int
    algo: str = "maskable-ppo"


CONFIGS = (
    Config("reference", sparse=False, stock_distribution=True, threads=1),
    Config("sparse", sparse=True, stock_distribution=True, threads=1),
    Config("default", sparse=True, stock_distribution=False, threads=1),
    Config("default-2t", sparse=True, stock_distribution=False, threads=2),
    Config("factored", True, False, threads=1, algo="maskable-ppo-factored"),
    Config("factored-2t", True, False, threads=2, algo="maskable-ppo-factored"),
)
#: The target: PPO env steps per second of ``learn()`` at K = 256.
TARGET_STEPS_PER_S = 1000.0
TARGET_K = 256


def recorded_observations(kwargs: dict[str, Any], n: int) -> list[tuple[dict, np.ndarray]]:
    """The first ``n`` (observation, action mask) pairs of HexAgent's episode on seed 0."""
    from heuristics import make_policy

    env = make_env(train_env_spec("pd-cluster-v0"), kwargs)
    expert = make_policy("hexagent")
    obs, info = env.reset(seed=0)
    out = []
    while len(out) < n:
        out.append((obs, np.asarray(info["action_mask"], dtype=bool)))
        obs, _, terminated, truncated, info = env.step(expert.act(obs, info))
        if terminated or truncated:
            obs, info = env.reset(seed=len(out))
    return out


#: ``--profile`` groups: label -> (file path ending, function name) of the outermost calls.
PROFILE_GROUPS: dict[str, tuple[tuple[str, str], ...]] = {
    "env": (
        ("agents/callbacks.py", "step_wait"),
        ("agents/callbacks.py", "env_method"),
        ("agents/callbacks.py", "reset"),
    ),
    "rollout forward": (
        ("agents/factored.py", "forward"),
        ("sb3_contrib/common/maskable/policies.py", "forward"),
    ),
    "rollout buffer": (
        ("sb3_contrib/common/maskable/buffers.py", "add"),
        ("agents/factored_buffer.py", "add"),
        ("sb3_contrib/common/maskable/buffers.py", "reset"),
        ("agents/factored_buffer.py", "reset"),
        ("stable_baselines3/common/buffers.py", "compute_returns_and_advantage"),
    ),
    "minibatches": (
        ("sb3_contrib/common/maskable/buffers.py", "get"),
        ("agents/factored_buffer.py", "get"),
    ),
    "evaluate_actions": (
        ("agents/factored.py", "evaluate_actions"),
        ("sb3_contrib/common/maskable/policies.py", "evaluate_actions"),
    ),
    "backward": (("torch/_tensor.py", "backward"),),
    "optimizer + clip": (
        ("torch/optim/optimizer.py", "wrapper"),
        ("torch/nn/utils/clip_grad.py", "clip_grad_norm_"),
    ),
}


def profile_split(profiler: Any) -> dict[str, float]:
    """Shares of ``learn()``'s cumulative time in a ``cProfile`` run by :data:`PROFILE_GROUPS`
    (``other``: the rest: SB3's loops, callbacks, losses)."""
    import pstats

    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def cum(file_end: str, name: str) -> float:
        return sum(v[3] for k, v in stats.items() if k[0].endswith(file_end) and k[2] == name)

    total = cum("sb3_contrib/ppo_mask/ppo_mask.py", "learn")
    out = {label: sum(cum(*fn) for fn in fns) / total for label, fns in PROFILE_GROUPS.items()}
    out["other"] = 1.0 - sum(out.values())
    return out


def _timed(cls: type, arg: Any, clock: Any) -> Any:
    """``cls(arg, clock=clock)``, or ``cls(arg)`` in a tree whose timers have no clock (a
    ``--reference`` tree older than it: its env / infer / update split is then of wall time;
    its steps per CPU second, the figure compared, are not affected)."""
    try:
        return cls(arg, clock=clock)
    except TypeError:
        return cls(arg)


def measure(
    cfg: Config, kwargs: dict[str, Any], args: argparse.Namespace, observations: list
) -> dict[str, float]:
    """Run ``learn()`` and the single-observation predictions for one configuration.

    ``--warmup`` rollouts first (a fresh model's ``learn()``: the envs' first resets, first
    calls), then ``--rollouts`` more in a second ``learn(reset_num_timesteps=False)``, which
    continues the same episodes: the steady rate of a training run, the figure reported. Times
    are the process's CPU time (``time.process_time``) unless named wall.
    """
    from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
    from stable_baselines3.common.vec_env import DummyVecEnv

    spec = train_env_spec("pd-cluster-v0")
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(cfg.threads)
    clock = time.process_time
    try:
        envs = [(lambda i=i: make_env(spec, kwargs, seed=i, lean=True)) for i in range(args.envs)]
        venv = _timed(TimedVecEnv, DummyVecEnv(envs), clock)
        # n_steps is per env in SB3: the same env steps per rollout whatever the env count
        n_steps = max(1, args.n_steps // args.envs)
        hyper = {"n_steps": n_steps, "batch_size": args.batch_size, "target_kl": None}
        model: Any = build_model(
            cfg.algo,
            venv,
            spec,
            seed=0,
            hyperparams=hyper,
            extractor_kwargs={"sparse": cfg.sparse},
        )
        if cfg.stock_distribution:
            model.policy.action_dist = MaskableCategoricalDistribution(int(venv.action_space.n))
        cold_cpu = float("nan")
        if args.warmup:
            start_cpu = clock()
            model.learn(total_timesteps=args.warmup * n_steps * args.envs)
            cold_cpu = model.num_timesteps / (clock() - start_cpu)
        timing = _timed(TimingCallback, venv, clock)
        steps = args.rollouts * n_steps * args.envs
        env_before, done_before = venv.env_seconds, model.num_timesteps
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        start, start_cpu = time.perf_counter(), clock()
        model.learn(total_timesteps=steps, callback=timing, reset_num_timesteps=not args.warmup)
        wall = time.perf_counter() - start
        cpu = clock() - start_cpu
        if profiler is not None:
            profiler.disable()
        for obs, mask in observations[:5]:  # warm-up
            model.predict(obs, deterministic=True, action_masks=mask)
        t = time.perf_counter()
        for obs, mask in observations:
            model.predict(obs, deterministic=True, action_masks=mask)
        predict_ms = (time.perf_counter() - t) / len(observations) * 1e3
        venv.close()
    finally:
        torch.set_num_threads(previous_threads)
    env_s = venv.env_seconds - env_before
    done = model.num_timesteps - done_before
    return {
        "steps_per_s": done / wall,
        "cpu_steps_per_s": done / cpu,
        "cold_cpu_steps_per_s": cold_cpu,
        "env": env_s / cpu,
        "infer": (timing.rollout_s - env_s) / cpu,
        "update": (cpu - timing.rollout_s) / cpu,
        "predict_ms": predict_ms,
        "wall": wall,
        "profile": profile_split(profiler) if profiler is not None else {},
    }


def measure_reference(cfg: Config, k: int, args: argparse.Namespace) -> dict[str, float]:
    """:func:`measure` on the code in ``args.reference`` (this script, that tree's modules),
    in a subprocess."""
    env = {**os.environ, "PYTHONPATH": os.path.abspath(args.reference)}
    cmd = [sys.executable, os.path.abspath(__file__), "--json", "--configs", cfg.name]
    cmd += ["--slots", str(k), "--count", str(args.count), "--n-steps", str(args.n_steps)]
    cmd += ["--envs", str(args.envs), "--batch-size", str(args.batch_size)]
    cmd += ["--rollouts", str(args.rollouts), "--warmup", str(args.warmup)]
    cmd += ["--predicts", str(args.predicts)] + (["--profile"] if args.profile else [])
    out = subprocess.run(cmd, env=env, cwd=args.reference, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"the reference run in {args.reference} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--slots", default="16,256", help="comma-separated K values")
    ap.add_argument("--count", type=int, default=30, help="workflows per episode")
    ap.add_argument("--n-steps", type=int, default=512, help="PPO env steps per rollout")
    ap.add_argument(
        "--envs",
        type=int,
        default=1,
        help="envs in one DummyVecEnv (stepped in turn; the policy acts on all at once)",
    )
    ap.add_argument("--batch-size", type=int, default=256, help="PPO minibatch size")
    ap.add_argument("--rollouts", type=int, default=4, help="measured rollouts (and updates)")
    ap.add_argument(
        "--warmup", type=int, default=1, help="rollouts (and updates) before the measured ones"
    )
    ap.add_argument("--predicts", type=int, default=200, help="single-observation predictions")
    ap.add_argument(
        "--configs",
        default="reference,sparse,default,factored",
        help=f"comma-separated, first is the reference; of {', '.join(c.name for c in CONFIGS)}",
    )
    ap.add_argument(
        "--reference",
        help="an exported tree of older code: each configuration is also run on it (this "
        "script, that tree's modules) in a subprocess, alternating with this tree",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the measured learn() and print its split (rates then include cProfile's "
        "overhead)",
    )
    ap.add_argument("--quick", action="store_true", help="one rollout of 128 steps, 50 predicts")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.n_steps, args.batch_size, args.rollouts, args.predicts = 128, 64, 1, 50
    by_name = {c.name: c for c in CONFIGS}
    names = args.configs.split(",")
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown configs {unknown}; known: {', '.join(by_name)}")
    configs = [by_name[n] for n in names]
    slot_counts = [int(k) for k in args.slots.split(",")]
    spec = train_env_spec("pd-cluster-v0")
    if args.json:  # the reference's subprocess: one configuration, one K, one JSON line
        kwargs = env_kwargs(
            spec, {"workload": "mixed", "count": args.count, "slots": slot_counts[0]}
        )
        observations = recorded_observations(kwargs, args.predicts)
        print(json.dumps(measure(configs[0], kwargs, args, observations)))
        return
    print(
        f"MaskablePPO on PDCluster-v0 (hetero-1, mixed, {args.count} workflows), "
        f"{args.envs} env(s), {args.warmup} warm-up + {args.rollouts} measured rollouts of "
        f"{args.n_steps} steps, batch {args.batch_size}; {args.predicts} single-observation "
        f"predicts; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} on "
        f"{os.cpu_count()} cores"
    )
    header = (
        f"{'K':>4}  {'config':<11}{'steps/s':>9}{'cpu st/s':>10}{'env %':>7}{'infer %':>9}"
        f"{'update %':>10}{'cold cpu':>10}{'predict ms':>12}{'x steps/s':>11}{'x predict':>11}"
        f"{'wall s':>8}" + (f"{'ref cpu':>9}{'x ref':>7}" if args.reference else "")
    )
    print(header)
    best: tuple[float, str] | None = None
    for k in slot_counts:
        kwargs = env_kwargs(spec, {"workload": "mixed", "count": args.count, "slots": k})
        observations = recorded_observations(kwargs, args.predicts)
        first: dict[str, float] | None = None
        for cfg in configs:
            ref = measure_reference(cfg, k, args) if args.reference else None
            r = measure(cfg, kwargs, args, observations)
            first = first or r
            line = (
                f"{k:>4}  {cfg.name:<11}{r['steps_per_s']:>9,.0f}{r['cpu_steps_per_s']:>10,.0f}"
                f"{r['env']:>7.0%}{r['infer']:>9.0%}{r['update']:>10.0%}"
                f"{r['cold_cpu_steps_per_s']:>10,.0f}{r['predict_ms']:>12.2f}"
                f"{r['cpu_steps_per_s'] / first['cpu_steps_per_s']:>10.1f}x"
                f"{first['predict_ms'] / r['predict_ms']:>10.1f}x{r['wall']:>8.1f}"
            )
            if ref is not None:
                ratio = r["cpu_steps_per_s"] / ref["cpu_steps_per_s"]
                line += f"{ref['cpu_steps_per_s']:>9,.0f}{ratio:>6.2f}x"
            print(line, flush=True)
            for label, res in (("", r), ("reference ", ref)):
                if res is not None and res["profile"]:
                    parts = ", ".join(f"{n} {v:.1%}" for n, v in res["profile"].items())
                    print(f"      {label}cProfile split of learn(): {parts}")
            if k == TARGET_K and (best is None or r["cpu_steps_per_s"] > best[0]):
                best = (r["cpu_steps_per_s"], cfg.name)
    if best is not None:
        ok = best[0] >= TARGET_STEPS_PER_S
        when = (
            f"steady, after {args.warmup} warm-up rollout(s)"
            if args.warmup
            else "from a fresh model, with the envs' first resets"
        )
        print(
            f"{'PASS' if ok else 'FAIL'}: best PPO rate at K = {TARGET_K}: {best[0]:,.0f} env "
            f"steps/s of CPU time ({best[1]}; {when}; "
            f"target >= {TARGET_STEPS_PER_S:,.0f})"
        )
    if configs[0].name != "reference":
        print(f"(x steps/s and x predict are against {configs[0].name}, the first configuration)")


if __name__ == "__main__":
    main()
