"""Pins that keep PDCluster-v0 and HexAgent bit-for-bit identical while they are made faster.

Each test runs a seeded episode and compares a sha256 digest of everything a policy or a learner
sees (plans, observations, masks, rewards, decision contexts) with a literal first taken on the
code before the speed work of issue 14, and re-pinned once since, for issue 10's intended
changes: HexAgent §5.4's decode KV-capacity timeline in Δ (and the ``decode_free_at`` context
field), tool latencies estimated until the tool returns (``tool_estimate="history"``), and the
latency model's element-wise kernels (§5). A digest that changes means behaviour changed: a float
summed in another order can flip an argmax/argmin tie and so a plan.
"""

from __future__ import annotations

import hashlib
from dataclasses import fields
from typing import Any

import numpy as np
import pytest

from envs.pd_cluster import DecisionContext, PDClusterEnv
from envs.sim.core.metrics import WORKFLOW_SUMMARY_KEYS
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
    monkeypatch.setattr("envs.pd_cluster.projection.WHOLE_REFRESH_LIMIT", limit, raising=False)


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


#: Context fields that say how a pick is encoded (the action space), constant in the flat space
#: these digests pin: they were added after the digests were taken and change no behaviour.
ENCODING_FIELDS = {"action_space": "flat", "selected_slot": -1}


def _context_fields(ctx: DecisionContext) -> dict[str, Any]:
    for name, value in ENCODING_FIELDS.items():
        assert getattr(ctx, name) == value, name
    return {f.name: getattr(ctx, f.name) for f in fields(ctx) if f.name not in ENCODING_FIELDS}


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
    # The summary keys only: issue 34 added the counts ``num_unfinished`` / ``num_not_arrived``
    # to every step's metrics; the digests pin behaviour, which that did not change.
    _update(h, {k: info["metrics"][k] for k in WORKFLOW_SUMMARY_KEYS})
    return h.hexdigest()


def test_hexagent_plans_match_pinned_digest():
    """HexAgent's plans and Req95/Req99 on a busy BFCL episode at K = 256 equal those of commit
    ea20b1c (digest taken there); changing the literal requires showing the behaviour change is
    intended."""
    digest, one_pass = hexagent_plan_digest(slots=256, **BUSY)
    assert one_pass > 0, "the episode no longer exercises HexAgent's one-pass ordering"
    assert digest == "b36c5010af5b4a23cf60c010b5f1e0f9395cdcc9eb464f35e6c79f234514b94c"


def test_hexagent_plans_beyond_k_slots_match_pinned_digest(monkeypatch):
    """As above at K = 16, where calls beyond the slots keep their plans or take the fallback's,
    with R updated incrementally after every pick (digest taken on commit ea20b1c; changing it
    requires showing the change is intended)."""
    refresh_limit(monkeypatch, INCREMENTAL)
    digest, _ = hexagent_plan_digest(slots=16, **BUSY)
    assert digest == "f3e870cfe9be364f1dd0723f6947407e82d02e9d7182f93002a51ea04951f6d7"


def test_random_policy_observations_masks_rewards_and_contexts_match_pinned_digest():
    """A random masked policy's observations, masks, rewards and decision contexts at K = 256
    equal those of commit ea20b1c (digest taken there); changing the literal requires showing
    the behaviour change is intended."""
    digest = random_episode_digest(seed=3, workload="mixed", workload_count=12)
    assert digest == "6a44b1304f2ce6a9f801c06697a2678f6dc6c3b61b97e73a25ce798802fe77ba"


def test_random_policy_on_decode_heavy_queues_matches_pinned_digest(monkeypatch):
    """As above on BFCL with small slots (K = 8), so invocations hold more calls than slots and
    the decode stage is re-planned often, with R updated incrementally after every pick (digest
    taken on commit ea20b1c; changing it requires showing the behaviour change is intended)."""
    refresh_limit(monkeypatch, INCREMENTAL)
    digest = random_episode_digest(seed=1, workload="bfcl", workload_count=40, slots=8)
    assert digest == "fc349d526d11e3b8f0182b77cc535f91d2f772031e5557b73215e8da1a852949"


@pytest.mark.parametrize("limit", [WHOLE, INCREMENTAL])
def test_hexagent_plans_under_kv_pressure_match_pinned_digest(monkeypatch, limit):
    """HexAgent's plans when decode KV runs short (R includes the wait for KV room), with R
    recomputed whole or incrementally after each pick, equal those of commit ea20b1c (digest
    taken there); changing the literal requires showing the behaviour change is intended."""
    refresh_limit(monkeypatch, limit)
    digest, _ = hexagent_plan_digest(cluster="hetero-1", trace=KV_TIGHT)
    assert digest == "be0a5029d4a91619f6427b273776ad6656a8fd474e9e51ca25cd139268ec7d34"


@pytest.mark.slow
def test_random_policy_under_kv_pressure_matches_pinned_digest(monkeypatch):
    """A random masked policy's observations, masks, rewards and decision contexts when decode
    KV runs short, with R updated incrementally, equal those of commit ea20b1c (digest taken
    there); changing the literal requires showing the behaviour change is intended."""
    refresh_limit(monkeypatch, INCREMENTAL)
    digest = random_episode_digest(seed=2, cluster="hetero-1", trace=KV_TIGHT)
    assert digest == "db66f6512e2f82607050ef4ac98a5767bd9c731b346249ec57948d8f8d9e5f06"
