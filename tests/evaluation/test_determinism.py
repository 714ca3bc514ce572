"""Same seed, same bytes: across runs, processes and ``PYTHONHASHSEED`` values (issue 13).

* ``evaluate.py`` run twice in fresh interpreters with different ``PYTHONHASHSEED`` values writes
  the same results, byte for byte, once the fields that are about the run rather than the
  result are dropped (:data:`RUN_DEPENDENT`).
* Vector envs: gymnasium's ``AsyncVectorEnv`` (one subprocess per env) and ``SyncVectorEnv``, and
  SB3's ``SubprocVecEnv`` and ``DummyVecEnv`` as ``agents.envs.make_vec_env`` builds them, give
  identical observations, rewards and episode ends for the same seeds and actions.
* Ray (docs/design.md, "Beyond one machine"): ``tests/evaluation/test_ray.py`` runs the same
  evaluate.py grid serially and as Ray tasks and compares the rows (skipped when Ray is not
  installed).
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from envs.pd_cluster import PDClusterEnv
from envs.routing import RoutingEnv

ROOT = Path(__file__).resolve().parents[2]

#: Fields that legitimately differ between two runs of the same command, per output file:
#: measured wall-clock time, the run's date, and the command line (it names the output
#: directory; compared with that directory masked out). Everything else must be identical.
RUN_DEPENDENT = {
    "results.json": ("wall_seconds",),  # per result row
    "results.csv": ("wall_seconds",),  # column
    "run.json": ("date", "wall_seconds"),
}

#: Tiny grids: two policies, one seed, a handful of workflows / requests.
GRIDS = {
    "pd-cluster": [
        "--workload", "mixed", "--policies", "per-call-fcfs,hexagent", "--seeds", "0",
        "--count", "4",
    ],
    "routing": [
        "--policies", "round-robin,goodserve", "--seeds", "0", "--count", "12",
        "--output-predictor", "task-mean",
    ],
}  # fmt: skip


def run_evaluate(env: str, out: Path, hash_seed: str) -> None:
    """``python evaluate.py`` on the tiny grid in a fresh interpreter."""
    cmd = [sys.executable, "evaluate.py", "--env", env, *GRIDS[env], "--quiet", "--out", str(out)]
    environ = {**os.environ, "PYTHONHASHSEED": hash_seed, "WANDB_MODE": "disabled"}
    subprocess.run(cmd, cwd=ROOT, env=environ, check=True, capture_output=True, timeout=300)


def canonical(path: Path) -> bytes:
    """The file's bytes without the :data:`RUN_DEPENDENT` fields (and the output directory)."""
    text = path.read_text().replace(str(path.parent), "<out>")
    drop = RUN_DEPENDENT.get(path.name, ())
    if path.suffix == ".json":
        data = json.loads(text)
        rows = data if isinstance(data, list) else [data]
        for row in rows:
            for key in drop:
                assert key in row, f"{path.name} no longer has {key!r}: update RUN_DEPENDENT"
                del row[key]
        return json.dumps(data, sort_keys=False).encode()
    if path.suffix == ".csv":
        rows = list(csv.DictReader(io.StringIO(text)))
        buf = io.StringIO()
        fields = [f for f in rows[0] if f not in drop]
        writer = csv.DictWriter(buf, fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
        return buf.getvalue().encode()
    return text.encode()


@pytest.mark.parametrize("env", sorted(GRIDS))
@pytest.mark.slow
def test_evaluate_output_is_identical_across_processes_and_hash_seeds(
    env: str, tmp_path: Path
) -> None:
    outs = {seed: tmp_path / f"hash{seed}" for seed in ("0", "12345")}
    with ThreadPoolExecutor(2) as pool:  # two interpreters side by side
        list(pool.map(lambda kv: run_evaluate(env, kv[1], kv[0]), outs.items()))
    a, b = outs.values()
    files = sorted(p.name for p in a.iterdir() if p.suffix in (".json", ".csv", ".txt"))
    assert {"results.json", "results.csv", "run.json", "table.txt"} <= set(files)
    assert files == sorted(p.name for p in b.iterdir() if p.suffix in (".json", ".csv", ".txt"))
    for name in files:
        assert canonical(a / name) == canonical(b / name), f"{name} differs between processes"
    rows = json.loads((a / "results.json").read_text())
    assert len(rows) == len(GRIDS[env][GRIDS[env].index("--seeds") + 1].split(",")) * 2


# -- vector envs -------------------------------------------------------------------------------
def small_pd_env() -> gym.Env:
    return PDClusterEnv(workload="mixed", workload_count=2, slots=4, estimate_error=0.2)


def small_routing_env() -> gym.Env:
    return RoutingEnv(workload_count=8, output_predictor="task-mean", check_interval=5)


def vector_trajectory(vec: Any, masks_of: Any, step_env: Any, steps: int) -> list[tuple]:
    """``steps`` steps of a vector env, each sub-env taking its lowest legal action; returns
    (observations, rewards, episode-end flags...) per step. ``step_env(vec, actions)`` returns
    (observations, rewards, flags...)."""
    out = []
    for _ in range(steps):
        masks = np.stack(masks_of(vec))
        # an all-false mask: the sub-env ended last step and this step resets it (gymnasium's
        # next-step autoreset ignores the action)
        actions = np.array([np.flatnonzero(m)[0] if m.any() else 0 for m in masks])
        obs, rewards, *ends = step_env(vec, actions)
        out.append((obs, np.asarray(rewards), *[np.asarray(e) for e in ends]))
    return out


def assert_same_trajectories(a: list[tuple], b: list[tuple]) -> None:
    assert len(a) == len(b)
    for k, (sa, sb) in enumerate(zip(a, b, strict=True)):
        obs_a, obs_b = sa[0], sb[0]
        for key in obs_a:
            assert np.array_equal(obs_a[key], obs_b[key]), f"step {k}: observation {key!r}"
        for x, y in zip(sa[1:], sb[1:], strict=True):
            assert np.array_equal(x, y), f"step {k}: {x} != {y}"


@pytest.mark.parametrize("make", [small_pd_env, small_routing_env], ids=["pd-cluster", "routing"])
def test_gymnasium_async_and_sync_vector_envs_agree(make: Any) -> None:
    """Subprocess workers (AsyncVectorEnv) and in-process ones (SyncVectorEnv): same seeds, same
    actions, same steps (through episode ends and autoresets)."""
    trajectories = []
    for cls in (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv):
        vec = cls([make, make])
        try:
            obs, _ = vec.reset(seed=[3, 4])
            traj = vector_trajectory(
                vec,
                lambda v: v.call("action_masks"),
                lambda v, a: v.step(a)[:4],
                steps=300,
            )
            trajectories.append([(obs, np.zeros(2), np.zeros(2), np.zeros(2)), *traj])
        finally:
            vec.close()
    assert_same_trajectories(*trajectories)
    assert any(s[2].any() for s in trajectories[0]), "no episode ended: lengthen the run"


@pytest.mark.slow
def test_sb3_subproc_and_dummy_vector_envs_agree() -> None:
    """``agents.envs.make_vec_env`` (what ``train.py`` uses): SubprocVecEnv = DummyVecEnv."""
    from agents.envs import make_vec_env

    kwargs = {"workload": "mixed", "workload_count": 2, "slots": 4}
    trajectories = []
    for vec_kind in ("dummy", "subproc"):
        vec = make_vec_env("pd-cluster", kwargs, n_envs=2, seed=11, vec=vec_kind)
        try:
            obs = vec.reset()
            traj = vector_trajectory(
                vec,
                lambda v: v.env_method("action_masks"),
                # SB3's DummyVecEnv buffers rewards as float32, SubprocVecEnv passes float64:
                # compare both at float32 (a difference of SB3's, not of the env)
                lambda v, a: (lambda o, r, d: (o, r.astype(np.float32), d))(*v.step(a)[:3]),
                steps=300,
            )
            trajectories.append([(obs, np.zeros(2), np.zeros(2)), *traj])
        finally:
            vec.close()
    assert_same_trajectories(*trajectories)
    assert any(s[2].any() for s in trajectories[0]), "no episode ended: lengthen the run"


# Ray workers: tests/evaluation/test_ray.py::test_evaluate_on_ray_gives_the_serial_rows runs the
# same evaluate.py grid serially and as Ray tasks and compares the rows.
