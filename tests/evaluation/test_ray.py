"""Ray scale-out gives the serial answers: evaluate.py --ray returns the same rows as the serial
run, a failing task is reported by (policy, workload, seed) without losing the others' rows, and
RayVecEnv steps envs exactly as SB3's in-process DummyVecEnv does. Runs on a local Ray with
2 CPUs; skipped only when Ray is not installed (`.ci/run` installs it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[ray]'")

pytestmark = pytest.mark.slow  # a local Ray cluster per module: make test-all only

import evaluate  # noqa: E402
import evaluation  # noqa: E402
from agents.distributed import RayVecEnv, init_ray  # noqa: E402

#: How a run was computed, not what it produced: may differ between the serial and Ray runs.
RUN_DEPENDENT = ("wall_seconds",)


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Any:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def canonical(rows: list[dict[str, Any]]) -> str:
    return json.dumps(
        [{k: v for k, v in r.items() if k not in RUN_DEPENDENT} for r in rows],
        sort_keys=True,
        default=float,
    )


def test_evaluate_on_ray_gives_the_serial_rows() -> None:
    config = evaluation.EvalConfig(
        workloads=("bfcl", "mixed"),
        policies=("per-call-fcfs", "hexagent"),
        seeds=(0, 1),
        count=5,
        quiet=True,
    )
    serial = evaluation.evaluate(config)
    on_ray = evaluation.evaluate(evaluation.EvalConfig(**{**config.__dict__, "ray": "local"}))
    assert len(on_ray) == 8
    assert canonical(on_ray) == canonical(serial)


def test_a_failing_task_is_named_and_the_others_rows_are_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.py").write_text(
        "class Bad:\n"
        "    name = 'bad'\n"
        "    def reset(self):\n"
        "        pass\n"
        "    def act(self, obs, info):\n"
        "        raise RuntimeError('boom')\n"
        "def make():\n"
        "    return Bad()\n"
    )
    spec = f"py:{tmp_path / 'bad.py'}:make"
    status = evaluate.main(
        [
            "--workload", "bfcl", "--count", "4", "--seeds", "0,1", "--ray", "--quiet",
            "--policies", f"per-call-fcfs,{spec}", "--out", str(tmp_path / "out"),
        ]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert status == 1
    assert "2 of 4 runs failed" in err
    assert f"policy {spec!r} on bfcl seed 0" in err and f"policy {spec!r} on bfcl seed 1" in err
    assert "boom" in err and "Traceback" not in err
    rows = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sorted((r["policy"], r["seed"]) for r in rows) == [
        ("per-call-fcfs", 0),
        ("per-call-fcfs", 1),
    ]


def test_ray_vec_env_steps_like_the_in_process_vec_env() -> None:
    from stable_baselines3.common.vec_env import DummyVecEnv

    from agents.envs import _worker_env

    kwargs = {"workload": "mixed", "workload_count": 4, "slots": 8}
    fns = [lambda i=i: _worker_env("pd-cluster", kwargs, 10 + i, None) for i in range(2)]
    local, remote = DummyVecEnv(fns), RayVecEnv(fns)
    try:
        assert remote.observation_space == local.observation_space
        obs_l, obs_r = local.reset(), remote.reset()
        rng = np.random.default_rng(0)
        for _ in range(60):
            masks = np.stack(local.env_method("action_masks"))
            assert np.array_equal(masks, np.stack(remote.env_method("action_masks")))
            for key in obs_l:
                assert np.array_equal(obs_l[key], obs_r[key])
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            obs_l, rew_l, done_l, _ = local.step(actions)
            obs_r, rew_r, done_r, _ = remote.step(actions)
            assert np.array_equal(rew_l, rew_r) and np.array_equal(done_l, done_r)
    finally:
        local.close()
        remote.close()


def test_init_ray_reuses_the_running_instance() -> None:
    assert init_ray("local") is ray and ray.is_initialized()


def test_seeded_ppo_on_ray_actors_trains_the_serial_model(
    ppo_parameters: Any, assert_same_parameters: Any
) -> None:
    """train.py --ray's rollout path (make_vec_env(vec="ray")): the same seeded MaskablePPO run
    gives bit-identical parameters on Ray actors and in this process (issue 33)."""
    assert_same_parameters(ppo_parameters("dummy"), ppo_parameters("ray"))
