"""Specifications of periodic risk checks and request migration (GoodServe §3.4, §4.3)."""

from __future__ import annotations

import dataclasses
import math
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envs.sim import Assignment, CallRecord, DefaultScheduler, SchedulingError, Simulation
from envs.sim.hardware.cluster import cluster_from_dict
from traces.schema import Request

MODEL = "llama3.1-8b"
MODES = ("prefill-first", "chunked")
MIGRATIONS = ("token", "kv")


def mono(*instances: dict) -> object:
    return cluster_from_dict(
        {
            "name": "mono-migration",
            "architecture": "monolithic",
            "default_model": MODEL,
            "tensor_parallel": {MODEL: {"a40": 1, "h800": 1, "a800": 1}},
            "instances": list(instances),
        }
    )


TWO = mono({"gpu": "a40", "max_batch_size": 6}, {"gpu": "h800", "max_batch_size": 6})


def requests(specs: list[tuple[float, int, int]]) -> list[Request]:
    t = 0.0
    out = []
    for i, (gap, n_in, n_out) in enumerate(specs):
        t += gap
        out.append(Request(f"r{i}", t, MODEL, n_in, n_out))
    return out


class Router:
    """Least-loaded routing (DefaultScheduler); at each check ``choose(sim, inv)`` is the plan.

    ``routes`` optionally pins request ids to instances.
    """

    def __init__(self, choose=None, routes: dict[str, int] | None = None) -> None:
        self.default = DefaultScheduler()
        self.choose = choose
        self.routes = routes
        self.checks: list[tuple[float, int, list[int]]] = []

    def plan(self, sim, inv):
        if inv.stage == "migrate":
            self.checks.append((inv.time, inv.instance, [c.uid for c in inv.calls]))
            return self.choose(sim, inv) if self.choose else []
        if self.routes is not None:
            return [Assignment(c, c.revealed_at, self.routes[c.workflow.id]) for c in inv.new_calls]
        return self.default.plan(sim, inv)


def move_every_third_once(sim, inv):
    """Deterministic plan: each call whose uid is a multiple of 3 moves once, to the next
    instance."""
    n = len(sim.monolithic)
    return [
        Assignment(c, 0.0, (inv.instance + 1) % n)
        for c in inv.calls
        if c.uid % 3 == 0 and c.migrations == 0
    ]


class Audit:
    """Listener checking the migration invariants as the simulation runs."""

    def __init__(self) -> None:
        self.done: Counter = Counter()
        self.decode_iterations: Counter = Counter()
        self.prefills: list[tuple[int, int, int]] = []  # (call uid, instance, tokens)
        self.migrated: list[tuple[int, int, int, float]] = []  # (uid, src, dst, seconds)
        self.violations: list[str] = []

    def _check_kv(self, inst) -> None:
        if inst.reserved > inst.capacity:
            self.violations.append(f"instance {inst.index} reserved {inst.reserved}")
        queued = sum(c.predicted_kv_tokens for c in inst.waiting)
        if inst.waiting_predicted_kv != queued:
            self.violations.append(
                f"instance {inst.index} waiting_predicted_kv {inst.waiting_predicted_kv} != "
                f"{queued} summed over its waiting calls"
            )

    def on_admit(self, call, inst, now):
        self._check_kv(inst)

    def on_decode_progress(self, inst, iterations, seconds, batch):
        assert batch == len(inst.seg_calls)
        for c in inst.seg_calls:
            self.decode_iterations[c.uid] += iterations
            if c.generated > c.output_tokens:
                self.violations.append(f"{c.id} generated {c.generated} > {c.output_tokens}")

    def on_prefill_done(self, call, inst, now, tokens, seconds):
        self.prefills.append((call.uid, inst.index, tokens))

    def on_call_done(self, call, inst, now):
        self.done[call.uid] += 1

    def on_preempted(self, call, inst, now):
        self._check_kv(inst)

    def on_migrated(self, call, src, dst, now, seconds):
        self.migrated.append((call.uid, src.index, dst.index, seconds))
        self._check_kv(dst)


def run(reqs, router, audit=None, **kw) -> tuple[Simulation, object]:
    sim = Simulation(kw.pop("cluster", TWO), reqs, compute_horizons=False, **kw)
    if audit is not None:
        sim.add_listener(audit)
    return sim, sim.run(router)


