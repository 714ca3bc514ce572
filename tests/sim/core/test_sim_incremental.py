"""The simulator's incremental structures equal a from-scratch recomputation (issue 32).

Each structure that replaces a per-event pass with bookkeeping is checked two ways: its value at
every step of random runs against the pass it replaces, and a whole run's records against the
same run with the general code path patched back in (bit-identical, by the digest of
``tests/sim/core/test_sim_digest.py``).
"""

from __future__ import annotations

import random

import pytest

from envs.sim import DefaultScheduler, Simulation, load_cluster
from envs.sim.core.scheduler import EarliestFinishScheduler
from envs.sim.engines.batching import BatchEngine, DecodeInstance
from traces.generators import generate


def _decode_state_ok(inst: DecodeInstance) -> None:
    """``_ctx_sum`` and ``_ends`` against the running batch, summed and scanned afresh."""
    running = inst.running
    assert inst._ctx_sum == sum(c.input_tokens + c.generated for c in running)
    assert sorted(e[2].uid for e in inst._ends) == sorted(c.uid for c in running)
    for end, _, c in inst._ends:
        assert end - inst.decode_iterations == c.output_tokens - c.generated
    # admission numbers order the heap's calls as ``running`` is ordered
    by_admission = [e[2] for e in sorted(inst._ends, key=lambda e: e[1])]
    assert by_admission == running
    assert all(c.generated < c.output_tokens for c in running)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decode_segment_bookkeeping_equals_a_rescan(monkeypatch, seed):
    """After every segment start and end of a random P-D run, the incremental context sum and
    end heap equal the batch recomputed, and the segment's length is the fewest tokens left."""
    rng = random.Random(seed)
    workload = rng.choice(["mixed", "bfcl"])
    cluster = rng.choice(["hetero-1", "hetero-2"])
    checked = [0]
    next_segment = DecodeInstance._next_segment
    end_segment = DecodeInstance._end_decode_segment

    def checked_next(self):
        next_segment(self)
        _decode_state_ok(self)
        if self.running:
            left = min(c.output_tokens - c.generated for c in self.running)
            assert self.seg_n == left
            assert self.seg_c == sum(c.input_tokens + c.generated for c in self.running)
            assert self.seg_calls == self.running
        checked[0] += 1

    def checked_end(self, now):
        end_segment(self, now)
        _decode_state_ok(self)

    monkeypatch.setattr(DecodeInstance, "_next_segment", checked_next)
    monkeypatch.setattr(DecodeInstance, "_end_decode_segment", checked_end)
    records = generate(workload, seed=seed, count=60)
    sim = Simulation(
        load_cluster(cluster), records, seed=seed, compute_horizons=False, estimate_error=0.3
    )
    sim.run(DefaultScheduler())
    assert checked[0] > 100


@pytest.mark.parametrize("scheduler", [DefaultScheduler, EarliestFinishScheduler])
def test_incremental_decode_engine_matches_the_general_one(sim_digest, monkeypatch, scheduler):
    """A P-D run's records are bit-identical with the decode instances' incremental segments and
    with the general engine's per-call passes (the code before issue 32's change)."""
    records = generate("bfcl", seed=4, count=80)

    def run() -> str:
        sim = Simulation(load_cluster("hetero-2"), records, seed=4, compute_horizons=False)
        return sim_digest(sim.run(scheduler()))

    fast = run()
    for name in ("_take", "_finish_call", "_next_segment", "_end_decode_segment"):
        monkeypatch.setattr(DecodeInstance, name, getattr(BatchEngine, name))
    assert run() == fast


def test_decode_step_memo_bound_changes_no_number(sim_digest, monkeypatch):
    """The latency models' decode-step memo is a pure cache: a run's records are bit-identical
    with a 3-entry bound (cleared all the time) and an unbounded one."""
    import envs.sim.latency.iteration as iteration
    from envs.sim import LatencyCache

    records = generate("mixed", seed=5, count=60)
    digests = []
    for bound in (3, 1 << 30):
        monkeypatch.setattr(iteration, "_STEPS_MEMO_SIZE", bound)
        cache = LatencyCache()
        sim = Simulation(
            load_cluster("hetero-1"), records, seed=5, compute_horizons=False, latency_cache=cache
        )
        digests.append(sim_digest(sim.run(DefaultScheduler())))
        sizes = {len(m._steps_memo) for m in cache._models.values()}
        assert max(sizes) <= bound
    assert digests[0] == digests[1]
