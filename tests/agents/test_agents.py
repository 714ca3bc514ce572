"""Specifications of agents/: per-action policy, permutation equivariance (PDCluster slots,
Routing instances), BC, save/load, the ``ckpt:`` policy in evaluate.py, best-model selection in
the env's metric direction."""

from __future__ import annotations

import functools
import os

os.environ.setdefault("WANDB_MODE", "disabled")

import gymnasium as gym
import numpy as np
import pytest
import torch as th

import evaluation
from agents import (
    TRAIN_ENVS,
    bc_train,
    build_model,
    collect,
    env_kwargs,
    load_policy,
    make_env,
)
from agents.bc import PaddedRows, discounted_returns
from agents.callbacks import PeriodicEvalCallback
from agents.extractors import RoutingScorer, SetPoolingExtractor
from heuristics import make_policy

SPEC = TRAIN_ENVS["pd-cluster-v0"]  # the flat space the scorer extractor reads
KWARGS = env_kwargs(SPEC, {"cluster": "hetero-1", "workload": "mixed", "count": 4, "slots": 4})


@pytest.fixture(scope="module")
def env():
    e = make_env(SPEC, KWARGS)
    yield e
    e.close()


@pytest.fixture(scope="module")
def demos(env):
    return collect(env, functools.partial(make_policy, "hexagent"), seeds=[0], gamma=0.99)


def fresh_model(env, seed: int = 0):
    th.set_num_threads(1)
    return build_model("maskable-ppo", env, SPEC, seed=seed, hyperparams={"n_steps": 64})


def test_policy_logits_are_one_score_per_action_and_respect_the_mask(env):
    model = fresh_model(env)
    obs, info = env.reset(seed=3)
    obs_t, _ = model.policy.obs_to_tensor(obs)
    dist = model.policy.get_distribution(obs_t, action_masks=info["action_mask"])
    probs = dist.distribution.probs[0].detach().numpy()
    assert probs.shape == (env.action_space.n,)
    assert np.all(probs[~info["action_mask"]] < 1e-6)
    assert probs[info["action_mask"]].sum() == pytest.approx(1.0, abs=1e-5)


def test_scores_are_equivariant_to_permuting_slots(env):
    model = fresh_model(env)
    obs, info = env.reset(seed=5)
    expert = make_policy("hexagent")
    while obs["slots"][:, 0].sum() - obs["slots"][:, 1].sum() < 2:  # two open slots
        obs, _, terminated, truncated, info = env.step(expert.act(obs, info))
        assert not (terminated or truncated), "no state with two open slots"
    k, p, d = obs["ratio"].shape
    perm = np.argsort(-obs["slots"][:, 0] + obs["slots"][:, 1], kind="stable")
    perm[[0, 1]] = perm[[1, 0]]
    permuted = {**obs, "slots": obs["slots"][perm], "ratio": obs["ratio"][perm]}
    fe = model.policy.features_extractor
    with th.no_grad():
        a = fe(model.policy.obs_to_tensor(obs)[0])[0, : k * p * d].reshape(k, p, d)
        b = fe(model.policy.obs_to_tensor(permuted)[0])[0, : k * p * d].reshape(k, p, d)
    np.testing.assert_allclose(a.numpy()[perm], b.numpy(), rtol=1e-5, atol=1e-5)


def test_collect_labels_every_step_with_the_expert_action(env, demos):
    assert len(demos) == demos.episodes[0]["steps"] > 0
    assert demos.masks[np.arange(len(demos)), demos.actions].all()
    assert demos.obs["ratio"].shape == (len(demos), *env.observation_space["ratio"].shape)


def test_collect_keeps_a_drawn_share_of_the_states_with_their_full_trajectory_returns(env, demos):
    """``keep`` < 1 records a random subset of the same expert trajectory: the kept states are
    the full run's states at the kept steps (labels, masks and returns-to-go included)."""
    expert = functools.partial(make_policy, "hexagent")
    part = collect(env, expert, [0], 0.99, rng=np.random.default_rng(1), keep=0.5)
    steps = demos.episodes[0]["steps"]
    assert part.episodes[0]["steps"] == steps and part.episodes[0]["kept"] == len(part)
    assert 0 < len(part) < steps
    kept = np.flatnonzero(np.random.default_rng(1).random(steps) < 0.5)
    np.testing.assert_array_equal(part.actions, demos.actions[kept])
    np.testing.assert_allclose(part.returns, demos.returns[kept])
    np.testing.assert_array_equal(part.obs["ratio"][np.arange(len(part))], demos.obs["ratio"][kept])
    with pytest.raises(ValueError, match="keep"):
        collect(env, expert, [0], 0.99, keep=0.5)
    with pytest.raises(ValueError, match="keep"):
        collect(env, expert, [0], 0.99, rng=np.random.default_rng(1), keep=0.0)


