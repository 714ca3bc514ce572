"""Specifications of the calibrated trace generators (``traces.generators``).

Every generator, for several seeds: its output is a valid trace, and the emergent aggregate
statistics of a large sample are within 10 % of the targets recorded in ``traces/stats/*.yaml``
(statistics of the raw data, or of a documented structural rule applied to it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from traces.generators import GENERATORS, generate
from traces.generators._common import STATS_DIR, load_stats
from traces.io import write_trace
from traces.schema import LLMNode, ToolNode
from traces.validate import validate_records

SEEDS = (0, 1, 2)
REL_TOL = 0.10
ROOT = Path(__file__).resolve().parents[2]


def _rate(records) -> float:
    t = np.array([r.arrival for r in records])
    return (len(t) - 1) / (t[-1] - t[0])


def _close(measured: dict[str, float], targets: dict[str, float]) -> None:
    bad = {
        k: (round(v, 3), targets[k])
        for k, v in measured.items()
        if abs(v - targets[k]) > REL_TOL * abs(targets[k])
    }
    assert not bad, f"measured vs target (key: (measured, target)) off by > 10 %: {bad}"


def _llm(wf, task=None):
    return [n for n in wf.nodes if isinstance(n, LLMNode) and (task is None or n.task == task)]


def sharegpt_stats(recs) -> dict[str, float]:
    outs = [n.output_tokens for w in recs for n in w.nodes]
    return {
        "mean_turns": np.mean([len(w.nodes) for w in recs]),
        "mean_output_tokens": np.mean(outs),
        "median_output_tokens": np.median(outs),
        "mean_user_tokens": np.mean([w.nodes[0].input_tokens for w in recs]),
        "mean_last_turn_input_tokens": np.mean([w.nodes[-1].input_tokens for w in recs]),
        "arrival_rate_per_s": _rate(recs),
    }


def bfcl_stats(recs) -> dict[str, float]:
    fanout = []
    for w in recs:
        for n in _llm(w, "parallel_call"):
            fanout.append(sum(1 for m in w.nodes if n.id in m.parents))
    multi = [w for w in recs if w.meta["kind"] == "multi_turn"]
    return {
        "mean_llm_calls_per_workflow": np.mean([len(_llm(w)) for w in recs]),
        "mean_tool_calls_per_workflow": np.mean(
            [sum(isinstance(n, ToolNode) for n in w.nodes) for w in recs]
        ),
        "mean_parallel_fanout": np.mean(fanout),
        "mean_call_output_tokens": np.mean(
            [n.output_tokens for w in recs for n in _llm(w, "function_call")]
        ),
        "mean_user_turns_multi_turn": np.mean([len(_llm(w, "reply")) for w in multi]),
        "arrival_rate_per_s": _rate(recs),
    }


def lats_stats(recs) -> dict[str, float]:
    gens = [len(_llm(w, "generate")) for w in recs]
    exps = [w.meta["expansions"] for w in recs]
    return {
        "mean_fanout": sum(gens) / sum(exps),
        "mean_expansions_per_workflow": np.mean(exps),
        "mean_generator_calls_per_workflow": np.mean(gens),
        "mean_sample_output_tokens": np.mean(
            [n.output_tokens for w in recs for n in _llm(w, "generate")]
        ),
        "mean_value_input_tokens": np.mean(
            [n.input_tokens for w in recs for n in _llm(w, "value")]
        ),
        "arrival_rate_per_s": _rate(recs),
    }


def goodserve_stats(recs) -> dict[str, float]:
    by = {t: [r for r in recs if r.task == t] for t in ("sql", "code", "swe")}
    horizon = recs[-1].arrival / 2  # sessions starting late may be cut off by ``count``
    sessions = Counter(r.meta["session"] for r in by["swe"] if r.meta["session"])
    starts = {r.meta["session"]: r.arrival for r in by["swe"] if r.meta["step"] == 0}
    whole = [n for s, n in sessions.items() if starts.get(s, np.inf) < horizon]
    return {
        "sql_mean_output_tokens": np.mean([r.output_tokens for r in by["sql"]]),
        "sql_mean_input_tokens": np.mean([r.input_tokens for r in by["sql"]]),
        "code_mean_output_tokens": np.mean([r.output_tokens for r in by["code"]]),
        "code_mean_input_tokens": np.mean([r.input_tokens for r in by["code"]]),
        "swe_first_step_mean_input_tokens": np.mean(
            [r.input_tokens for r in by["swe"] if r.meta["step"] == 0]
        ),
        "swe_mean_output_tokens": np.mean([r.output_tokens for r in by["swe"]]),
        "swe_mean_steps_per_session": np.mean(whole),
        "arrival_rate_per_s": _rate(recs),
    }


def rag_stats(recs) -> dict[str, float]:
    gen = [n for w in recs for n in _llm(w, "generate")]
    return {
        "mean_k": np.mean([len(_llm(w, "rerank")) for w in recs]),
        "mean_generate_input_tokens": np.mean([n.input_tokens for n in gen]),
        "mean_generate_output_tokens": np.mean([n.output_tokens for n in gen]),
        "mean_rerank_input_tokens": np.mean(
            [n.input_tokens for w in recs for n in _llm(w, "rerank")]
        ),
        "arrival_rate_per_s": _rate(recs),
    }


def beam_stats(recs) -> dict[str, float]:
    g = [len(_llm(w, "generate")) for w in recs]
    return {
        "mean_generator_invocations": np.mean(g),
        "median_generator_invocations": np.median(g),
        "mean_depth": np.mean([sum(isinstance(n, ToolNode) for n in w.nodes) for w in recs]),
        "arrival_rate_per_s": _rate(recs),
    }


# (generator, stats file, sample size large enough for ~3 % sampling error, measure)
CASES = [
    pytest.param("sharegpt", "sharegpt", 2000, sharegpt_stats, id="sharegpt"),
    pytest.param("bfcl", "bfcl", 3000, bfcl_stats, id="bfcl"),
    pytest.param("lats", "lats", 1500, lats_stats, id="lats"),
    # The two slowest samples (6-12 s a seed) run in the slow tier (make test-all).
    pytest.param(
        "goodserve-sessions",
        "goodserve",
        50000,
        goodserve_stats,
        id="goodserve-sessions",
        marks=pytest.mark.slow,
    ),
    pytest.param("rag_reranker", "rag_reranker", 2000, rag_stats, id="rag_reranker"),
    pytest.param(
        "beam_search", "beam_search", 1200, beam_stats, id="beam_search", marks=pytest.mark.slow
    ),
]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("name", "stats_name", "count", "measure"), CASES)
def test_generator_statistics_within_10_percent_of_fitted_targets(
    name, stats_name, count, measure, seed
):
    recs = generate(name, seed=seed, count=count)
    validate_records(recs)
    targets = load_stats(stats_name)["targets"]
    measured = measure(recs)
    _close(measured, {k: targets[k] for k in measured})


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_default_trace_is_valid_with_paper_defaults(name, seed):
    recs = generate(name, seed=seed)
    validate_records(recs)
    assert recs and recs[0].arrival == 0.0


@pytest.mark.parametrize("seed", SEEDS)
def test_mixed_interleaves_three_families_in_equal_shares_at_10_per_s(seed):
    recs = generate("mixed", seed=seed, count=3000)
    validate_records(recs)
    shares = Counter(w.meta["workload"] for w in recs)
    assert set(shares) == {"sharegpt", "bfcl", "lats"}
    _close({k: v / len(recs) for k, v in shares.items()}, dict.fromkeys(shares, 1 / 3))
    _close({"rate": _rate(recs)}, {"rate": 10.0})


@pytest.mark.parametrize("seed", SEEDS)
def test_rag_beam_combined_keeps_both_families_and_their_models(seed):
    recs = generate("rag_beam_combined", seed=seed, count=600)
    validate_records(recs)
    shares = Counter(w.meta["workload"] for w in recs)
    _close({k: v / len(recs) for k, v in shares.items()}, {"rag_reranker": 0.5, "beam_search": 0.5})
    models = {n.model for w in recs for n in _llm(w)}
    assert models == {"e5-base-v2", "bge-reranker-base", "llama3-8b", "llama3.2-1b",
                      "llama3.1-8b-prm"}  # fmt: skip


def test_encoder_only_models_generate_no_tokens():
    recs = generate("rag_reranker", seed=0, count=50)
    for w in recs:
        for n in _llm(w):
            if n.model in ("e5-base-v2", "bge-reranker-base"):
                assert n.output_tokens == 0, (w.id, n.id)


def test_beam_search_generator_invocations_span_tens_to_hundreds():
    g = [len(_llm(w, "generate")) for w in generate("beam_search", seed=0, count=500)]
    assert 24 <= min(g) < 60 and 400 < max(g) <= 848, (min(g), max(g))


def test_beam_verifier_rereads_its_trajectory_unless_the_cached_variant_is_asked_for():
    from traces.generators.beam_search import generate_beam_search

    plain = generate_beam_search(3, 20)
    cached = generate_beam_search(3, 20, verifier_prefix_cache=True)
    for a, b in zip(plain, cached, strict=True):
        for x, y in zip(a.nodes, b.nodes, strict=True):
            if getattr(x, "model", None) == "llama3.1-8b-prm":
                # the verifier prefills its whole trajectory: nothing for a cache to match
                assert x.prefix_hashes is None and y.prefix_hashes
                assert x.input_tokens == y.input_tokens
            else:  # everything else (the generator's prefixes, lengths, the DAG) is unchanged
                assert x == y
    # the cached variant's verifier prompts share their beam's earlier blocks
    ver = [n for n in cached[0].nodes if getattr(n, "model", None) == "llama3.1-8b-prm"]
    assert any(set(ver[0].prefix_hashes) & set(v.prefix_hashes) for v in ver[8:])


def test_goodserve_prompt_text_carries_signal_about_output_length():
    recs = generate("goodserve", seed=0, count=4000)
    for task, hard, easy in (("code", "very hard", "an easy"), ("sql", "nested", "simple")):
        rs = [r for r in recs if r.task == task]
        hard_out = np.mean([r.output_tokens for r in rs if hard in r.prompt])
        easy_out = np.mean([r.output_tokens for r in rs if easy in r.prompt])
        assert hard_out > 2 * easy_out, (task, hard_out, easy_out)
        corr = np.corrcoef([len(r.prompt) for r in rs], [r.output_tokens for r in rs])[0, 1]
        assert corr > 0.2, (task, corr)


def test_goodserve_swe_sessions_grow_their_inputs_step_by_step():
    recs = generate("goodserve-sessions", seed=1, count=2000)
    steps: dict[str, list] = {}
    for r in recs:
        if r.task == "swe":
            steps.setdefault(r.meta["session"], []).append(r)
    for rs in steps.values():
        rs.sort(key=lambda r: r.meta["step"])
        ins = [r.input_tokens for r in rs]
        assert ins == sorted(ins)
        assert [r.meta["step"] for r in rs] == list(range(len(rs)))


@pytest.mark.parametrize("model", ["llama3.1-8b", "qwen2.5-14b"])
def test_goodserve_uses_the_requested_model(model):
    assert {r.model for r in generate("goodserve", seed=0, count=100, model=model)} == {model}


def test_goodserve_bursty_arrivals_keep_the_mean_rate():
    recs = generate("goodserve-sessions", seed=0, count=20000, arrivals="bursty", rate=5.0)
    _close({"rate": _rate(recs)}, {"rate": 5.0})


def test_goodserve_mooncake_arrivals_replay_the_trace_rate():
    data = os.environ.get("SERVEGYM_DATA")
    if not data:
        pytest.skip("SERVEGYM_DATA is unset: the Mooncake replay needs the raw trace dir")
    recs = generate("goodserve-sessions", seed=0, count=40000, arrivals="mooncake", data_dir=data)
    validate_records(recs)
    target = load_stats("goodserve")["mooncake_rate_per_s"]
    _close({"rate": _rate(recs)}, {"rate": target})


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_same_seed_gives_byte_identical_file_and_other_seeds_differ(name, tmp_path):
    paths = []
    for i, seed in enumerate((7, 7, 8)):
        paths.append(write_trace(generate(name, seed=seed, count=30), tmp_path / f"{i}.jsonl"))
    a, b, c = (Path(p).read_bytes() for p in paths)
    assert a == b
    assert a != c


def test_unknown_generator_error_lists_known_names():
    with pytest.raises(KeyError, match="known: agent_chain, beam_search, bfcl"):
        generate("nope", seed=0)


def test_bad_arguments_name_the_offending_value():
    with pytest.raises(ValueError, match="-3"):
        generate("sharegpt", seed=0, count=-3)
    with pytest.raises(ValueError, match="'weird'"):
        generate("goodserve", seed=0, arrivals="weird")
    with pytest.raises(ValueError, match="'llama2-7b'"):
        generate("goodserve", seed=0, model="llama2-7b")


def test_cli_writes_a_trace_that_traces_validate_accepts(tmp_path):
    out = tmp_path / "bfcl.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    gen = [sys.executable, "-m", "traces.generate", "bfcl", "--seed", "3", "--count", "25",
           "--out", str(out)]  # fmt: skip
    subprocess.run(gen, check=True, cwd=ROOT, env=env, capture_output=True)
    val = subprocess.run([sys.executable, "-m", "traces.validate", str(out)], cwd=ROOT, env=env,
                         capture_output=True, text=True)  # fmt: skip
    assert val.returncode == 0, val.stdout + val.stderr


def test_every_stats_file_names_its_sources_procedure_and_date():
    for path in sorted(STATS_DIR.glob("*.yaml")):
        head = path.read_text(encoding="utf-8").split("\n", 8)
        text = "\n".join(head)
        assert "# sources" in text and "# date:" in text and "# procedure" in text, path.name


def test_fit_on_the_real_data_dir_reproduces_the_committed_stats():
    data = os.environ.get("SERVEGYM_DATA")
    if not data:
        pytest.skip("SERVEGYM_DATA is unset: the raw traces are needed to re-run traces.fit")
    from traces.fit import fit_all

    fitted = fit_all(Path(data))
    for name, stats in fitted.items():
        committed = yaml.safe_load((STATS_DIR / f"{name}.yaml").read_text(encoding="utf-8"))
        # Round-trip through YAML so int keys and floats compare as they are stored.
        assert yaml.safe_load(yaml.safe_dump(stats)) == committed, name


@pytest.mark.parametrize("model", ["llama3.1-8b", "qwen2.5-14b"])
def test_goodserve_requests_fit_their_models_context_window(model):
    from traces.generators.goodserve import MODEL_CONTEXT

    recs = generate("goodserve", seed=0, count=600, model=model)
    assert max(r.input_tokens + r.output_tokens for r in recs) <= MODEL_CONTEXT[model]


def test_goodserve_swe_steps_share_their_sessions_prefix_blocks():
    recs = generate("goodserve-sessions", seed=1, count=1000)
    steps: dict[str, list] = {}
    for r in recs:
        if r.task == "swe":
            steps.setdefault(r.meta["session"], []).append(r)
        else:
            assert r.prefix_hashes is None
    sessions = [sorted(rs, key=lambda r: r.meta["step"]) for rs in steps.values()]
    assert any(len(rs) > 1 for rs in sessions)
    seen: set[int] = set()
    for rs in sessions:
        for a, b in zip(rs, rs[1:], strict=False):
            assert b.prefix_hashes[: len(a.prefix_hashes)] == a.prefix_hashes
        assert len(rs[0].prefix_hashes) == rs[0].input_tokens // 512
        assert not seen & set(rs[0].prefix_hashes)  # no block is shared across sessions
        seen |= {h for r in rs for h in r.prefix_hashes}
