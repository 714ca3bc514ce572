"""servegym/Allocation-v0: API conformance, masking, reconfiguration, rewards, baselines."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envs  # noqa: F401
from envs.allocation import AllocationEnv
from envs.sim.allocation.allocations import Allocation, AllocationError, LLMAllocation
from envs.sim.core.scheduler import DefaultScheduler
from envs.sim.core.simulation import SchedulingError, Simulation
from envs.sim.hardware.cluster import ClusterSpec, InstanceSpec
from heuristics import make_policy
from heuristics.allocation import FixedAllocation, KubernetesHPA
from traces.rates import HELDOUT_BINS, TRAIN_BINS, rate_schedule
from traces.schema import LLMNode, Workflow


def run(env, policy, seed=0):
    obs, info = env.reset(seed=seed)
    policy.reset()
    total, done = 0.0, False
    while not done:
        obs, r, term, trunc, info = env.step(policy.act(obs, info))
        total += r
        done = term or trunc
    return total, info


def small(**kw):
    kw.setdefault("period_seconds", 30.0)
    kw.setdefault("workflow_rate", 2.0)
    return AllocationEnv(**kw)


def test_checkers_pass_on_the_default_construction():
    from stable_baselines3.common.env_checker import check_env as sb3_check

    env = gym.make("servegym/Allocation-v0")
    assert isinstance(env.unwrapped, AllocationEnv)
    # The checkers step uniformly random actions, most of which the menu masks: like
    # PDCluster's test, they run in the penalize mode; everything else is the default.
    check_env(AllocationEnv(invalid_action="penalize", render_mode="ansi"))
    sb3_check(AllocationEnv(invalid_action="penalize"), warn=False)


def test_same_seed_same_episode_and_different_seed_differs():
    env = small(periods=2)
    pol = make_policy("demand-proportional")
    r1, i1 = run(env, pol, seed=3)
    r2, i2 = run(env, pol, seed=3)
    r3, i3 = run(env, pol, seed=4)
    assert r1 == r2 and i1["metrics"] == i2["metrics"] and i1["latencies"] == i2["latencies"]
    assert i1["latencies"] != i3["latencies"]


def test_random_legal_actions_never_break_placement_and_every_workflow_is_accounted():
    env = small(periods=3, workload="rag_reranker")
    rng = np.random.default_rng(0)
    for seed in range(3):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            mask = env.action_masks()
            assert mask.any(), "the mask must never trap the policy"
            assert np.array_equal(mask, info["action_mask"])
            a = int(rng.choice(np.flatnonzero(mask)))
            obs, r, term, trunc, info = env.step(a)
            done = term or trunc
            if not done:
                used = env.unwrapped.placement.used_units() if env.unwrapped.placement else {}
                assert all(u <= env.unwrapped.F for u in used.values())
        m = info["metrics"]
        assert m["num_workflows"] == len(info["latencies"]) == len(info["slos"])
        assert m["num_completed"] == sum(math.isfinite(x) for x in info["latencies"])


def test_masked_action_raises_a_clear_error_and_penalize_falls_back():
    env = small(invalid_action="raise")
    env.reset(seed=0)
    illegal = int(np.flatnonzero(~env.action_masks())[0])
    with pytest.raises(ValueError, match="masked action"):
        env.step(illegal)
    pen = small(invalid_action="penalize", invalid_penalty=2.0)
    pen.reset(seed=0)
    _, r, *_ = pen.step(illegal)
    assert r == -2.0


def test_minimum_share_and_tp_limit_are_masked():
    env = small(units_per_gpu=4)
    env.reset(seed=0)
    ctx = env._ctx
    assert ctx.model == "llama3-8b"  # largest model first
    need = ctx.min_share[("llama3-8b", 1)]
    assert need == 2  # 16 GB of weights + 8k KV tokens do not fit a quarter of a 48 GB A6000
    for k, (s, t, _d) in enumerate(ctx.options):
        if t == 4:  # NVLink pairs: TP 4 would cross PCIe
            assert not ctx.mask[k]
        if t == 1 and s < need:
            assert not ctx.mask[k]


def test_dense_rewards_sum_to_the_goodput_count():
    env = small(periods=2)
    total, info = run(env, make_policy("demand-proportional"), seed=1)
    lat, slo = np.array(info["latencies"]), np.array(info["slos"])
    assert total == pytest.approx(np.count_nonzero(lat <= slo))
    duration = 2 * 30.0
    assert info["metrics"]["goodput"] == pytest.approx(total / duration)


def test_impossible_clusters_and_options_are_named():
    with pytest.raises(AllocationError, match="cannot hold even the minimum"):
        AllocationEnv(units_per_gpu=1, gpus=4, workload="rag_beam_combined")
    with pytest.raises(ValueError, match="whole number of 4-GPU nodes"):
        AllocationEnv(gpus=6)
    with pytest.raises(ValueError, match="unknown rate trace"):
        AllocationEnv(rate_trace="nope")
    with pytest.raises(ValueError, match="GPU pool"):
        AllocationEnv(cluster="hetero-1")


def test_bad_allocation_files_get_clear_errors(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("llms: [{model: llama3-8b, units: 0}]\n")
    with pytest.raises(AllocationError, match=r"llms\[0\].units must be an integer >= 1"):
        FixedAllocation.from_yaml(p)
    p.write_text("llms: [{model: llama3-8b, units: 4, colour: red}]\n")
    with pytest.raises(AllocationError, match="unknown keys"):
        FixedAllocation.from_yaml(p)
    with pytest.raises(AllocationError, match="does not exist"):
        FixedAllocation.from_yaml(tmp_path / "missing.yaml")
    topo = AllocationEnv().topology
    bad = Allocation((LLMAllocation("llama3-8b", units=6, tp=4, replicas=1),), units_per_gpu=4)
    with pytest.raises(AllocationError, match="does not divide"):
        bad.check(topo)
    tiny = Allocation((LLMAllocation("llama3-8b", units=1),), units_per_gpu=4)
    with pytest.raises(AllocationError, match="below the 2/4"):
        tiny.check(topo)


def test_fixed_allocation_is_served_as_given(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text(
        "units_per_gpu: 4\nllms:\n"
        "  - {model: llama3-8b, units: 8, tp: 2, replicas: 1}\n"
        "  - {model: bge-reranker-base, units: 4, replicas: 2}\n"
        "  - {model: e5-base-v2, units: 4}\n"
    )
    pol = FixedAllocation.from_yaml(p)
    _, info = run(small(), pol)
    assert pol.fallbacks == 0
    assert info["allocations"] == [
        "period 0: llama3-8b: 2.00 GPUs = 1 x TP2 @ 1.00; bge-reranker-base: 1.00 GPUs = 2 x TP1 "
        "@ 0.50; e5-base-v2: 1.00 GPUs = 1 x TP1 @ 1.00"
    ]


class _Metric:
    def __init__(self, busy):
        self.busy_fraction = busy
        self.in_flight = 0.0


def test_hpa_rule_on_a_hand_built_metric_sequence():
    hpa = KubernetesHPA(target=0.5, tolerance=0.1, stabilization_s=60.0)
    assert hpa.desired(2, 0.54) == 2  # within tolerance
    assert hpa.desired(2, 0.9) == 4  # ceil(2 * 0.9 / 0.5) = 4
    assert hpa.desired(4, 0.1) == 1  # ceil(0.8)
    assert hpa.desired(1, 0.0) == 1  # min replicas

    class Ctx:
        def __init__(self, t, prev, busy):
            self.time = t
            self.previous = Allocation((LLMAllocation("m", 4 * prev, 1, prev),), 4)
            self.llm_metrics = {"m": _Metric(busy)}

    # scale-up is limited to max(2x, +4) per sync
    assert hpa.recommend(Ctx(0.0, 1, 1.0), "m") == 2
    assert hpa.recommend(Ctx(15.0, 10, 1.0), "m") == 20
    # scale-down waits for the stabilisation window's highest recommendation
    hpa.reset()
    assert hpa.recommend(Ctx(0.0, 4, 0.5), "m") == 4  # at target
    assert hpa.recommend(Ctx(15.0, 4, 0.1), "m") == 4  # window still holds 4
    assert hpa.recommend(Ctx(75.0, 4, 0.1), "m") == 1  # 60 s later the window has only 1s


def test_hpa_scales_up_under_load_and_new_replicas_wait_for_their_model_load():
    env = small(periods=4, period_seconds=15.0, workflow_rate=3.0)
    pol = make_policy("k8s-hpa")
    _, info = run(env, pol)
    u = env.unwrapped
    assert info["metrics"]["reconfigurations"] > 0
    first = u.load_seconds("llama3-8b", 1, 1.0)
    assert first > u.reconfig_startup_s
    res = u.sim.result()
    started = {i.index: i.ready_at for i in u.sim.monolithic}
    late = [c for c in res.calls if started[c.prefill_instance] > 0]
    assert late, "some calls must run on replicas added mid-episode"
    for c in late:
        assert c.prefill_start >= started[c.prefill_instance] - 1e-9


def test_rate_windows_do_not_overlap_and_schedules_scale():
    for name in TRAIN_BINS:
        assert not set(TRAIN_BINS[name]) & set(HELDOUT_BINS[name])
    s = rate_schedule("ragpulse_hourly", 2.0, 24, start=0)
    assert len(s) == 24 and min(s) >= 0 and max(s) > 2.0
    env = small(rate_trace="ragpulse_hourly", rate_window="heldout", periods=3)
    env.reset(seed=0)
    assert env.rates == rate_schedule("ragpulse_hourly", 2.0, 3, start=env.rates_start)


def _mono(index, model="llama3.2-1b"):
    return InstanceSpec(index, f"m{index}", "monolithic", "rtx-a6000", model, 1, 0.5)


def test_simulation_adds_and_retires_instances_mid_run():
    cluster = ClusterSpec("t", "monolithic", (_mono(0),))
    wfs = [Workflow(f"w{i}", 0.5 * i, (LLMNode("a", "llama3.2-1b", 200, 50),)) for i in range(20)]
    sim = Simulation(cluster, wfs, compute_horizons=False, online_horizons=False)
    sched = DefaultScheduler()
    sim.time_limit = 2.0
    while (inv := sim.advance()) is not None:
        sim.apply(sched.plan(sim, inv))
    (new,) = sim.add_instances([_mono(7)], ready_at=4.0)
    assert new.index == 1 and sim.cluster.instances[1].index == 1
    sim.retire_instance(0)
    with pytest.raises(SchedulingError, match="ready_at"):
        sim.add_instances([_mono(0)], ready_at=1.0)
    sim.time_limit = None
    while (inv := sim.advance()) is not None:
        sim.apply(
            [a.__class__(a.call, a.priority, 1) for a in sched.plan(sim, inv)]
        )  # route everything to the new instance
    res = sim.result()
    assert all(math.isfinite(c.decode_end) and c.decode_end > 0 for c in res.calls)
    on_new = [c for c in res.calls if c.prefill_instance == 1]
    assert on_new and min(c.prefill_start for c in on_new) >= 4.0
    bad = sim.add_instances([_mono(0)])[0]
    sim.retire_instance(bad.index)
    assert sim.instances[bad.index].retired


def test_evaluate_runs_allocation_with_a_sweep_and_an_allocation_file(tmp_path, capsys):
    import json

    import evaluate
    import evaluation

    alloc = tmp_path / "mine.yaml"
    alloc.write_text(
        "units_per_gpu: 4\nllms:\n  - {model: llama3-8b, units: 12, replicas: 3}\n"
        "  - {model: bge-reranker-base, units: 2, replicas: 2}\n"
        "  - {model: e5-base-v2, units: 2, replicas: 2}\n"
    )
    out = tmp_path / "out"
    code = evaluate.main(
        [
            "--env", "allocation-v0", "--workload", "rag_reranker",
            "--policies", f"naive-equal,demand-proportional,alloc:{alloc}",
            "--seeds", "0", "--period-seconds", "20", "--sweep", "workflow_rate=1,2",
            "--quiet", "--out", str(out), "--reference", "demand-proportional",
        ]
    )  # fmt: skip
    assert code == 0
    rows = json.loads((out / "results.json").read_text())
    assert len(rows) == 6 and {r["gpus"] for r in rows} == {4}
    assert (out / "curve_rag_reranker.png").is_file()
    by = {(r["policy"], r["sweep"]["value"]): r["metrics"] for r in rows}
    # twice the rate, about twice the arrivals, all served by the end of the drain
    for pol in ("naive-equal", "demand-proportional"):
        assert by[(pol, 2)]["offered_rate"] > 1.4 * by[(pol, 1)]["offered_rate"]
    dp1, dp2 = by[("demand-proportional", 1)], by[("demand-proportional", 2)]
    assert dp2["num_completed"] == dp2["num_workflows"] > dp1["num_completed"]
    # every run that is not sustainable is flagged in the printed table, and only those
    printed = capsys.readouterr().out
    flagged = {
        (r["policy"], r["seed"], r["sweep"]["value"])
        for r in rows
        if not r["metrics"]["sustainable"]
    }
    assert flagged  # 20-s periods: some rows are not sustainable
    assert printed.count("is NOT SUSTAINABLE") == len(flagged)
    for pol, seed, value in flagged:
        assert f"workflow_rate={value:g}: {pol} (seed {seed}) is NOT SUSTAINABLE" in printed
    with pytest.raises(evaluation.EvaluationError, match="does not take --model"):
        evaluation.resolve_config(evaluation.EvalConfig(env="allocation", model="llama3-8b"))


def test_overloaded_notes_say_whether_the_backlog_or_the_window_failed():
    from evaluation import overloaded_notes

    def row(policy: str, sustainable: float, done: int) -> dict:
        m = {
            "sustainable": sustainable,
            "num_workflows": 100,
            "num_completed": done,
            "offered_rate": 2.0,
            "throughput": 1.2,
            "latency_mean": 40.0,
        }
        return {"policy": policy, "seed": 7, "metrics": m}

    notes = overloaded_notes([row("a", 1.0, 100), row("b", 0.0, 60), row("c", 0.0, 100)], "col")
    assert len(notes) == 2
    assert notes[0].startswith("col: b (seed 7) is NOT SUSTAINABLE: overloaded, 60 of 100 measured")
    assert "all 100 finished, but only 1.2 wf/s of 2 offered inside the 50-s window" in notes[1]


def test_cache_aware_choice_follows_the_prefix_unless_load_is_imbalanced():
    from envs.allocation.serving import BALANCE_ABS, cache_aware_choice

    # a match covering >= 30 % of the prompt wins over a lighter replica
    assert cache_aware_choice([5, 1], [400, 0], 1000) == 0
    # below the threshold: the least loaded
    assert cache_aware_choice([5, 1], [200, 0], 1000) == 1
    # imbalanced (more than BALANCE_ABS apart and 1.5x): the least loaded, whatever the cache
    assert cache_aware_choice([BALANCE_ABS + 10, 9], [1000, 0], 1000) == 1
    # large absolute gap but within 1.5x: still balanced, the match wins
    assert cache_aware_choice([3 * BALANCE_ABS, 2 * BALANCE_ABS + 1], [1000, 0], 1000) == 0
    # ties: best match, then lighter, then lower index
    assert cache_aware_choice([2, 1, 1], [500, 500, 500], 1000) == 1


def test_beam_search_calls_of_one_beam_stay_on_the_replica_caching_it():
    env = AllocationEnv(workload="beam_search", workflow_rate=0.2, period_seconds=60.0)
    alloc = Allocation(
        (LLMAllocation("llama3.1-8b-prm", 8, 1, 2), LLMAllocation("llama3.2-1b", 8, 1, 2)), 4
    )
    _, info = run(env, FixedAllocation(alloc))
    res = env.sim.result()
    gen = [c for c in res.calls if c.model == "llama3.2-1b"]
    assert gen
    hit = sum(c.cached_tokens for c in gen) / sum(c.input_tokens for c in gen)
    # a generator prompt = its beam's lineage: most of it is cached when the router keeps a
    # workflow on the replica that served its earlier steps
    assert hit > 0.5
    # the verifier re-reads the whole trajectory every call (search-and-learn's PRM)
    assert all(c.cached_tokens == 0 for c in res.calls if c.model == "llama3.1-8b-prm")
    by_wf: dict[str, set[int]] = {}
    for c in gen:
        by_wf.setdefault(c.workflow_id, set()).add(c.prefill_instance)
    assert sum(len(v) == 1 for v in by_wf.values()) >= 0.6 * len(by_wf)


class _HPACtx:
    """The AllocationContext fields KubernetesHPA.plan reads."""

    def __init__(self, t, running, busy, gpus=4):
        from envs.sim.hardware.cluster import Topology

        self.time = t
        self.units_per_gpu = 4
        self.topology = Topology("rtx-a6000", 1, gpus, ((0, 1), (2, 3)))
        self.models = tuple(running)
        self.max_replicas = 16
        self.previous = Allocation(
            tuple(LLMAllocation(m, 4 * r, 1, r) for m, r in running.items()), 4
        )
        self.llm_metrics = {m: _Metric(b) for m, b in busy.items()}
        self.min_share = {(m, 1): 4 for m in running}


def test_hpa_never_evicts_running_pods_and_leaves_the_rest_pending():
    hpa = KubernetesHPA(target=0.5, tolerance=0.1)
    # a wants 4 (ceil(2 * 1.0 / 0.5)), b keeps its 2 running pods: a gets no GPU beyond its 2
    plan = hpa.plan(_HPACtx(0.0, {"a": 2, "b": 2}, {"a": 1.0, "b": 0.5}))
    assert plan.get("a").replicas == 2 and plan.get("b").replicas == 2
    assert hpa.pending == {"a": 2}
    # b scales down once its window allows: the freed GPUs go to a's pending pods
    hpa = KubernetesHPA(target=0.5, tolerance=0.1, stabilization_s=0.0)
    plan = hpa.plan(_HPACtx(15.0, {"a": 2, "b": 2}, {"a": 1.0, "b": 0.1}))
    assert plan.get("b").replicas == 1 and plan.get("a").replicas == 3
    assert hpa.pending == {"a": 1}


def test_scepsy_plans_for_the_scheduled_rate_and_the_reactive_variant_for_the_measured(
    monkeypatch,
):
    import envs.sim.allocation.scepsy as scepsy_pkg
    import heuristics.allocation.scepsy.search as search_mod
    from heuristics.allocation import ScepsyPolicy

    asked = []

    class Result:
        allocation = Allocation((LLMAllocation("m", 4, 1, 1),), 4)

    def fake_search(apl, rate, topology, **kw):
        asked.append(rate)
        return Result()

    monkeypatch.setattr(scepsy_pkg, "pipelines_for", lambda *a, **k: {"f": object()})
    monkeypatch.setattr(search_mod, "search", fake_search)

    class Ctx:
        workload, engine, units_per_gpu, max_replicas = "w", "vllm", 4, 16
        memory_utilization, min_kv_tokens, latency_calibration = 0.9, 8192, "roofline"

        class topology:  # noqa: N801  (stands in for a Topology)
            gpu = "rtx-a6000"

        def __init__(self, target, last, first):
            self.target_rate, self.last_rate = target, last
            self.previous = None if first else Result.allocation

    for name, expect in (("scepsy", [2.0, 3.0]), ("scepsy-reactive", [2.0, 1.5])):
        asked.clear()
        pol = ScepsyPolicy(name, reactive=name.endswith("reactive"))
        pol.plan(Ctx(2.0, 0.0, first=True))
        pol.plan(Ctx(3.0, 1.5, first=False))
        assert asked == expect


def test_sticky_scepsy_keeps_its_allocation_while_the_apl_says_it_sustains(monkeypatch):
    import envs.sim.allocation.scepsy as scepsy_pkg
    import heuristics.allocation.scepsy.search as search_mod
    from heuristics.allocation import ScepsyPolicy

    kept = Allocation((LLMAllocation("m", 4, 1, 1),), 4)
    fresh = Allocation((LLMAllocation("m", 8, 1, 2),), 4)

    class APL:
        def predict(self, alloc, rate, stat="mean"):
            class P:
                throughput = 2.0 if alloc == kept else 10.0

            return P()

    class Result:
        allocation = fresh

    monkeypatch.setattr(scepsy_pkg, "pipeline_for", lambda *a, **k: APL())
    monkeypatch.setattr(scepsy_pkg, "pipelines_for", lambda *a, **k: {"f": APL()})
    monkeypatch.setattr(search_mod, "search", lambda *a, **k: Result())

    class Ctx:
        workload, engine, units_per_gpu, max_replicas = "w", "vllm", 4, 16
        memory_utilization, min_kv_tokens, last_rate = 0.9, 8192, 0.0
        latency_calibration = "roofline"

        class topology:  # noqa: N801
            gpu = "rtx-a6000"

        def __init__(self, target):
            self.target_rate, self.previous = target, kept

    pol = ScepsyPolicy("scepsy-sticky", sticky=True)
    assert pol.plan(Ctx(1.5)) is kept  # the APL says 2.0/s >= 1.5/s: no reconfiguration
    assert pol.plan(Ctx(3.0)) is fresh  # 2.0/s < 3.0/s: re-solved
    assert ScepsyPolicy("scepsy").plan(Ctx(1.5)) is fresh  # the default always re-solves


def test_replicas_sharing_a_gpu_all_serve_and_an_unchanged_allocation_restarts_nothing():
    # eight quarter-GPU replicas of the generator: four per GPU, at the same share
    alloc = Allocation(
        (LLMAllocation("llama3.1-8b-prm", 8, 1, 2), LLMAllocation("llama3.2-1b", 8, 1, 8)), 4
    )
    env = AllocationEnv(workload="beam_search", workflow_rate=0.5, periods=3, period_seconds=20)
    _, info = run(env, FixedAllocation(alloc))
    u = env.unwrapped
    assert info["metrics"]["reconfigurations"] == 0
    assert len(u.sim.monolithic) == 10  # the first period's replicas, never re-created
    served = {c.prefill_instance for c in u.sim.result().calls if c.model == "llama3.2-1b"}
    assert len(served) == 8
