"""Domain randomisation (agents.randomize, issue 33): draws stay in their ranges, are
reproducible from (randomisation seed, reset seed), really rebuild the env with the drawn
options, and bad randomisations or space-changing draws fail naming the option."""

from __future__ import annotations

import numpy as np
import pytest

from agents import make_env, train_env_spec
from agents.randomize import check_randomization, draw_options

SPEC = train_env_spec("routing")
KWARGS = {"workload": "goodserve", "workload_count": 5}
DR = {"load_scale": {"uniform": [0.5, 2.0]}, "predictor_error": {"choice": [0.0, 0.3]}}


def test_draws_are_in_range_and_seeded() -> None:
    a = [draw_options(DR, SPEC.options, np.random.default_rng(s)) for s in range(50)]
    b = [draw_options(DR, SPEC.options, np.random.default_rng(s)) for s in range(50)]
    assert a == b
    assert all(0.5 <= d["load_scale"] <= 2.0 for d in a)
    assert {d["predictor_error"] for d in a} == {0.0, 0.3}


def test_reset_rebuilds_the_env_with_the_drawn_options() -> None:
    env = make_env(SPEC, KWARGS, randomize=DR, randomize_seed=7)
    seen = set()
    for seed in range(6):
        env.reset(seed=seed)
        inner = env.unwrapped
        drawn = env.drawn
        assert inner.predictor_error == drawn["predictor_error"]
        assert inner._source.load_scale == pytest.approx(drawn["load_scale"])
        seen.add(round(inner._source.load_scale, 6))
        mask = env.action_masks()
        assert mask.shape == (env.action_space.n,) and mask.any()
        env.step(int(np.flatnonzero(mask)[0]))
    assert len(seen) == 6  # a fresh load every episode
    # the same (randomisation seed, reset seed) gives the same draw in a new env
    again = make_env(SPEC, KWARGS, randomize=DR, randomize_seed=7)
    again.reset(seed=3)
    env.reset(seed=3)
    assert again.drawn == env.drawn
    env.close()
    again.close()


@pytest.mark.parametrize(
    "bad, culprit",
    [
        ({"load": {"uniform": [0.5, 1.0]}}, "'load' is not an option"),
        ({"load_scale": {"uniform": [2.0, 1.0]}}, "randomize.load_scale.uniform"),
        ({"load_scale": {"normal": [1.0, 0.1]}}, "randomize.load_scale: expected"),
        ({"load_scale": {"choice": []}}, "randomize.load_scale.choice"),
        ({"load_scale": [0.5, 1.0]}, "randomize.load_scale: expected"),
    ],
)
def test_bad_randomisations_name_the_option(bad: dict, culprit: str) -> None:
    with pytest.raises(ValueError, match=culprit.replace(".", r"\.").replace("'", "'")):
        check_randomization(bad, SPEC.options)


def test_a_draw_that_changes_the_spaces_is_rejected() -> None:
    dr = {"instances": {"choice": [4, 8]}}
    env = make_env(SPEC, KWARGS, randomize=dr, randomize_seed=0)
    with pytest.raises(ValueError, match="changes the env's observation_space"):
        for seed in range(20):
            env.reset(seed=seed)
