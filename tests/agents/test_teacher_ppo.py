"""Specifications of ``teacher-ppo`` (agents/teacher_ppo.py): the KL anchor is zero at the clone
and pulls a moved policy back, the critic warm-up leaves the actor unchanged, the β schedule's
values, and the model saves and loads as a plain MaskablePPO."""

from __future__ import annotations

import os

os.environ.setdefault("WANDB_MODE", "disabled")

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.logger import Logger

from agents import TRAIN_ENVS, build_model, env_kwargs, load_model, make_vec_env
from agents.teacher_ppo import TeacherPPO, kl_coef_at, masked_kl

SPEC = TRAIN_ENVS["routing-v1"]
KWARGS = env_kwargs(SPEC, {"count": 12, "output_predictor": "oracle"})


def teacher_model(**hp):
    th.set_num_threads(1)
    vec = make_vec_env("routing-v1", KWARGS, 1, seed=0, vec="dummy")
    hyper = {"n_steps": 32, "batch_size": 16, "n_epochs": 2, "target_kl": None, **hp}
    model = build_model("teacher-ppo", vec, SPEC, seed=0, hyperparams=hyper)
    model.set_logger(Logger(folder=None, output_formats=[]))
    return model


def actor_state(model) -> dict[str, th.Tensor]:
    """Every parameter the actor's logits depend on (the shared extractor; the critic-only
    modules excluded)."""
    critic = {id(p) for p in model.critic_parameters()}
    return {
        n: p.detach().clone() for n, p in model.policy.named_parameters() if id(p) not in critic
    }


def test_teacher_ppo_is_registered_as_a_masked_teacher_ppo():
    assert isinstance(teacher_model(), TeacherPPO)


@pytest.mark.parametrize(
    ("step", "total", "start", "final", "decay", "want"),
    [
        (0, 10, 1.0, 0.0, 0.5, 1.0),
        (1, 10, 1.0, 0.0, 0.5, 0.8),
        (4, 10, 1.0, 0.0, 0.5, 0.2),
        (5, 10, 1.0, 0.0, 0.5, 0.0),
        (9, 10, 1.0, 0.1, 0.5, 0.1),
        (0, 10, 1.0, 0.2, 0.0, 0.2),
        (5, 10, 2.0, 0.0, 1.0, 1.0),
    ],
)
def test_kl_coefficient_falls_linearly_then_stays(step, total, start, final, decay, want):
    assert kl_coef_at(step, total, start, final, decay) == pytest.approx(want)


@pytest.mark.parametrize(
    ("start", "final", "decay", "match"),
    [(-1.0, 0.0, 0.5, "KL coefficients"), (1.0, 0.0, 1.5, "kl_decay")],
)
def test_bad_schedule_is_a_clear_error(start, final, decay, match):
    with pytest.raises(ValueError, match=match):
        kl_coef_at(0, 10, start, final, decay)


def test_bad_warmup_bounds_are_a_clear_error():
    with pytest.raises(ValueError, match="critic_warmup_min"):
        teacher_model(critic_warmup_min=3, critic_warmup_max=2)


def test_masked_kl_is_zero_for_equal_distributions_and_ignores_masked_actions():
    logits = th.tensor([[0.3, -1e8, 1.2], [-1e8, 0.0, 0.5]]).log_softmax(-1)
    assert th.allclose(masked_kl(logits, logits), th.zeros(2))
    other = th.tensor([[1.0, -1e8, 0.0], [-1e8, 0.5, 0.0]]).log_softmax(-1)
    p = logits.exp()
    want = th.stack([(p[i] * (logits[i] - other[i]))[p[i] > 0].sum() for i in range(2)])
    assert th.allclose(masked_kl(logits, other), want, atol=1e-6)
    assert (masked_kl(logits, other) > 0).all()


