"""Specification of the trace schema: exact JSONL round trips, errors naming the bad record."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces import (
    LLMNode,
    Request,
    ToolNode,
    TraceValidationError,
    Workflow,
    read_trace,
    record_from_dict,
    record_to_dict,
    validate_records,
    write_trace,
)
from traces.validate import MAX_TOKENS

MODELS = ("small-model", "large-model")


def _workflow(wid: str = "w0", arrival: float = 0.0) -> Workflow:
    return Workflow(
        id=wid,
        arrival=arrival,
        nodes=(
            LLMNode("plan", "large-model", 812, 64, task="chat", prompt="Plan: é ✓"),
            ToolNode("search", 0.2, parents=("plan",), name="web_search"),
            ToolNode("calc", 0.05, parents=("plan",)),
            LLMNode("answer", "small-model", 1500, 200, ("search", "calc"), prefix_hashes=(7, 9)),
        ),
        meta={"workload": "unit", "source": {"line": 3, "file": "x"}},
    )


def _request(rid: str = "r0", arrival: float = 0.0) -> Request:
    return Request(rid, arrival, "small-model", 812, 64, task="sql", prefix_hashes=(7, 9), slo=2.5)


def _write_lines(path: Path, objects: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects), encoding="utf-8")
    return path


# --- round trips --------------------------------------------------------------------------------


def test_workflow_trace_round_trips_to_equal_records_and_meta(tmp_path: Path) -> None:
    trace = [_workflow("w0", 0.0), _workflow("w1", 0.1), _workflow("w2", 0.1)]
    path = write_trace(trace, tmp_path / "wf.jsonl", known_models=MODELS)
    back = read_trace(path, known_models=MODELS)
    assert back == trace
    assert [record_to_dict(r) for r in back] == [record_to_dict(r) for r in trace]


def test_request_trace_round_trips_including_optional_fields(tmp_path: Path) -> None:
    trace = [_request("r0", 0.0), Request("r1", 1.5, "large-model", 1, 0), _request("r2", 2.0)]
    path = write_trace(trace, tmp_path / "rq.jsonl", known_models=MODELS)
    assert read_trace(path, known_models=MODELS) == trace


def test_equal_traces_are_written_byte_identically(tmp_path: Path) -> None:
    a = write_trace([_workflow()], tmp_path / "a.jsonl", known_models=MODELS)
    b = write_trace([_workflow()], tmp_path / "b.jsonl", known_models=MODELS)
    rewritten = write_trace(
        read_trace(a, known_models=MODELS), tmp_path / "c.jsonl", known_models=MODELS
    )
    assert a.read_bytes() == b.read_bytes() == rewritten.read_bytes()


def test_written_lines_use_the_documented_key_order_and_compact_separators(tmp_path: Path) -> None:
    path = write_trace([_request()], tmp_path / "r.jsonl", known_models=MODELS)
    line = path.read_text(encoding="utf-8")
    assert line.startswith('{"schema":"servegym.request/1","id":"r0","arrival":0.0,"model":')
    assert ", " not in line and line.endswith("}\n") and line.count("\n") == 1


def test_line_separator_characters_in_prompts_stay_on_one_line(tmp_path: Path) -> None:
    rec = Request("r0", 0.0, "small-model", 5, 1, prompt="a\u2028b\u2029c\x85d\ne")
    path = write_trace([rec], tmp_path / "r.jsonl", known_models=MODELS)
    assert len(path.read_text(encoding="utf-8").splitlines()) == 1
    assert read_trace(path, known_models=MODELS) == [rec]


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_ids = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6)
_times = st.floats(min_value=0.0, max_value=1e9, allow_nan=False, allow_infinity=False)


@st.composite
def _random_workflow(draw: st.DrawFn, wid: str, arrival: float) -> Workflow:
    node_ids = draw(st.lists(_ids, min_size=1, max_size=8, unique=True))
    nodes = []
    for i, node_id in enumerate(node_ids):
        parents = tuple(draw(st.lists(st.sampled_from(node_ids[:i]), unique=True))) if i else ()
        if draw(st.booleans()):
            nodes.append(
                LLMNode(
                    node_id,
                    draw(st.sampled_from(MODELS)),
                    draw(st.integers(1, MAX_TOKENS)),
                    draw(st.integers(0, MAX_TOKENS)),
                    parents,
                    task=draw(_ids),
                    prompt=draw(st.none() | _text),
                    prefix_hashes=draw(st.none() | st.tuples(st.integers(-(2**63), 2**63))),
                )
            )
        else:
            nodes.append(ToolNode(node_id, draw(_times), parents, name=draw(st.none() | _text)))
    # Shuffled order: nodes may be listed before their parents.
    order = draw(st.permutations(range(len(nodes))))
    meta = draw(
        st.dictionaries(
            _ids, st.integers() | _text | st.floats(allow_nan=False, allow_infinity=False)
        )
    )
    return Workflow(wid, arrival, tuple(nodes[i] for i in order), meta=meta)


@st.composite
def _random_trace(draw: st.DrawFn) -> list[Workflow]:
    arrivals = sorted(draw(st.lists(_times, min_size=1, max_size=4)))
    return [draw(_random_workflow(f"w{i}", t)) for i, t in enumerate(arrivals)]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(trace=_random_trace())
def test_random_valid_workflow_traces_round_trip_exactly(tmp_path: Path, trace: list) -> None:
    path = write_trace(trace, tmp_path / "h.jsonl", known_models=MODELS)
    back = read_trace(path, known_models=MODELS)
    assert back == trace
    assert [record_to_dict(r) for r in back] == [record_to_dict(r) for r in trace]
    again = write_trace(back, tmp_path / "h2.jsonl", known_models=MODELS)
    assert again.read_bytes() == path.read_bytes()


# --- errors name file, line, record, node and field --------------------------------------------


def _wf(wid: str, arrival: float, *nodes: dict) -> dict:
    return {"schema": "servegym.workflow/1", "id": wid, "arrival": arrival, "nodes": list(nodes)}


def _llm(nid: str, parents: Sequence[str] = (), **over) -> dict:
    d = {"id": nid, "kind": "llm", "model": "small-model", "input_tokens": 10}
    d.update({"output_tokens": 5, "parents": list(parents), **over})
    return d


def _tool(nid: str, parents: Sequence[str] = (), latency: float = 0.1) -> dict:
    return {"id": nid, "kind": "tool", "latency": latency, "parents": list(parents)}


def _req(rid: str, arrival: float, **over) -> dict:
    d = {"schema": "servegym.request/1", "id": rid, "arrival": arrival, "model": "small-model"}
    d.update({"input_tokens": 10, "output_tokens": 5, **over})
    return d


_GOOD = _wf("ok", 0.0, _llm("a"), _tool("b", ["a"]))

# (case name, records of the file, expected line, record id, node id, field)
BAD_TRACES = [
    ("negative output tokens", [_GOOD, _wf("w1", 1, _llm("a"), _llm("b", ["a"], output_tokens=-1))],
     2, "w1", "b", "output_tokens"),
    ("zero input tokens", [_wf("w0", 0, _llm("a", input_tokens=0))], 1, "w0", "a", "input_tokens"),
    ("float tokens", [_wf("w0", 0, _llm("a", input_tokens=10.0))], 1, "w0", "a", "input_tokens"),
    ("bool tokens", [_wf("w0", 0, _llm("a", output_tokens=True))], 1, "w0", "a", "output_tokens"),
    ("string tokens", [_req("r0", 0, input_tokens="12")], 1, "r0", None, "input_tokens"),
    ("unknown parent", [_GOOD, _GOOD | {"id": "w1"}, _wf("w2", 2, _llm("a"), _llm("b", ["zz"]))],
     3, "w2", "b", "parents"),
    ("self parent", [_wf("w0", 0, _llm("a", ["a"]))], 1, "w0", "a", "parents"),
    ("negative tool latency", [_wf("w0", 0, _llm("a"), _tool("t", ["a"], -0.5))],
     1, "w0", "t", "latency"),
    ("unknown model", [_GOOD, _wf("w1", 3, _llm("a", model="gpt-9"))], 2, "w1", "a", "model"),
    ("duplicate node id", [_wf("w0", 0, _llm("a"), _tool("a"))], 1, "w0", "a", "id"),
    ("empty workflow", [_wf("w0", 0)], 1, "w0", None, "nodes"),
    ("unsorted arrivals", [_req("r0", 5.0), _req("r1", 4.0)], 2, "r1", None, "arrival"),
    ("negative arrival", [_req("r0", -1.0)], 1, "r0", None, "arrival"),
    ("duplicate record id", [_req("r0", 0), _req("r1", 1), _req("r0", 2)], 3, "r0", None, "id"),
    ("unknown schema version", [_req("r0", 0) | {"schema": "servegym.request/2"}],
     1, "r0", None, "schema"),
    ("mixed record kinds", [_req("r0", 0), _GOOD | {"arrival": 1}], 2, "ok", None, "schema"),
    ("non-positive slo", [_req("r0", 0, slo=0)], 1, "r0", None, "slo"),
    ("missing field", [{k: v for k, v in _req("r0", 0).items() if k != "model"}],
     1, "r0", None, "model"),
    ("unknown field", [_req("r0", 0, priority=3)], 1, "r0", None, "priority"),
    ("unknown node kind", [_wf("w0", 0, {"id": "a", "kind": "gpu"})], 1, "w0", "a", "kind"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("records", "line", "record_id", "node_id", "field"),
    [case[1:] for case in BAD_TRACES],
    ids=[case[0] for case in BAD_TRACES],
)
def test_bad_trace_raises_error_naming_file_line_record_node_and_field(
    tmp_path: Path,
    records: list[dict],
    line: int,
    record_id: str,
    node_id: str | None,
    field: str,
) -> None:
    path = _write_lines(tmp_path / "bad.jsonl", records)
    with pytest.raises(TraceValidationError) as info:
        read_trace(path, known_models=MODELS)
    err = info.value
    assert (err.source, err.line, err.record_id, err.node_id, err.field) == (
        str(path),
        line,
        record_id,
        node_id,
        field,
    )
    message = str(err)
    assert f"{path}:{line}" in message
    assert f"record {record_id!r}" in message and f"field {field!r}" in message
    if node_id is not None:
        assert f"node {node_id!r}" in message


def test_cycle_error_names_a_node_on_the_cycle(tmp_path: Path) -> None:
    wf = _wf("w0", 0, _llm("root"), _llm("a", ["root", "c"]), _llm("b", ["a"]), _llm("c", ["b"]))
    path = _write_lines(tmp_path / "cycle.jsonl", [wf])
    with pytest.raises(TraceValidationError, match="cycle") as info:
        read_trace(path, known_models=MODELS)
    err = info.value
    assert (err.line, err.record_id, err.field) == (1, "w0", "parents")
    cycle = str(err).split("has a cycle ", 1)[1].split(" (", 1)[0].split(" -> ")
    assert set(cycle) == {"a", "b", "c"} and cycle[0] == cycle[-1] == err.node_id


def test_self_parent_is_reported_as_such_not_as_a_cycle(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "self.jsonl", [_wf("w0", 0, _llm("a"), _llm("b", ["a", "b"]))])
    with pytest.raises(TraceValidationError, match="lists itself as a parent"):
        read_trace(path, known_models=MODELS)


def test_error_message_shows_the_offending_value(tmp_path: Path) -> None:
    path = _write_lines(tmp_path / "neg.jsonl", [_wf("w0", 0, _llm("a", output_tokens=-7))])
    with pytest.raises(TraceValidationError, match=r"got -7"):
        read_trace(path, known_models=MODELS)


def test_invalid_json_line_is_reported_with_its_line_number(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps(_req("r0", 0)) + "\n\n{not json\n", encoding="utf-8")
    with pytest.raises(TraceValidationError, match="invalid JSON") as info:
        read_trace(path, known_models=MODELS)
    assert info.value.line == 3


def test_duplicate_json_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.jsonl"
    path.write_text('{"schema":"servegym.request/1","id":"r0","id":"r1"}\n', encoding="utf-8")
    with pytest.raises(TraceValidationError, match="duplicate key 'id'"):
        read_trace(path, known_models=MODELS)


def test_in_memory_records_are_located_by_index_and_given_lines() -> None:
    bad = Workflow("w1", 1.0, (LLMNode("n0", "small-model", 10, -1),))
    with pytest.raises(TraceValidationError, match=r"<memory> \(record #1\)") as info:
        validate_records([_workflow("w0"), bad], known_models=MODELS)
    assert (info.value.index, info.value.node_id, info.value.field) == (1, "n0", "output_tokens")
    with pytest.raises(TraceValidationError, match=r"gen\.jsonl:12") as info:
        validate_records(
            [_workflow("w0"), bad], known_models=MODELS, source="gen.jsonl", lines=[4, 12]
        )
    assert info.value.line == 12


def test_record_from_dict_rejects_unknown_schema_version_naming_it() -> None:
    with pytest.raises(TraceValidationError, match="servegym.workflow/0") as info:
        record_from_dict({"schema": "servegym.workflow/0", "id": "x"}, source="f.jsonl", line=9)
    assert (info.value.source, info.value.line, info.value.field) == ("f.jsonl", 9, "schema")


def test_numpy_integers_are_not_accepted_as_token_counts() -> None:
    np = pytest.importorskip("numpy")
    rec = Request("r0", 0.0, "small-model", np.int64(10), 5)
    with pytest.raises(TraceValidationError, match="input_tokens"):
        validate_records([rec], known_models=MODELS)


def test_write_trace_refuses_an_invalid_trace_and_writes_nothing(tmp_path: Path) -> None:
    trace = [_request("r0", 2.0), _request("r1", 1.0)]
    with pytest.raises(TraceValidationError, match="arrival"):
        write_trace(trace, tmp_path / "out.jsonl", known_models=MODELS)
    assert list(tmp_path.iterdir()) == []


def test_default_known_models_are_the_simulator_catalogs() -> None:
    # traces sit below the simulator, so they keep the catalog's names themselves
    # (traces.models); the two lists must agree.
    from envs.sim.hardware.catalog import model_names
    from traces.models import CATALOG_MODELS

    assert sorted(CATALOG_MODELS) == model_names()
    validate_records([Request("r0", 0.0, model_names()[0], 3, 1)])
    with pytest.raises(TraceValidationError, match="the catalog models.*'small-model'"):
        validate_records([Request("r0", 0.0, "small-model", 3, 1)])


def test_metadata_that_is_not_json_is_rejected() -> None:
    rec = Request("r0", 0.0, "small-model", 3, 1, meta={"rate": float("inf")})
    with pytest.raises(TraceValidationError, match="meta"):
        validate_records([rec], known_models=MODELS)


def test_validation_error_is_a_value_error() -> None:
    assert issubclass(TraceValidationError, ValueError)
