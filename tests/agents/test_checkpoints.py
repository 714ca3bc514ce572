"""The shipped policies (checkpoints/<family>/) load as ``ckpt:checkpoints/<family>``
on their family's default settings and act legally under every default workload's action mask;
a checkpoint directory without its model is a clear error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import evaluation
from agents.checkpoint import FlatOnTwoStep, resolve_checkpoint

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ("pd-cluster", "routing", "allocation")
STEPS = 12


@pytest.fixture(autouse=True)
def _in_repo(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the spec is the path a user types in a fresh clone


@pytest.mark.parametrize("family", [*FAMILIES, *(f"{f}-v0" for f in FAMILIES)])
def test_shipped_checkpoint_acts_legally_on_every_default_workload(family: str) -> None:
    # a family's v0-trained policy where one ships beside its v1 policy (routing-v0/)
    name = family if (ROOT / "checkpoints" / family).is_dir() else family.removesuffix("-v0")
    spec = f"ckpt:checkpoints/{name}"
    assert (ROOT / "checkpoints" / name / "model.zip").is_file()
    assert (ROOT / "checkpoints" / name / "README.md").is_file()
    entry = evaluation.env_entry(family)
    # count (PDCluster, Routing) and period_seconds (Allocation) only shorten the episode; the
    # spaces are the family's defaults
    short = {"period_seconds": 10.0} if family.startswith("allocation") else {"count": 6}
    config = evaluation.EvalConfig(env=family, policies=(spec,), quiet=True, **short)
    policy = None
    for workload in entry.workloads:
        env = evaluation.make_env(config, workload)
        # loading is the slow part; the workloads share the spaces. A policy that computes an
        # opt-in observation reads the env it was loaded for: load it per env.
        if policy is None or policy.observe is not None or isinstance(policy, FlatOnTwoStep):
            policy = evaluation.resolve_policy(spec, env, family)
        if isinstance(policy, FlatOnTwoStep):  # the v0 PDCluster model in v1's two-step space
            assert family == "pd-cluster" and env.unwrapped.action_space_name == "two-step"
        else:
            assert policy.model.action_space == env.action_space
        if policy.observe is None and not isinstance(policy, FlatOnTwoStep):
            assert policy.model.observation_space == env.observation_space
        policy.reset()
        obs, info = env.reset(seed=1_000_000)
        actions = []
        for _ in range(STEPS):
            mask = np.asarray(info["action_mask"], dtype=bool)
            action = policy.act(obs, info)
            if policy.observe is not None:  # an opt-in observation (config.json), from the env
                assert policy.model.observation_space.contains(policy.observe())
            assert mask[action], f"{family}/{workload}: illegal action {action}"
            actions.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert actions, f"{family}/{workload}: no decision to take"
        env.close()


def test_shipped_checkpoints_adopt_the_default_spaces() -> None:
    for family in FAMILIES:
        config = evaluation.EvalConfig(env=family, policies=(f"ckpt:checkpoints/{family}",))
        adopted = evaluation.checkpoint_settings(config, config.policies)
        defaults = evaluation.env_defaults(family)
        entry = evaluation.env_entry(family)
        for name, value in adopted.items():
            expected = entry.cluster if name == "cluster" else defaults.get(name)
            assert value == expected, f"{family}: trained with {name}={value}, default {expected}"


def test_a_checkpoint_directory_without_a_model_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="has no model.zip"):
        resolve_checkpoint(tmp_path / "empty")
    env = evaluation.make_env(evaluation.EvalConfig(env="allocation"), "rag_reranker")
    with pytest.raises(evaluation.EvaluationError, match="has no model.zip"):
        evaluation.resolve_policy(f"ckpt:{tmp_path / 'empty'}", env, "allocation")
    assert resolve_checkpoint(ROOT / "checkpoints" / "allocation") == (
        ROOT / "checkpoints" / "allocation" / "model.zip"
    )
