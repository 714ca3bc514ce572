"""Specifications of the trace loaders, checked against facts stated in traces-raw/SOURCES.md.

These tests read the public traces from ``$SERVEGYM_DATA`` and skip when it is not set.
"""

from __future__ import annotations

import math
import os
import statistics
import warnings
from pathlib import Path

import pytest

from traces.data import DataDirNotFoundError
from traces.loaders import LOADERS, FilteredRecordsWarning, load
from traces.schema import LLMNode, Request, ToolNode, Workflow
from traces.tokens import (
    TOKENS_PER_CHAR,
    calibrate_tokens_per_char,
    estimate_tokens,
    estimate_tokens_from_chars,
)
from traces.validate import validate_records


@pytest.fixture(scope="module")
def data() -> Path:
    value = os.environ.get("SERVEGYM_DATA")
    if not value:
        pytest.skip("SERVEGYM_DATA not set: the loader tests need the public trace files")
    return Path(value)


def _load(name: str, data: Path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FilteredRecordsWarning)
        return load(name, data_dir=data, **kw)


def _llm(wf: Workflow) -> list[LLMNode]:
    return [n for n in wf.nodes if isinstance(n, LLMNode)]


def _children(wf: Workflow) -> dict[str, list[str]]:
    kids: dict[str, list[str]] = {n.id: [] for n in wf.nodes}
    for n in wf.nodes:
        for p in n.parents:
            kids[p].append(n.id)
    return kids


def _longest_llm_chain(wf: Workflow) -> int:
    """Largest number of LLM nodes on one parent-to-child path."""
    by_id = {n.id: n for n in wf.nodes}
    memo: dict[str, int] = {}

    def depth(node_id: str) -> int:
        if node_id not in memo:
            node = by_id[node_id]
            memo[node_id] = isinstance(node, LLMNode) + max(
                (depth(p) for p in node.parents), default=0
            )
        return memo[node_id]

    return max(depth(n.id) for n in wf.nodes)


# --- registry -------------------------------------------------------------------------------


def test_registry_names_the_six_required_sources() -> None:
    required = {
        "mooncake-conversation",
        "mooncake-synthetic",
        "azure-code",
        "ragpulse",
        "bfcl",
        "lats",
        "parrot-metagpt",
    }
    assert required <= set(LOADERS)


def test_load_unknown_name_lists_known_loaders() -> None:
    with pytest.raises(KeyError, match="mooncake-conversation"):
        load("no-such-trace")


def test_loader_without_data_dir_raises_data_dir_not_found(monkeypatch) -> None:
    monkeypatch.delenv("SERVEGYM_DATA", raising=False)
    with pytest.raises(DataDirNotFoundError, match="SERVEGYM_DATA"):
        load("mooncake-synthetic")


@pytest.mark.parametrize("bad", [0, -3, 2.5])
def test_limit_must_be_a_positive_integer(data: Path, bad) -> None:
    with pytest.raises(ValueError, match="limit"):
        load("azure-code", data_dir=data, limit=bad)


@pytest.mark.parametrize("name", ["mooncake-conversation", "azure-code", "ragpulse", "bfcl"])
def test_limit_returns_the_first_records(data: Path, name: str) -> None:
    records = _load(name, data, limit=5)
    assert len(records) == 5
    assert records[0].arrival == 0.0


def test_model_argument_sets_every_call_model(data: Path) -> None:
    records = _load("bfcl", data, model="qwen2.5-14b", limit=20)
    assert {n.model for wf in records for n in _llm(wf)} == {"qwen2.5-14b"}
    validate_records(records)


# --- tokens ---------------------------------------------------------------------------------


def test_tokens_per_char_matches_calibration_on_parrot(data: Path) -> None:
    assert calibrate_tokens_per_char(data / "parrot_metagpt") == pytest.approx(
        TOKENS_PER_CHAR, abs=5e-4
    )


def test_estimate_tokens_rounds_and_never_returns_zero_for_text() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("x" * 1000) == round(1000 * TOKENS_PER_CHAR)
    with pytest.raises(ValueError, match="-1"):
        estimate_tokens_from_chars(-1)


# --- Mooncake -------------------------------------------------------------------------------


def test_mooncake_conversation_matches_sources_stats(data: Path) -> None:
    reqs = _load("mooncake-conversation", data)
    assert len(reqs) == 12_031
    validate_records(reqs)
    first = reqs[0]
    assert (first.arrival, first.input_tokens, first.output_tokens) == (0.0, 6758, 500)
    assert first.prefix_hashes[:3] == (0, 1, 2)
    assert reqs[-1].arrival == pytest.approx(3536.999)
    assert round(statistics.fmean(r.input_tokens for r in reqs)) == 12_035
    assert round(statistics.fmean(r.output_tokens for r in reqs)) == 343
    assert all(len(r.prefix_hashes) == math.ceil(r.input_tokens / 512) for r in reqs)


