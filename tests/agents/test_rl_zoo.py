"""``agents/zoo/ppo.yml`` is a working RL Baselines3 Zoo hyperparameter file: one entry per
servegym id, its ``env_kwargs`` are train.py's training defaults (the same MDP), and the rest
builds SB3's PPO on the env (RL Zoo itself is an optional extra, ``pip install -e '.[zoo]'``)."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

import envs
from agents import TRAIN_ENVS, env_kwargs

ZOO_FILE = Path(__file__).resolve().parents[2] / "agents" / "zoo" / "ppo.yml"
#: Keys RL Zoo consumes itself (rl_zoo3.exp_manager); everything else goes to PPO(...).
ZOO_KEYS = {"policy", "n_envs", "n_timesteps", "env_kwargs", "normalize"}


def zoo() -> dict:
    return yaml.safe_load(ZOO_FILE.read_text())


def test_every_registered_id_has_an_entry():
    assert sorted(zoo()) == sorted({gym_id for gym_id, _ in envs.CLI_ENVS.values()})


@pytest.mark.parametrize("short", sorted(TRAIN_ENVS))
def test_env_kwargs_are_train_pys_training_defaults(short):
    spec = TRAIN_ENVS[short]
    options = {**spec.defaults}
    assert zoo()[spec.gym_id]["env_kwargs"] == env_kwargs(spec, options)


@pytest.mark.parametrize(
    "gym_id",
    [
        "servegym/PDCluster-v0",
        "servegym/Routing-v0",
        "servegym/PDCluster-v1",
        "servegym/Routing-v1",
    ],
)
def test_the_entry_builds_ppo_on_the_env_and_it_acts(gym_id):
    from stable_baselines3 import PPO

    entry = zoo()[gym_id]
    ppo_kwargs = {k: v for k, v in entry.items() if k not in ZOO_KEYS}
    env = gym.make(gym_id, **entry["env_kwargs"])
    model = PPO(entry["policy"], env, device="cpu", **ppo_kwargs)
    obs, _ = env.reset(seed=0)
    action, _ = model.predict(obs)
    assert env.action_space.contains(int(action))
    *_, info = env.step(int(action))  # masked or not, any action in the space is accepted
    assert "metrics" in info and isinstance(info["invalid_action"], bool)
    assert np.isfinite(float(entry["n_timesteps"]))
