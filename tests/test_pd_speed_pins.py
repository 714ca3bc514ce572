"""Pins that keep PDCluster-v0 and HexAgent bit-for-bit identical while they are made faster.

Each test runs a seeded episode and compares a sha256 digest of everything a policy or a learner
sees (plans, observations, masks, rewards, decision contexts) with a literal taken on the code
before the speed work of issue 14. A digest that changes means behaviour changed: a float summed
in another order can flip an argmax/argmin tie and so a plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from typing import Any

import numpy as np
import pytest

from envs.pd_cluster import DecisionContext, PDClusterEnv
from heuristics import make_policy
from traces.schema import LLMNode, Workflow

#: BFCL on Hetero-1 with enough workflows that queues exceed HexAgent's greedy/one-pass threshold
#: (32 waiting calls): 86 of its 1366 invocations take the one-pass path.
BUSY = {"cluster": "hetero-1", "workload": "bfcl", "workload_count": 120}

#: Long prompts arriving together on Hetero-1: the decode instances' KV runs short, so the
#: projected ratios include the wait for KV room.
KV_TIGHT = [
    Workflow(f"w{i}", 0.01 * i, (LLMNode("a", "llama3.1-70b", 100_000 + 37 * i, 3000 + 11 * i),))
    for i in range(70)
]

#: ``WHOLE_REFRESH_LIMIT`` values that force the env to recompute R after every pick in full
#: (large) or only the plane and column the pick changed (0); both must give the same digests.
WHOLE = 10**9
INCREMENTAL = 0


def refresh_limit(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    monkeypatch.setattr("envs.pd_cluster.WHOLE_REFRESH_LIMIT", limit, raising=False)


def _update(h: Any, value: Any) -> None:
    """Feed a canonical, type-tagged encoding of ``value`` into the hash ``h``."""
    if isinstance(value, np.ndarray):
        h.update(f"nd{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple)):
        h.update(f"seq{len(value)}(".encode())
        for v in value:
            _update(h, v)
        h.update(b")")
    elif isinstance(value, dict):
        h.update(f"map{len(value)}(".encode())
        for k in sorted(value):
            _update(h, k)
            _update(h, value[k])
        h.update(b")")
    elif isinstance(value, float):
        h.update(f"f{value.hex()}".encode())
    else:
        h.update(f"{type(value).__name__}:{value!r}".encode())


def _context_fields(ctx: DecisionContext) -> dict[str, Any]:
    return {f.name: getattr(ctx, f.name) for f in fields(ctx)}


def hexagent_plan_digest(**kwargs: Any) -> tuple[str, int]:
    """Digest of every plan HexAgent hands the simulator in an episode of ``PDClusterEnv(**kwargs)``
    (call, rank, prefill and decode instance of every assignment) and of the episode's
    Req95/Req99; also the number of invocations that took the one-pass path."""
    env = PDClusterEnv(**kwargs)
    policy = make_policy("hexagent")
    policy.reset()
    obs, info = env.reset(seed=0)
    h = hashlib.sha256()
    apply = env.sim.apply

    def recording_apply(plan: list[Any]) -> None:
        _update(
            h,
            [
                (a.call.id, a.priority, a.prefill_instance, a.decode_instance, a.decode_priority)
                for a in plan
            ],
        )
        apply(plan)

    env.sim.apply = recording_apply
    one_pass = 0
    done = False
    while not done:
        ctx = info["decision_context"]
        if not ctx.picks and ctx.num_waiting > 32:
            one_pass += 1
        obs, _, term, trunc, info = env.step(policy.act(obs, info))
        done = term or trunc
    _update(h, (info["metrics"]["req95"], info["metrics"]["req99"]))
    return h.hexdigest(), one_pass


def random_episode_digest(seed: int, **kwargs: Any) -> str:
    """Digest of a uniformly random masked policy's episode: every observation, mask, reward and
    decision context (all fields, as they are at that step)."""
    env = PDClusterEnv(**kwargs)
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    h = hashlib.sha256()
    done = False
    while not done:
        _update(h, obs)
        _update(h, info["action_mask"])
        _update(h, _context_fields(info["decision_context"]))
        action = int(rng.choice(np.flatnonzero(info["action_mask"])))
        obs, reward, term, trunc, info = env.step(action)
        _update(h, float(reward))
        done = term or trunc
    _update(h, obs)
    _update(h, info["metrics"])
    return h.hexdigest()


def test_hexagent_plans_match_pinned_digest():
    """HexAgent's plans and Req95/Req99 on a busy BFCL episode at K = 256 equal those of commit
    ea20b1c (digest taken there); changing the literal requires showing the behaviour change is
    intended."""
    digest, one_pass = hexagent_plan_digest(slots=256, **BUSY)
    assert one_pass > 0, "the episode no longer exercises HexAgent's one-pass ordering"
    assert digest == "591f97fd29f8df70eaf11b0e7110fefcecacef0a1b36226c91ac85614137e020"


def test_hexagent_plans_beyond_k_slots_match_pinned_digest(monkeypatch):
    """As above at K = 16, where calls beyond the slots keep their plans or take the fallback's,
    with R updated incrementally after every pick (digest taken on commit ea20b1c; changing it
    requires showing the change is intended)."""
    refresh_limit(monkeypatch, INCREMENTAL)
    digest, _ = hexagent_plan_digest(slots=16, **BUSY)
    assert digest == "74ebdf2f62f254133252d3915790b6349f6d401cad0642012c07617e17dd2847"


def test_random_policy_observations_masks_rewards_and_contexts_match_pinned_digest():
    """A random masked policy's observations, masks, rewards and decision contexts at K = 256
    equal those of commit ea20b1c (digest taken there); changing the literal requires showing
    the behaviour change is intended."""
    digest = random_episode_digest(seed=3, workload="mixed", workload_count=12)
    assert digest == "ff960cc352c74b584818229cf0e3738452ff7e0c069289e81142b5eaa44bd795"


def test_random_policy_on_decode_heavy_queues_matches_pinned_digest(monkeypatch):
    """As above on BFCL with small slots (K = 8), so invocations hold more calls than slots and
    the decode stage is re-planned often, with R updated incrementally after every pick (digest
    taken on commit ea20b1c; changing it requires showing the behaviour change is intended)."""
    refresh_limit(monkeypatch, INCREMENTAL)
    digest = random_episode_digest(seed=1, workload="bfcl", workload_count=40, slots=8)
    assert digest == "d1cae91397d64b05d3511f28b4478dd6fbacbc38da52c392f4738e76d14d9cbe"


@pytest.mark.parametrize("limit", [WHOLE, INCREMENTAL])
def test_hexagent_plans_under_kv_pressure_match_pinned_digest(monkeypatch, limit):
    """HexAgent's plans when decode KV runs short (R includes the wait for KV room), with R
    recomputed whole or incrementally after each pick, equal those of commit ea20b1c (digest
    taken there); changing the literal requires showing the behaviour change is intended."""
    refresh_limit(monkeypatch, limit)
    digest, _ = hexagent_plan_digest(cluster="hetero-1", trace=KV_TIGHT)
    assert digest == "a52f9bb11c436717d16616d3e5be19eb5b17554409300d8644d8dd1fea6bf50d"


def test_random_policy_under_kv_pressure_matches_pinned_digest(monkeypatch):
    """A random masked policy's observations, masks, rewards and decision contexts when decode
    KV runs short, with R updated incrementally, equal those of commit ea20b1c (digest taken
    there); changing the literal requires showing the behaviour change is intended."""
    refresh_limit(monkeypatch, INCREMENTAL)
    digest = random_episode_digest(seed=2, cluster="hetero-1", trace=KV_TIGHT)
    assert digest == "7f36832d8a285be545dce751b279cc595752afb10310db7f5e92dd3f53739e9d"