def test_mooncake_synthetic_matches_sources_stats(data: Path) -> None:
    reqs = _load("mooncake-synthetic", data)
    assert len(reqs) == 3_993
    validate_records(reqs)
    assert reqs[-1].arrival == pytest.approx(1022.025)
    assert statistics.median(r.input_tokens for r in reqs) == 11_587
    assert round(statistics.fmean(r.output_tokens for r in reqs)) == 149


# --- Azure ----------------------------------------------------------------------------------


def test_azure_code_matches_sources_stats(data: Path) -> None:
    reqs = _load("azure-code", data)
    assert len(reqs) == 8_819
    validate_records(reqs)
    assert all(isinstance(r, Request) and r.task == "code" for r in reqs)
    assert (reqs[0].input_tokens, reqs[0].output_tokens) == (4808, 10)
    # 18:17:04.0319600 - 18:17:03.9799600
    assert reqs[1].arrival == pytest.approx(0.052)
    assert reqs[-1].arrival == pytest.approx(3435.948056, abs=1e-6)
    assert round(statistics.fmean(r.input_tokens for r in reqs)) == 2_048
    assert round(statistics.fmean(r.output_tokens for r in reqs)) == 28


# --- RAGPulse -------------------------------------------------------------------------------


def test_ragpulse_arrivals_are_sorted_although_the_source_is_not(data: Path) -> None:
    wfs = _load("ragpulse", data)
    assert len(wfs) == 7_106
    lines = [wf.meta["line"] for wf in wfs]
    assert lines != sorted(lines)  # the file order is not the arrival order
    arrivals = [wf.arrival for wf in wfs]
    assert arrivals == sorted(arrivals)
    assert arrivals[0] == 0.0 and arrivals[-1] == 604_603.0
    validate_records(wfs)


def test_ragpulse_workflows_follow_the_recorded_rag_structure(data: Path) -> None:
    wfs = _load("ragpulse", data)
    generate = [n for wf in wfs for n in wf.nodes if n.id == "generate"]
    assert len(generate) == len(wfs)
    assert round(statistics.fmean(n.input_tokens for n in generate)) == 2_944
    assert round(statistics.fmean(n.output_tokens for n in generate)) == 283
    with_passages = [wf for wf in wfs if wf.meta["passages"] > 0]
    assert len(with_passages) / len(wfs) == pytest.approx(0.79, abs=0.01)
    # "4.7 passages on average (about 1,247 tokens)", averaged over all requests.
    assert statistics.fmean(wf.meta["passages"] for wf in wfs) == pytest.approx(4.7, abs=0.05)
    assert round(statistics.fmean(wf.meta["passage_tokens"] for wf in wfs)) == 1_247
    for wf in with_passages[:200]:
        ids = {n.id: n for n in wf.nodes}
        assert ids["retrieve"].parents == ("embed",)
        assert ids["rerank"].parents == ("retrieve",)
        assert "rerank" in ids["generate"].parents
    web = [wf for wf in wfs if wf.meta["hash_ids"]["web_search"]]
    assert len(web) / len(wfs) == pytest.approx(0.04, abs=0.01)
    assert all("web_search" in {n.id for n in wf.nodes} for wf in web)


def test_ragpulse_without_reranker_has_no_rerank_node(data: Path) -> None:
    wfs = _load("ragpulse", data, rerank_model=None, limit=300)
    assert not any(n.id == "rerank" for wf in wfs for n in wf.nodes)
    validate_records(wfs)


# --- BFCL -----------------------------------------------------------------------------------


def test_bfcl_loads_every_task_and_validates(data: Path) -> None:
    wfs = _load("bfcl", data)
    assert len(wfs) == 4 * 200 + 3 * 200 + 16 + 24
    validate_records(wfs)
    multi = [wf for wf in wfs if wf.meta["category"] == "multi_turn_base"]
    assert len(multi) == 200
    turns = sum(wf.meta["turns"] for wf in multi)
    assert turns / len(multi) == pytest.approx(3.7, abs=0.05)
    assert sum(wf.meta["calls"] for wf in multi) / turns == pytest.approx(1.6, abs=0.05)


def test_bfcl_multi_turn_is_one_llm_step_per_tool_round(data: Path) -> None:
    wf = _load("bfcl", data, categories=["multi_turn_base"], limit=1)[0]
    # Turn 0 of multi_turn_base_0: cd, mkdir, mv, then the closing step.
    turn0 = [n.id for n in wf.nodes if n.id.startswith("t0.")]
    assert turn0 == ["t0.s0", "t0.c0", "t0.s1", "t0.c1", "t0.s2", "t0.c2", "t0.s3"]
    assert [n.name for n in wf.nodes if isinstance(n, ToolNode)][:3] == ["cd", "mkdir", "mv"]
    by_id = {n.id: n for n in wf.nodes}
    assert by_id["t1.s0"].parents == ("t0.s3",)
    inputs = [n.input_tokens for n in _llm(wf)]
    assert inputs == sorted(inputs)  # the context only grows
    assert _longest_llm_chain(wf) == len(_llm(wf))