@pytest.mark.parametrize("mode", MODES)
def test_migrate_invocation_is_raised_every_check_interval_decode_iterations(mode):
    router = Router(routes={"r0": 1})
    sim, res = run(requests([(0.0, 1000, 95)]), router, check_interval=10, prefill_mode=mode)
    rec = res.calls[0]
    lat = sim.monolithic[1].latency
    assert [(i, uids) for _, i, uids in router.checks] == [(1, [0])] * 9  # at 10, ..., 90
    for k, (t, _, _) in enumerate(router.checks, start=1):
        # the prefill emitted the first token: decoding starts at context 1001
        assert t == pytest.approx(rec.prefill_end + lat.decode_steps_time(1, 1001, 10 * k))
    assert sim.invocation_count == 1 + 9


workloads = st.lists(
    st.tuples(st.floats(0.0, 0.2), st.integers(1, 5000), st.integers(1, 200)),
    min_size=1,
    max_size=12,
)


def timeline(result) -> list[tuple]:
    return [
        (c.workflow_id, c.prefill_instance, c.migrations, c.decode_end, c.migration_seconds)
        for c in result.calls
    ]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads,
    st.sampled_from(MODES),
    st.sampled_from(MIGRATIONS),
    st.sampled_from([3, 17, 50]),
)
def test_check_interval_fast_path_matches_token_by_token(specs, mode, migration, tau):
    reqs = requests(specs)
    routers, results = [], []
    for slow in (False, True):
        router = Router(move_every_third_once)
        _, res = run(
            reqs,
            router,
            token_by_token=slow,
            prefill_mode=mode,
            token_budget=512,
            check_interval=tau,
            migration=migration,
        )
        routers.append(router)
        results.append(res)
    fast, slow = results
    assert [c[1:] for c in routers[0].checks] == [c[1:] for c in routers[1].checks]
    for (ta, *_), (tb, *_) in zip(routers[0].checks, routers[1].checks, strict=True):
        assert ta == pytest.approx(tb, rel=1e-9, abs=1e-9)
    for a, b in zip(timeline(fast), timeline(slow), strict=True):
        assert a[:3] == b[:3]
        assert a[3:] == pytest.approx(b[3:], rel=1e-9, abs=1e-9)


def random_plans(seed: int, max_moves: int = 2):
    rng = random.Random(seed)

    def choose(sim, inv):
        plan = []
        for c in inv.calls:
            if c.migrations < max_moves and rng.random() < 0.4:
                plan.append(Assignment(c, rng.random(), rng.randrange(len(sim.monolithic))))
        return plan

    return choose


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    workloads,
    st.integers(0, 2**16),
    st.sampled_from(MODES),
    st.sampled_from(MIGRATIONS),
)
def test_every_request_completes_exactly_once_under_random_migration(specs, seed, mode, migration):
    reqs = requests(specs)
    audit = Audit()
    sim, res = run(
        reqs,
        Router(random_plans(seed)),
        audit,
        prefill_mode=mode,
        token_budget=700,
        check_interval=4,
        migration=migration,
    )
    assert not audit.violations
    assert sorted(audit.done.values()) == [1] * len(reqs)
    for c in sim.calls:
        assert c.generated == c.output_tokens
        # every prefill (first or re-prefill after a token migration) emits one token and every
        # decode iteration one: none lost, none repeated
        prefills = sum(1 for u, _, _ in audit.prefills if u == c.uid)
        assert audit.decode_iterations[c.uid] + prefills == c.output_tokens
        assert c.prefill_instance == c.decode_instance  # ends where it finished
        assert (c.migration_seconds > 0) == (c.migrations > 0)
    for m in sim.monolithic:
        assert m.peak_reserved <= m.capacity
        assert not m.running and not m.waiting and m.reserved == 0
        assert m.waiting_predicted_kv == 0
    assert [r.migrations for r in res.calls] == [c.migrations for c in sim.calls]


def cache_cluster() -> object:
    return mono({"gpu": "h800", "max_batch_size": 8}, {"gpu": "a800", "max_batch_size": 8})


def mover_workload() -> list[Request]:
    hashes = tuple(range(8))  # 8 blocks of 512 tokens = 4096 cached tokens on the target
    return [
        Request("warm", 0.0, MODEL, 4096, 5, prefix_hashes=hashes),
        Request("mover", 0.0, MODEL, 5000, 120, prefix_hashes=hashes),
    ]


def move_mover_once(sim, inv):
    return [
        Assignment(c, 0.0, 1) for c in inv.calls if c.workflow.id == "mover" and not c.migrations
    ]