def test_padded_rows_store_less_and_index_like_the_dense_stack(env, demos):
    dense = np.stack([demos.obs["ratio"][i] for i in range(len(demos))])
    assert dense.shape == demos.obs["ratio"].shape
    idx = np.array([len(demos) - 1, 0, len(demos) // 2, 0])
    np.testing.assert_array_equal(demos.obs["ratio"][idx], dense[idx])
    np.testing.assert_array_equal(demos.obs["ratio"][1:3], dense[1:3])
    np.testing.assert_array_equal(demos.obs["ratio"][idx, 0, 1], dense[idx, 0, 1])
    # Only the filled slots are kept, and most states leave some of the 4 slots empty.
    assert demos.obs["ratio"].nbytes < dense.nbytes
    rows = PaddedRows((3, 2), np.float32)
    rows.append(np.array([[1, 0], [0, 0], [0, 0]], dtype=np.float32))
    rows.append(np.zeros((3, 2), dtype=np.float32))
    assert [r.shape for r in rows.rows] == [(1, 2), (0, 2)]
    first = np.array([[1, 0], [0, 0], [0, 0]])
    np.testing.assert_array_equal((rows + rows)[np.array([2, 1])], [first, np.zeros((3, 2))])
    with pytest.raises(ValueError, match="shape"):
        rows.append(np.zeros((2, 2)))
    scalars = PaddedRows((), np.float32)
    for v in (0.0, 2.5):
        scalars.append(np.float32(v))
    np.testing.assert_array_equal(scalars[np.array([1, 0])], [2.5, 0.0])
    assert scalars[1] == 2.5


def test_discounted_returns_sum_rewards_backwards():
    np.testing.assert_allclose(discounted_returns([1.0, 0.0, 2.0], 0.5), [1.5, 1.0, 2.0])


def test_bc_on_a_tiny_dataset_lowers_its_loss(env, demos):
    model = fresh_model(env)
    history = bc_train(model.policy, demos, epochs=4, batch_size=32, learning_rate=3e-3)
    assert history[-1].loss < history[0].loss
    assert history[-1].accuracy > 0.5


def test_save_load_gives_identical_actions_on_a_fixed_observation(env, tmp_path):
    model = fresh_model(env, seed=1)
    obs, info = env.reset(seed=7)
    mask = info["action_mask"]
    path = tmp_path / "model.zip"
    model.save(path)
    loaded = load_policy(path, env)
    before, _ = model.predict(obs, deterministic=True, action_masks=mask)
    assert loaded.act(obs, info) == int(before)
    obs_t, _ = model.policy.obs_to_tensor(obs)
    obs_l, _ = loaded.model.policy.obs_to_tensor(obs)
    with th.no_grad():
        p0 = model.policy.get_distribution(obs_t, action_masks=mask).distribution.probs
        p1 = loaded.model.policy.get_distribution(obs_l, action_masks=mask).distribution.probs
    assert th.equal(p0, p1)


def test_load_policy_rejects_a_model_for_another_action_space(env, tmp_path):
    model = fresh_model(env)
    model.save(tmp_path / "m.zip")
    other = make_env(SPEC, {**KWARGS, "slots": 5})
    with pytest.raises(ValueError, match="action space"):
        load_policy(tmp_path / "m.zip", other)


def test_eval_table_has_the_expert_row_and_the_checkpoint_row(env, tmp_path):
    model = fresh_model(env)
    path = tmp_path / "model.zip"
    model.save(path)
    config = evaluation.EvalConfig(
        workloads=("mixed",), policies=("hexagent", f"ckpt:{path}"), seeds=(0,), count=4,
        slots=4, quiet=True,
    )  # fmt: skip
    rows = evaluation.evaluate(config)
    table = evaluation.format_table(rows)
    lines = [line.split()[0] for line in table.splitlines() if line.strip()]
    assert "hexagent" in lines and f"ckpt:{path}" in lines


def test_checkpoint_results_do_not_depend_on_other_policies(env, tmp_path):
    model = fresh_model(env, seed=2)
    path = tmp_path / "model.zip"
    model.save(path)
    base = dict(workloads=("mixed",), seeds=(0,), count=4, slots=4, quiet=True)
    alone = evaluation.evaluate(evaluation.EvalConfig(policies=(f"ckpt:{path}",), **base))
    mixed = evaluation.evaluate(
        evaluation.EvalConfig(policies=("hexagent", f"ckpt:{path}"), **base)
    )
    assert alone[0]["metrics"] == [r for r in mixed if r["policy"] == f"ckpt:{path}"][0]["metrics"]


def test_unknown_checkpoint_is_a_clear_evaluation_error(env, tmp_path):
    with pytest.raises(evaluation.EvaluationError, match="no saved model"):
        evaluation.resolve_policy(f"ckpt:{tmp_path / 'missing.zip'}", env)


def test_generic_set_pooling_extractor_is_permutation_invariant(env):
    fe = SetPoolingExtractor(env.observation_space, hidden=8, valid_columns={"slots": 0})
    obs, _ = env.reset(seed=5)
    perm = np.array([1, 0, *range(2, obs["slots"].shape[0])])
    batch = {k: th.as_tensor(v)[None] for k, v in obs.items()}
    swapped = {**batch, "slots": batch["slots"][:, perm]}
    with th.no_grad():
        assert th.allclose(fe(batch), fe(swapped))
    assert fe(batch).shape == (1, fe.features_dim)


def test_bc_is_reproducible_with_the_same_seed(env, demos):
    runs = []
    for _ in range(2):
        model = fresh_model(env, seed=4)
        runs.append([r.loss for r in bc_train(model.policy, demos, 2, 32, 1e-3, seed=9)])
    assert runs[0] == runs[1]


# -- Routing-v0: per-instance scorer ---------------------------------------------------------


def routing_space(m: int) -> gym.spaces.Dict:
    return gym.spaces.Dict(
        {
            "request": gym.spaces.Box(0.0, 10.0, (10,), np.float32),
            "instances": gym.spaces.Box(0.0, 10.0, (m, 14), np.float32),
        }
    )


@pytest.mark.parametrize("m", [1, 4, 9])
def test_routing_scorer_gives_one_score_per_instance_equivariant_to_permutation(m):
    th.manual_seed(0)
    space = routing_space(m)
    space.seed(m)
    fe = RoutingScorer(space, hidden=8)
    obs = {k: th.as_tensor(v)[None] for k, v in space.sample().items()}
    perm = th.as_tensor(np.random.default_rng(m).permutation(m))
    permuted = {**obs, "instances": obs["instances"][:, perm]}
    with th.no_grad():
        a, b = fe(obs)[0], fe(permuted)[0]
    assert fe.action_scores_dim == m and a.shape == (fe.features_dim,)
    th.testing.assert_close(a[:m][perm], b[:m], rtol=1e-5, atol=1e-5)  # scores permute
    th.testing.assert_close(a[m:], b[m:], rtol=1e-5, atol=1e-5)  # critic features do not


def test_routing_scorer_key_path_can_express_argmin_estimate_among_deadline_meeting():
    fe = RoutingScorer(routing_space(3), hidden=8, key_features=(9, 10, 0))
    with th.no_grad():
        fe.key_linear.weight.copy_(th.tensor([[-1.0, 1.0, 0.0]]))
    inst = th.zeros(1, 3, 14)
    inst[0, :, 9] = th.tensor([0.2, 0.5, 0.9])  # estimate / SLO
    inst[0, :, 10] = th.tensor([0.0, 1.0, 1.0])  # meets deadline
    with th.no_grad():
        scores = fe({"request": th.zeros(1, 10), "instances": inst})[0, :3]
    assert int(scores.argmax()) == 1


def test_routing_scorer_rejects_another_observation_space(env):
    with pytest.raises(ValueError, match="RoutingScorer needs"):
        RoutingScorer(env.observation_space)


def routing_env_or_skip():
    spec = TRAIN_ENVS["routing"]
    try:
        e = make_env(spec, env_kwargs(spec, {"count": 8, "output_predictor": "oracle"}))
        e.reset(seed=0)
    except Exception as exc:  # the env is still being written
        pytest.skip(f"Routing-v0 not buildable: {exc}")
    return spec, e


def test_routing_model_acts_legally_and_bc_lowers_its_loss():
    pytest.importorskip("heuristics.routing.goodserve", reason="routing heuristics not available")
    spec, renv = routing_env_or_skip()
    th.set_num_threads(1)
    model = build_model("maskable-ppo", renv, spec, seed=0, hyperparams={"n_steps": 64})
    obs, info = renv.reset(seed=1)
    action, _ = model.predict(obs, deterministic=True, action_masks=info["action_mask"])
    assert info["action_mask"][int(action)]
    demos = collect(renv, functools.partial(make_policy, "earliest-finish"), [0, 1], gamma=0.99)
    history = bc_train(model.policy, demos, epochs=6, batch_size=32, learning_rate=3e-3)
    assert history[-1].loss < history[0].loss
    renv.close()


# -- selection by the env's headline direction -----------------------------------------------


class _StubLogger:
    def record(self, key, value):
        pass


class _StubModel:
    logger = _StubLogger()

    def save(self, path):
        pass


@pytest.mark.parametrize(
    ("better", "kept"), [("higher", [True, True, False]), ("lower", [True, False, True])]
)
def test_periodic_eval_keeps_the_best_model_in_the_metrics_direction(tmp_path, better, kept):
    values = iter([1.0, 2.0, 0.5])
    cb = PeriodicEvalCallback(
        lambda _: {"goodput": next(values)}, every=1, select="goodput", better=better,
        best_path=tmp_path / "best.zip",
    )  # fmt: skip
    cb.model = _StubModel()
    rows = [cb.run_eval() for _ in range(3)]
    assert ["saved_best" in r for r in rows] == kept