def test_bfcl_parallel_tasks_fan_out(data: Path) -> None:
    wfs = _load("bfcl", data, categories=["parallel"])
    fan_outs = []
    for wf in wfs:
        kids = _children(wf)
        (first,) = [n for n in wf.nodes if not n.parents]
        tools = kids[first.id]
        assert all(isinstance(n, ToolNode) for n in wf.nodes if n.id in tools)
        (closing,) = [n for n in _llm(wf) if n.parents]
        assert set(closing.parents) == set(tools)
        fan_outs.append(len(tools))
    assert min(fan_outs) >= 2 and max(fan_outs) <= 8
    assert max(fan_outs) > 2


def test_bfcl_arrivals_are_seeded_poisson(data: Path) -> None:
    wfs = _load("bfcl", data, rate=40.0, seed=7)
    gaps = [b.arrival - a.arrival for a, b in zip(wfs, wfs[1:], strict=False)]
    assert wfs[0].arrival == 0.0
    assert statistics.fmean(gaps) == pytest.approx(1 / 40, rel=0.1)
    again = _load("bfcl", data, rate=40.0, seed=7)
    other = _load("bfcl", data, rate=40.0, seed=8)
    assert [w.arrival for w in again] == [w.arrival for w in wfs]
    assert [w.arrival for w in other] != [w.arrival for w in wfs]


def test_bfcl_rejects_unknown_category(data: Path) -> None:
    with pytest.raises(ValueError, match="simple"):
        load("bfcl", data_dir=data, categories=["simple"])


# --- LATS -----------------------------------------------------------------------------------


def test_lats_reports_dropped_episodes_and_keeps_three(data: Path) -> None:
    with pytest.warns(FilteredRecordsWarning, match="2 episodes"):
        wfs = load("lats", data_dir=data)
    assert [wf.meta["source"].split("/")[1] for wf in wfs] == [
        "webshop_lats_example.log",
        "webshop_lats_example.log",
        "hotpot_tot_10it.log",
    ]
    validate_records(wfs)


def test_lats_structure_matches_the_logs(data: Path) -> None:
    wfs = _load("lats", data)
    webshop, hotpot = wfs[:2], wfs[2]
    # SOURCES.md §11: 26 value calls and 60 new nodes in the WebShop log.
    assert sum(wf.meta["value_calls"] for wf in webshop) == 26
    assert sum(wf.meta["env_steps"] for wf in webshop) == 60
    assert hotpot.meta["layers"] == 6 and hotpot.meta["env_steps"] == 24
    assert hotpot.meta["value_calls"] == 0
    for wf in wfs:
        assert wf.meta["depth"] > 1
        assert _longest_llm_chain(wf) > 1
        values = [n for n in _llm(wf) if n.task == "value"]
        assert len(values) == wf.meta["value_calls"]
        assert all(all(p.startswith("e") for p in v.parents) for v in values)


def test_lats_generator_samples_fan_out_from_one_prompt(data: Path) -> None:
    wf = _load("lats", data)[0]
    layers: dict[str, list[LLMNode]] = {}
    for n in _llm(wf):
        if n.task == "generate":
            layers.setdefault(n.id.split(".")[0], []).append(n)
    assert all(5 <= len(samples) <= 10 for samples in layers.values())
    for samples in layers.values():
        assert len({(s.input_tokens, s.parents) for s in samples}) == 1


# --- Parrot MetaGPT -------------------------------------------------------------------------


def test_parrot_metagpt_is_a_layered_fan_out_with_measured_tokens(data: Path) -> None:
    (wf,) = _load("parrot-metagpt", data)
    validate_records([wf])
    calls = _llm(wf)
    assert len(calls) == 57
    by_round: dict[int, list[LLMNode]] = {}
    for n in calls:
        by_round.setdefault(int(n.id.split(".")[0][1:]), []).append(n)
    assert sorted(by_round) == list(range(8))
    assert len(by_round[0]) == 1 and all(len(by_round[k]) == 8 for k in range(1, 8))
    for k in range(1, 8):
        prev = {n.id for n in by_round[k - 1]}
        assert all(set(n.parents) == prev for n in by_round[k])
    assert {n.input_tokens for n in by_round[1]} == {2991, 2992}
    # SOURCES.md §10 means: log_3_round (r0-r3) and log_new_rounds (r4-r7).
    early = [n for k in (0, 1, 2, 3) for n in by_round[k]]
    late = [n for k in (4, 5, 6, 7) for n in by_round[k]]
    assert round(statistics.fmean(n.input_tokens for n in early)) == 3_490
    assert statistics.fmean(n.output_tokens for n in early) == pytest.approx(385, abs=1)
    assert round(statistics.fmean(n.input_tokens for n in late)) == 3_706
    assert statistics.fmean(n.output_tokens for n in late) == pytest.approx(349, abs=1)