@pytest.mark.parametrize("mode", MODES)
def test_token_migration_reprefills_prompt_and_generated_minus_cached_tokens(mode):
    audit = Audit()
    routes = {"warm": 1, "mover": 0}
    sim, res = run(
        mover_workload(),
        Router(move_mover_once, routes),
        audit,
        cluster=cache_cluster(),
        prefix_cache_blocks=64,
        prefill_mode=mode,
        check_interval=20,
        migration="token",
    )
    mover = sim.calls[1]
    rec = res.calls[1]
    assert [(u, s, d) for u, s, d, _ in audit.migrated] == [(mover.uid, 0, 1)]
    generated_at_move = 21  # the prefill's first token + 20 decode iterations
    assert rec.cached_tokens == 4096
    assert [(i, t) for u, i, t in audit.prefills if u == mover.uid] == [
        (0, 5000),
        (1, 5000 + generated_at_move - 4096),
    ]
    src, dst = sim.monolithic
    transit = sim.cluster.kv_transfer.transfer_time(
        4 * (5000 + generated_at_move), src.gpu, dst.gpu
    )
    assert audit.migrated[0][3] == pytest.approx(transit, rel=1e-12)
    assert rec.migrations == 1 and rec.migration_seconds == pytest.approx(transit, rel=1e-12)
    # two prefills (each emits a token) + 118 decode iterations = 120 tokens
    assert rec.prefill_instance == 1 and audit.decode_iterations[mover.uid] == 118


@pytest.mark.parametrize("mode", MODES)
def test_kv_migration_prefills_nothing_on_target_and_transits_kv_bytes(mode):
    audit = Audit()
    sim, res = run(
        mover_workload(),
        Router(move_mover_once, {"warm": 1, "mover": 0}),
        audit,
        cluster=cache_cluster(),
        prefix_cache_blocks=64,
        prefill_mode=mode,
        check_interval=20,
        migration="kv",
    )
    mover = sim.calls[1]
    src, dst = sim.monolithic
    assert [(i, t) for u, i, t in audit.prefills if u == mover.uid] == [(0, 5000)]
    kv_bytes = src.latency.kv_bytes_per_token * (5000 + 21)
    kv = sim.cluster.kv_transfer
    expected = kv.latency_s + kv_bytes / kv.bandwidth(src.gpu, dst.gpu)
    assert audit.migrated[0][3] == pytest.approx(expected, rel=1e-12)
    assert res.calls[1].migration_seconds == pytest.approx(expected, rel=1e-12)
    assert audit.decode_iterations[mover.uid] == 119  # + the first token from the prefill


@pytest.mark.parametrize("migration", MIGRATIONS)
def test_source_frees_kv_at_once_for_token_and_on_landing_for_kv_migration(migration):
    sim = Simulation(
        cache_cluster(),
        mover_workload(),
        compute_horizons=False,
        check_interval=20,
        migration=migration,
    )
    router = Router(move_mover_once, {"warm": 1, "mover": 0})
    src = sim.monolithic[0]
    while (inv := sim.advance()) is not None:
        if inv.stage == "migrate" and inv.instance == 0:
            mover = inv.calls[0]
            before = src.reserved
            sim.apply(router.plan(sim, inv))
            assert mover.stage == "migrating" and mover not in src.running
            kept = before - src.reserved
            assert kept == (0 if migration == "kv" else mover.kv_tokens)
            continue
        sim.apply(router.plan(sim, inv))
    assert src.reserved == 0 and all(c.stage == "done" for c in sim.calls)