def test_kl_to_the_anchor_is_zero_at_the_clone_and_positive_after_a_move():
    model = teacher_model()
    model.set_anchor()
    model.learn(32)  # fills the rollout buffer (one warm-up update)
    data = next(model.rollout_buffer.get(16))
    assert model._anchor_kl(data, data.action_masks).item() == pytest.approx(0.0, abs=1e-7)
    with th.no_grad():
        for p in model.policy.features_extractor.parameters():
            p.add_(0.5 * th.randn_like(p))
    assert model._anchor_kl(data, data.action_masks).item() > 1e-4


def test_critic_warmup_leaves_the_actor_unchanged_and_fits_the_critic():
    model = teacher_model(critic_warmup_min=2, critic_warmup_max=2, critic_warmup_ev=1.0)
    actor = actor_state(model)
    critic = [p.detach().clone() for p in model.critic_parameters()]
    model.learn(64)  # two rollouts of 32 steps: both are warm-up updates
    assert not model._warming and model._warmup_done == 2 and model._ppo_updates == 0
    for name, before in actor.items():
        assert th.equal(before, dict(model.policy.named_parameters())[name]), name
    assert any(not th.equal(a, b) for a, b in zip(critic, model.critic_parameters(), strict=True))


def test_ppo_phase_moves_the_actor_and_logs_kl_and_beta():
    model = teacher_model(critic_warmup_min=0, critic_warmup_max=0, learning_rate=1e-2)
    actor = actor_state(model)
    model.learn(64)
    assert model._ppo_updates == 2
    moved = dict(model.policy.named_parameters())
    assert any(not th.equal(before, moved[n]) for n, before in actor.items())
    logged = model.logger.name_to_value
    assert "teacher/kl" in logged and logged["teacher/kl_coef"] == pytest.approx(
        kl_coef_at(1, model._ppo_total, 1.0, 0.0, 0.5)
    )


def test_saved_model_loads_as_maskable_ppo_with_the_same_actions(tmp_path):
    model = teacher_model(critic_warmup_max=0, critic_warmup_min=0)
    model.learn(32)
    model.save(tmp_path / "m.zip")
    loaded = load_model(str(tmp_path / "m.zip"))
    assert type(loaded).__name__ == "MaskablePPO"
    buf = model.rollout_buffer  # flattened to (steps · envs, ...) by the update
    space = model.observation_space
    one = {k: v[:4].reshape(4, *space[k].shape) for k, v in buf.observations.items()}
    masks = buf.action_masks[:4].reshape(4, -1).astype(bool)
    a, _ = model.predict(one, deterministic=True, action_masks=masks)
    b, _ = loaded.predict(one, deterministic=True, action_masks=masks)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("detach", [True, False])
def test_detached_critic_sends_no_value_gradient_to_the_shared_extractor(detach):
    model = teacher_model(critic_warmup_max=0, critic_warmup_min=0, detach_critic=detach)
    model.learn(32)
    data = next(model.rollout_buffer.get(16))
    model.policy.zero_grad()
    actions = data.actions.long().flatten()
    values, *_ = model._evaluate(data.observations, actions, data.action_masks)
    values.sum().backward()
    grads = [p.grad for p in model.policy.features_extractor.parameters()]
    reached = any(g is not None and bool(g.abs().sum() > 0) for g in grads)
    assert reached is not detach


def critic_values(model) -> th.Tensor:
    """The critic's values over the rollout buffer."""
    out = []
    with th.no_grad():
        for data in model.rollout_buffer.get(16):
            out.append(model.policy.predict_values(data.observations).flatten())
    return th.cat(out)


def test_critic_reset_unsaturates_a_saturated_critic_and_keeps_the_actor():
    model = teacher_model(critic_warmup_max=0, critic_warmup_min=0)
    model.learn(32)
    with th.no_grad():  # a saturated critic: every tanh unit at ±1, one constant value
        for layer in model._critic_layers()[:-1]:
            layer.bias.fill_(1e4)
    assert critic_values(model).std() < 1e-4
    actor = actor_state(model)
    model.reset_critic()
    values = critic_values(model)
    assert values.std() > 1e-3
    assert values.mean().item() == pytest.approx(
        float(model.rollout_buffer.returns.mean()), abs=1.0
    )
    for name, before in actor.items():
        assert th.equal(before, dict(model.policy.named_parameters())[name]), name
