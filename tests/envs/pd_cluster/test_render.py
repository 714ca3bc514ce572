"""Specifications of the PDCluster renderings (envs/pd_cluster/render.py)."""

from __future__ import annotations

import re

import matplotlib.pyplot as plt
import numpy as np
import pytest

from envs.pd_cluster import PDClusterEnv
from envs.pd_cluster.render import instance_labels, render_figure

SMALL = {"workload": "mixed", "workload_count": 8}


@pytest.fixture
def fresh_env() -> PDClusterEnv:
    env = PDClusterEnv(render_mode="rgb_array", **SMALL)
    env.reset(seed=0)
    return env


@pytest.fixture
def busy_env() -> PDClusterEnv:
    """Mid-episode, mid-invocation: calls in service, one slot picked and others still open."""
    env = PDClusterEnv(render_mode="rgb_array", **SMALL)
    rng = np.random.default_rng(0)
    _, info = env.reset(seed=0)
    for _ in range(10_000):
        ctx = info["decision_context"]
        if env.sim.now > 2.0 and ctx.picks and (ctx.valid & ~ctx.picked).any():
            return env
        _, _, terminated, _, info = env.step(int(rng.choice(np.flatnonzero(info["action_mask"]))))
        assert not terminated, "the episode ended before a mid-invocation state arose"
    raise AssertionError("no mid-invocation state within 10k steps")


def test_instance_labels_map_global_indices_to_pool_names():
    assert instance_labels([0, 2, 4], [1, 3, 5]) == {
        0: "P0",
        2: "P1",
        4: "P2",
        1: "D0",
        3: "D1",
        5: "D2",
    }
    assert list(instance_labels([7], [3, 9])) == [7, 3, 9]  # prefill first, pool order kept


def test_instance_labels_name_the_hetero_cluster_p0_to_d7(fresh_env: PDClusterEnv):
    sim = fresh_env.sim
    labels = instance_labels([i.index for i in sim.prefill], [i.index for i in sim.decode])
    assert list(labels.values()) == [f"P{j}" for j in range(8)] + [f"D{j}" for j in range(8)]
    assert labels[sim.decode[0].index] == "D0" and sim.decode[0].index == 8


@pytest.mark.parametrize("env_name", ["fresh_env", "busy_env"])
def test_rgb_render_is_a_uint8_picture(env_name: str, request: pytest.FixtureRequest):
    img = request.getfixturevalue(env_name).render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    assert img.shape[0] > 100 and img.shape[1] > 100 and img.std() > 0


@pytest.mark.parametrize("env_name", ["fresh_env", "busy_env"])
def test_picture_has_labelled_axes_legends_and_pool_names(
    env_name: str, request: pytest.FixtureRequest
):
    fig = render_figure(request.getfixturevalue(env_name))
    try:
        ax_q, ax_t, ax_kv = fig.axes
        assert ax_q.get_ylabel() == "queued calls"
        assert ax_kv.get_ylabel() == "decode KV used (fraction)"
        legend = [t.get_text() for t in ax_kv.get_legend().get_texts()]
        assert legend == ["queued calls (left axis)", "decode KV used (right axis)"]
        assert [t.get_text() for t in ax_t.get_legend().get_texts()] == ["prefill", "decode"]
        names = [f"P{j}" for j in range(8)] + [f"D{j}" for j in range(8)]
        assert [t.get_text() for t in ax_t.get_yticklabels()] == names
        assert [t.get_text() for t in ax_q.get_xticklabels()] == names
        bottom, top = ax_q.get_ylim()
        assert bottom == 0 and top >= 1
    finally:
        plt.close(fig)


def test_idle_frame_queue_axis_spans_zero_to_one(fresh_env: PDClusterEnv):
    sim = fresh_env.sim
    assert not any(p.queue for p in sim.prefill) and not any(d.waiting for d in sim.decode)
    fig = render_figure(fresh_env)
    try:
        assert fig.axes[0].get_ylim() == (0.0, 1.0)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("env_name", ["fresh_env", "busy_env"])
def test_ansi_names_picked_pairs_and_never_prints_nan(
    env_name: str, request: pytest.FixtureRequest
):
    env = request.getfixturevalue(env_name)
    env.render_mode = "ansi"
    text = env.render()
    assert re.search(r"\bnan\b", text, re.IGNORECASE) is None and "best R" in text
    for slot, p, d in env._ctx.picks:
        line = next(ln for ln in text.splitlines() if f"slot {slot} " in ln)
        assert f"picked P{p}->D{d}" in line and "[x]" in line
    assert env_name == "fresh_env" or env._ctx.picks
