"""PDCluster's action spaces side by side: stock MaskablePPO speed and episode lengths.

    python -m benchmarks.pd_action_space [--slots 256] [--rollouts 1] [--threads 1]
        [--spaces two-step,flat] [--episodes 0,1] [--skip-ppo] [--skip-episodes] [--exit-zero]

**Speed.** For each action space (``two-step``: ``servegym/PDCluster-v1``; ``flat``: the same
env with ``action_space="flat"``, PDCluster-v0's space, so the two differ in the space alone)
at the default workload (hetero-1, ``mixed``, 100 workflows) and
``--slots`` K, sb3-contrib's MaskablePPO with its stock ``MultiInputPolicy`` and default
settings (n_steps 2,048, batch 64, 10 epochs) learns one warm-up rollout (the env's first reset
and the model's first update), then ``--rollouts`` measured rollouts with their updates
(``learn(reset_num_timesteps=False)``), with ``--threads`` torch threads (1, as ``train.py``:
on a busy 2-core machine idle OpenMP threads spin-wait). Printed: env steps per second of wall
time and per second of process CPU time (the machine is shared: other processes inflate the
wall time, hardly the CPU time), the two-step / flat ratio, and PASS/FAIL of the two-step row
(CPU) against the target of >= 500 steps/s; the exit status is 1 on FAIL unless ``--exit-zero``
(``python -m evaluation.report`` records the verdict with the load average it ran under).

**Episode lengths.** Per reset seed in ``--episodes``, one whole default episode (K = 256) of
a uniformly random legal action (what an untrained masked policy does: every legal action,
keep included, equally likely) and of HexAgent, in both spaces, and (two-step only) of
``new-then-keep``: place each call that has no plan yet on its first legal pair, then keep (the
shortest episode a policy that places every new call itself can have): steps per episode, and
for the two-step space how many of them were keep actions. HexAgent never keeps, so its two-step
episode is its flat one plus one pair step per prefill-stage pick.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import gymnasium as gym
import numpy as np

import envs  # noqa: F401  (registers the ids)

ENV_ID = "servegym/PDCluster-v1"
#: gym.make keyword arguments of each action space on ENV_ID.
SPACES: dict[str, dict[str, Any]] = {"flat": {"action_space": "flat"}, "two-step": {}}
TARGET = 500.0


def ppo_speed(space: str, slots: int, rollouts: int) -> tuple[float, float]:
    """(wall steps/s, CPU steps/s) of stock MaskablePPO learning on ``space``."""
    from sb3_contrib import MaskablePPO

    env = gym.make(ENV_ID, slots=slots, **SPACES[space])
    model = MaskablePPO("MultiInputPolicy", env, seed=0, device="cpu", verbose=0)
    model.learn(model.n_steps)  # warm-up: first reset, first update
    steps = rollouts * model.n_steps
    wall, cpu = time.perf_counter(), time.process_time()
    model.learn(steps, reset_num_timesteps=False)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    env.close()
    return steps / wall, steps / cpu


def episode_length(space: str, policy: str, seed: int) -> tuple[int, int, float]:
    """(steps, keep actions, wall seconds) of one default episode of ``policy`` (``random``:
    uniform over the legal actions; ``new-then-keep``: see the module docstring; else a
    registered heuristic)."""
    from heuristics import make_policy

    env = gym.make(ENV_ID, decision_context=True, **SPACES[space]).unwrapped
    rng = np.random.default_rng(seed)
    expert = None if policy in ("random", "new-then-keep") else make_policy(policy)
    if expert is not None:
        expert.reset()
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options={"observations": False})
    steps = keeps = 0
    done = False
    while not done:
        if policy == "new-then-keep":
            action = new_then_keep(env, info["decision_context"], info["action_mask"])
        elif expert is None:
            action = int(rng.choice(np.flatnonzero(env.action_masks())))
        else:
            action = expert.act(obs, info)
        keeps += space == "two-step" and action == env.K and env._selected < 0
        obs, _, terminated, truncated, info = env.step(action)
        steps += 1
        done = terminated or truncated
    return steps, keeps, time.perf_counter() - start


def new_then_keep(env: Any, ctx: Any, mask: np.ndarray) -> int:
    """Two-step: the first open slot whose call has no plan, on its first legal pair; keep once
    every such call is placed (at the decode stage at once: every call there has a plan)."""
    if ctx.selected_slot >= 0:
        return int(np.flatnonzero(mask)[0])
    fresh = np.flatnonzero(mask[: env.K] & (ctx.planned_prefill < 0))
    return int(fresh[0]) if ctx.stage == "prefill" and fresh.size else env.K


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=256)
    parser.add_argument("--rollouts", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's own)")
    parser.add_argument("--spaces", default="two-step,flat", help="action spaces to time")
    parser.add_argument("--episodes", default="0,1", help="reset seeds of the length runs")
    parser.add_argument("--skip-ppo", action="store_true")
    parser.add_argument("--skip-episodes", action="store_true")
    parser.add_argument(
        "--exit-zero", action="store_true", help="exit 0 even when the speed target fails"
    )
    args = parser.parse_args(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; torch threads "
        f"{torch.get_num_threads()}; K = {args.slots}"
    )
    ok = True
    if not args.skip_ppo:
        print(f"{'space':10} {'steps/s':>8} {'cpu st/s':>9}")
        rates = {}
        for space in args.spaces.split(","):
            wall, cpu = ppo_speed(space, args.slots, args.rollouts)
            rates[space] = cpu
            print(f"{space:10} {wall:8.0f} {cpu:9.0f}", flush=True)
        if len(rates) == 2:
            print(f"two-step / flat (CPU): {rates['two-step'] / rates['flat']:.1f}x")
        if "two-step" in rates:
            ok = rates["two-step"] >= TARGET
            print(
                f"{'PASS' if ok else 'FAIL'}: two-step {rates['two-step']:.0f} CPU steps/s "
                f"(target >= {TARGET:.0f})"
            )
    if not args.skip_episodes:
        print(f"{'policy':10} {'space':10} {'seed':>4} {'steps':>7} {'keeps':>6} {'wall s':>7}")
        for seed in (int(s) for s in args.episodes.split(",")):
            for policy in ("random", "hexagent", "new-then-keep"):
                for space in SPACES if policy != "new-then-keep" else ("two-step",):
                    steps, keeps, wall = episode_length(space, policy, seed)
                    print(
                        f"{policy:10} {space:10} {seed:4d} {steps:7d} {keeps:6d} {wall:7.1f}",
                        flush=True,
                    )
    return 0 if ok or args.exit_zero else 1


if __name__ == "__main__":
    raise SystemExit(main())