def test_illegal_migration_plan_raises_and_leaves_state_untouched():
    cl = cluster_from_dict(
        {
            "name": "mixed",
            "architecture": "monolithic",
            "default_model": MODEL,
            "tensor_parallel": {MODEL: {"h800": 1, "a40": 1}},
            "instances": [
                {"gpu": "h800"},
                {"gpu": "a40", "fraction": 0.4},  # ~19k KV tokens
                {"gpu": "h800", "model": "qwen2.5-14b"},
            ],
        }
    )
    reqs = [
        Request("big", 0.0, MODEL, 20000, 100),
        Request("small", 0.0, MODEL, 100, 200),
        Request("qwen", 0.0, "qwen2.5-14b", 100, 10),
    ]
    sim = Simulation(cl, reqs, compute_horizons=False, check_interval=10)
    routes = {"big": 0, "small": 1, "qwen": 2}
    router = Router(lambda sim, inv: [], routes)
    while (inv := sim.advance()).stage != "migrate" or inv.instance != 0:
        sim.apply(router.plan(sim, inv))
    big, small = sim.calls[0], sim.calls[1]
    src = sim.monolithic[0]
    assert inv.calls == [big] and src.paused
    state = (list(src.running), src.reserved, big.stage, big.migrations, list(sim.pending))
    bad = [
        ([Assignment(small, 0.0, 0)], "not one of this migrate invocation's calls"),
        ([Assignment(big, 0.0, 7)], r"target 7 is not a monolithic instance .*valid: \[0, 1, 2\]"),
        ([Assignment(big, 0.0, 2)], "needs model 'llama3.1-8b' but migration target 2"),
        ([Assignment(big, 0.0, 1)], r"needs 20100 KV tokens .* target 1 holds at most"),
        ([Assignment(big, 0.0, 0), Assignment(big, 0.0, 1)], "twice"),
        ([Assignment(big, math.nan, 0)], "priority must be finite"),
    ]
    for plan, message in bad:
        with pytest.raises(SchedulingError, match=message):
            sim.apply(plan)
        assert (list(src.running), src.reserved, big.stage, big.migrations, sim.pending) == state
    sim.apply([Assignment(big, 0.0, 0)])  # staying is legal
    assert src.paused  # it resumes through a zero-delay event queued behind the plan
    while (inv := sim.advance()) is not None:
        sim.apply([])
    assert all(c.stage == "done" for c in sim.calls) and big.migrations == 0


@pytest.mark.parametrize("migration", MIGRATIONS)
def test_migration_with_checks_is_deterministic_for_a_seed(migration):
    reqs = requests([(0.01 * (i % 5), 200 + 371 * (i % 9), 20 + 11 * (i % 7)) for i in range(40)])

    def records(seed: int) -> list[tuple]:
        _, res = run(
            reqs,
            Router(random_plans(seed)),
            seed=seed,
            estimate_error=0.2,
            prefill_mode="chunked",
            check_interval=5,
            migration=migration,
        )
        return [dataclasses.astuple(c) for c in res.calls]

    first = records(11)
    assert first == records(11)
    at = [f.name for f in dataclasses.fields(CallRecord)].index("migrations")
    assert sum(r[at] for r in first) > 0  # migrations happened
    assert first != records(12)


def test_invalid_migration_mode_and_check_interval_are_rejected():
    reqs = requests([(0.0, 10, 10)])
    with pytest.raises(ValueError, match=r"migration must be one of .*'state'"):
        Simulation(TWO, reqs, migration="state")
    with pytest.raises(ValueError, match=r"check_interval .*got 0"):
        Simulation(TWO, reqs, check_interval=0)


def move_queued_to_1(sim, inv):
    """Moves every call still waiting in the checked instance's queue to instance 1."""
    return [Assignment(c, 0.0, 1) for c in inv.calls if c.stage == "wait_prefill"]


@pytest.mark.parametrize("migration", MIGRATIONS)
def test_check_queued_lists_waiting_calls_and_moves_them_without_losing_work(migration):
    """GoodServe §3.4 checks every ongoing request: with ``check_queued`` a check also lists the
    instance's waiting calls (after its decoding ones) and a plan can move them; they prefill
    once, on the target, and every request completes exactly once."""
    reqs = requests([(0.0, 500, 300)] * 8)  # eight at once on the 6-slot A40: two wait
    audit = Audit()
    router = Router(move_queued_to_1, routes={r.id: 0 for r in reqs})
    sim, res = run(
        reqs, router, audit, check_interval=10, check_queued=True, migration=migration,
        prefill_mode="chunked",
    )  # fmt: skip
    first = router.checks[0]
    stages = {c.uid: c for c in sim.calls}
    assert len(first[2]) == 8 and first[1] == 0
    moved = [u for u, s, d, _ in audit.migrated]
    assert len(moved) == 2 and all((s, d) == (0, 1) for _, s, d, _ in audit.migrated)
    for uid in moved:  # prefilled on the target only, generated everything there
        assert [i for u, i, _ in audit.prefills if u == uid] == [1]
        assert stages[uid].prefill_instance == 1 and stages[uid].generated == 300
    assert set(audit.done.values()) == {1} and len(audit.done) == 8
    assert not audit.violations
    # without the option a check lists decoding calls only
    router = Router(move_queued_to_1, routes={r.id: 0 for r in reqs})
    run(reqs, router, check_interval=10, prefill_mode="chunked")
    assert len(router.checks[0][2]) == 6 and res.calls
