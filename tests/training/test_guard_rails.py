"""Specifications of train.py's warnings about itself: a clone at or below chance or worse than a
random legal policy, a schedule that draws no evaluation curve or runs other steps than asked,
and where the W&B run went."""

from __future__ import annotations

import json
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest

import train
from envs.registry import Metric
from training.checks import (
    RandomLegalPolicy,
    chance_accuracy,
    clone_warnings,
    rollout_size,
    schedule_warnings,
)
from training.config import TrainConfig

GOODPUT = Metric("goodput", "goodput", better="higher")
REQ99 = Metric("req99", "Req99", better="lower")


def test_timesteps_below_eval_every_warns_of_no_curve():
    (message,) = schedule_warnings(timesteps=1024, eval_every=10_000, rollout=1024)
    assert "--timesteps 1024 < --eval-every 10000: no evaluation curve" in message


def test_timesteps_off_the_rollout_grid_says_what_runs_and_the_extra_evaluation():
    (message,) = schedule_warnings(timesteps=2500, eval_every=1000, rollout=1024)
    assert "RL runs 3072 steps" in message
    assert "evaluating at steps 1000, 2000, 3000 and at the end" in message
    assert "(evaluation at step 3000 beyond --timesteps)" in message


def test_a_schedule_on_the_grid_or_bc_only_warns_nothing():
    assert schedule_warnings(timesteps=20_480, eval_every=10_240, rollout=1024) == []
    assert schedule_warnings(timesteps=0, eval_every=10_000, rollout=1024) == []


def test_rollout_size_is_n_steps_times_envs():
    cfg = TrainConfig(env="routing-v1", n_envs=2, hyperparams={"n_steps": 64})
    assert rollout_size(cfg) == 128
    assert rollout_size(TrainConfig(env="routing-v1", n_envs=3)) == 3 * 512  # PPO_DEFAULTS


def test_chance_is_the_mean_of_one_over_the_legal_count():
    masks = np.array([[1, 1, 1, 1], [1, 0, 0, 0]], dtype=bool)
    assert chance_accuracy(masks) == pytest.approx((0.25 + 1.0) / 2)


def test_clone_warnings_in_each_metric_direction():
    (chance,) = clone_warnings(0.06, 0.25, clone=1.0, random=0.5, metric=GOODPUT)
    assert "accuracy 0.060 is at or below chance (0.250" in chance
    (worse,) = clone_warnings(0.9, 0.25, clone=0.04, random=0.5, metric=GOODPUT)
    assert "goodput 0.040 is worse than a random legal policy's 0.500" in worse
    (worse,) = clone_warnings(0.9, 0.25, clone=2.0, random=1.5, metric=REQ99)
    assert "req99 2.000 is worse" in worse
    assert clone_warnings(0.9, 0.25, clone=1.2, random=1.5, metric=REQ99) == []


def test_random_legal_policy_picks_only_legal_actions_and_needs_the_mask():
    policy = RandomLegalPolicy(seed=3)
    policy.reset()
    mask = np.array([0, 1, 0, 1, 0], dtype=bool)
    picks = {policy.act(None, {"action_mask": mask}) for _ in range(50)}
    assert picks == {1, 3}
    with pytest.raises(ValueError, match="action_mask"):
        policy.act(None, {})


def test_wandb_location_names_the_sync_command_or_disabled(tmp_path, monkeypatch):
    from agents.wandb_utils import init_run, where

    monkeypatch.setenv("WANDB_MODE", "offline")  # WANDB_MODE overrides init_run's mode
    run = init_run("offline", tmp_path, {}, name="t")
    try:
        line = where(run)
    finally:
        run.finish()
    (directory,) = (tmp_path / "wandb").glob("offline-run-*")
    assert line.endswith(f"wandb sync {directory}")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run = init_run("disabled", tmp_path, {}, name="t")
    assert where(run).startswith("W&B: disabled")
    run.finish()


@pytest.mark.slow
def test_a_tiny_clone_warns_and_records_it(tmp_path, capsys, monkeypatch):
    """The reported case: 4 episodes, 2 epochs of behaviour cloning on short Routing-v1
    episodes clone GoodServe at or below chance; the run says so on stderr and in eval.json,
    and names where its W&B run went at the start and at the end."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    out = tmp_path / "run"
    argv = [
        "--env", "routing-v1", "--count", "20", "--bc-episodes", "4", "--bc-epochs", "2",
        "--timesteps", "0", "--eval-episodes", "1", "--val-episodes", "1",
        "--baselines", "round-robin", "--quiet", "--wandb", "disabled", "--out", str(out),
    ]  # fmt: skip
    assert train.main(argv) == 0
    captured = capsys.readouterr()
    report = json.loads((out / "eval.json").read_text())
    assert any("at or below chance" in w for w in report["warnings"]), report["warnings"]
    assert "train.py: warning: behaviour cloning: accuracy" in captured.err
    assert captured.out.count("W&B: disabled") == 2
    assert report["bc"]["chance_accuracy"] > report["bc"]["history"][-1]["accuracy"]
    assert set(report["bc"]["random_eval"]) == {"goodput", "slo_violation_ratio"}
