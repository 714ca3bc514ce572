"""Each env's options dataclass is the one place its constructor arguments live: the Arguments
table of the env docstring lists exactly the constructor's options with their real defaults,
and a bad value of each option fails when the env is built, naming the option."""

from __future__ import annotations

import ast
import dataclasses
import inspect

import gymnasium as gym
import pytest

import envs  # noqa: F401  (registers the servegym ids)
from envs.allocation import AllocationEnv
from envs.common.options import EnvOptions, arguments_table, check_number, option_docs
from envs.pd_cluster import PDClusterEnv
from envs.routing import RoutingEnv

ENVS = {
    "servegym/PDCluster-v0": PDClusterEnv,
    "servegym/Routing-v0": RoutingEnv,
    "servegym/Allocation-v0": AllocationEnv,
}

#: A bad value of every option (the option's name must appear in the error).
BAD_COMMON = {
    "reward": "goodputt",
    "reward_kwargs": {"no_such_option": 1},
    "invalid_action": "ignore",
    "invalid_penalty": "high",
    "max_steps": 0,
    "workload_seed": 1.5,
    "render_mode": "video",
    "decision_context": "yes",
    "latency_calibration": "rooflin",
}
BAD = {
    "servegym/PDCluster-v0": {
        "cluster": 3,
        "model": 70,
        "workload": "mixd",
        "trace": 5,
        "workload_count": 0,
        "workload_rate": -1.0,
        "load_scale": "high",
        "slots": 0,
        "estimate_error": 1.0,
        "output_predictor": "orcale",
        "tool_estimate": "guess",
        "prefix_cache": -1,
        "prefix_cache_visible": "no",
        "planning_delay": "slow",
        "planning_delay_scale": 0.0,
        "observations": 1,
        "action_space": "three-step",
    },
    "servegym/Routing-v0": {
        "cluster": 3,
        "model": 8,
        "instances": 0,
        "workload": "mixd",
        "trace": 5,
        "workload_count": 0,
        "workload_rate": 0.0,
        "load_scale": "high",
        "slo_scale": 0,
        "slo_reference_gpu": 800,
        "slo_basis": "median",
        "output_predictor": "orcale",
        "predictor_error": -0.1,
        "engine": "vlm",
        "prefill_mode": "chunky",
        "token_budget": 0,
        "check_interval": -1,
        "check_queued": "yes",
        "migration": "kvv",
        "prefix_cache": 1,
        "ema_alpha": 1.5,
        "observation": "full",
    },
    "servegym/Allocation-v0": {
        "cluster": 3,
        "gpus": 0,
        "workload": "rag",
        "workflow_rate": "fast",
        "rate_trace": "hourly",
        "rate_window": "test",
        "periods": 0,
        "period_seconds": 0.0,
        "warmup_seconds": -1.0,
        "drain_seconds": -1.0,
        "units_per_gpu": 1.5,
        "max_replicas": 0,
        "engine": "vlm",
        "min_kv_tokens": -1,
        "slo_scale": -5.0,
        "reconfig_startup_s": "long",
        "load_bandwidth": 0.0,
        "apl_info": "yes",
        "max_llms": 0,
        "rate_ramp": (4.0, 0.5, 2.0),
    },
}


def _table_rows(doc: str) -> dict[str, str]:
    """``name -> default`` cells of the Markdown Arguments table in ``doc``."""
    section = doc.split("## Arguments", 1)[1]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = cells[2].strip("`").replace("\\|", "|")
    return rows


@pytest.mark.parametrize("gym_id", ENVS)
def test_arguments_table_lists_exactly_the_constructor_options_with_their_defaults(gym_id):
    cls = ENVS[gym_id]
    rows = _table_rows(inspect.getdoc(cls) or "")
    assert rows, f"{cls.__name__}'s docstring has no Arguments table"
    params = inspect.signature(cls).parameters
    keywords = {n: p for n, p in params.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}
    assert set(rows) == set(keywords)
    assert arguments_table(cls.OPTIONS) in (cls.__doc__ or "")
    # Every listed default is accepted as a keyword and is what the env gets without it.
    defaults = {name: ast.literal_eval(cell) for name, cell in rows.items()}
    assert defaults == {n: p.default for n, p in keywords.items()}
    built = cls(**defaults)
    assert built.env_options == cls().env_options
    built.close()


@pytest.mark.parametrize("gym_id", ENVS)
def test_a_bad_value_of_each_option_fails_at_construction_naming_it(gym_id):
    cls = ENVS[gym_id]
    bad = {**BAD_COMMON, **BAD[gym_id]}
    assert set(bad) == {f.name for f in dataclasses.fields(cls.OPTIONS)}, "a bad value each"
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            gym.make(gym_id, **{name: value})


@pytest.mark.parametrize("gym_id", ENVS)
def test_unknown_keyword_names_the_options(gym_id):
    with pytest.raises(TypeError, match="did you mean 'workload'"):
        ENVS[gym_id](workloadd="x")


def test_options_object_and_keywords_build_the_same_env():
    from envs.routing.options import RoutingOptions

    options = RoutingOptions(workload_count=20, migration="kv")
    a = RoutingEnv(options)
    b = RoutingEnv(workload_count=20, migration="kv")
    c = RoutingEnv(options, slo_scale=3.0)
    assert a.env_options == b.env_options == options
    assert (c.env_options.slo_scale, c.env_options.migration) == (3.0, "kv")
    with pytest.raises(TypeError, match="RoutingOptions"):
        RoutingEnv("goodserve-4")


def test_load_scale_text_says_it_expects_a_positive_number():
    with pytest.raises(ValueError, match=r"load_scale must be a number > 0.*'high'"):
        gym.make("servegym/PDCluster-v0", load_scale="high")


def test_every_option_is_documented_and_every_cli_option_is_an_env_option():
    from envs import CLI_ENVS

    for gym_id, cls in ENVS.items():
        docs = option_docs(cls.OPTIONS)
        assert all(len(text) > 10 for text in docs.values()), gym_id
        names = {f.name for f in dataclasses.fields(cls.OPTIONS)}
        # the short names of one id (``routing``, ``routing-v0``) and of its newer versions
        family = gym_id.rsplit("-v", 1)[0]
        mappings = [m for g, m in CLI_ENVS.values() if g.rsplit("-v", 1)[0] == family]
        assert mappings, gym_id
        for mapping in mappings:
            assert set(mapping.values()) <= names, gym_id


def test_an_undocumented_option_is_an_error():
    @dataclasses.dataclass(frozen=True)
    class Undocumented(EnvOptions):
        speed: float = 1.0

    with pytest.raises(TypeError, match="speed"):
        option_docs(Undocumented)


def test_check_number_names_option_value_and_range():
    check_number("x", 2, 1, integer=True)
    for value in (True, "2", float("nan"), 0.5):
        with pytest.raises(ValueError, match=r"x must be an integer >= 1, got"):
            check_number("x", value, 1, integer=True)
