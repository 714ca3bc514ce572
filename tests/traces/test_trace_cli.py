"""Specification of the trace command-line tools, the data directory and the public-source table.

Nothing here touches the internet: the download tests use a refused local port or a local HTTP
server. Tests that need the real public traces read them from ``SERVEGYM_DATA`` and are skipped,
with the reason, when it is not set (CI sets ``SERVEGYM_DATA=../shared/traces-raw``).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from traces import LLMNode, Request, ToolNode, Workflow, write_trace
from traces.data import DataDirNotFoundError, data_dir
from traces.describe import describe, format_description
from traces.download import NetworkUnreachableError, fetch
from traces.sources import (
    RAW_GITHUB,
    SOURCES,
    MissingDataFileError,
    SourceFile,
    get_source,
    require_file,
    verify,
)

ROOT = Path(__file__).resolve().parents[2]
MODELS = ("small-model", "large-model")
REFUSED = "http://127.0.0.1:9"  # the discard port: nothing listens, the connection is refused

needs_data = pytest.mark.skipif(
    not os.environ.get("SERVEGYM_DATA"),
    reason="SERVEGYM_DATA is not set; point it at the public traces (CI: ../shared/traces-raw)",
)


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _small_workflows() -> list[Workflow]:
    fan = Workflow(
        "fan",
        0.0,
        (
            LLMNode("plan", "large-model", 100, 10),
            ToolNode("t1", 0.1, ("plan",)),
            ToolNode("t2", 0.3, ("plan",)),
            ToolNode("t3", 0.2, ("plan",)),
            LLMNode("join", "small-model", 300, 30, ("t1", "t2", "t3"), task="summarize"),
        ),
    )
    chain = Workflow("chain", 10.0, (LLMNode("only", "small-model", 200, 20),))
    return [fan, chain]


@pytest.fixture
def workflow_file(tmp_path: Path) -> Path:
    return write_trace(_small_workflows(), tmp_path / "small.jsonl", known_models=MODELS)


# --- validate -----------------------------------------------------------------------------------


def test_validate_cli_accepts_a_valid_trace_with_a_one_line_summary(workflow_file: Path) -> None:
    result = _run("traces.validate", str(workflow_file), "--known-models", ",".join(MODELS))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1
    assert (
        "valid, 2 workflow records" in result.stdout
        and "3 LLM calls, 3 tool nodes" in result.stdout
    )


def test_validate_cli_rejects_a_bad_trace_naming_the_record_without_traceback(
    tmp_path: Path,
) -> None:
    bad = tmp_path / "bad.jsonl"
    line = {"schema": "servegym.request/1", "id": "r7", "arrival": 0.0, "model": "small-model"}
    bad.write_text(json.dumps({**line, "input_tokens": -3, "output_tokens": 1}) + "\n")
    result = _run("traces.validate", str(bad), "--known-models", "small-model")
    assert result.returncode == 1
    assert f"{bad}:1" in result.stderr and "'r7'" in result.stderr
    assert "'input_tokens'" in result.stderr and "got -3" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_validate_cli_reports_unknown_models_against_the_given_list(workflow_file: Path) -> None:
    result = _run("traces.validate", str(workflow_file), "--known-models", "small-model")
    assert result.returncode == 1
    assert "unknown model" in result.stderr and "'large-model'" in result.stderr


def test_validate_cli_reports_a_missing_file_without_traceback(tmp_path: Path) -> None:
    result = _run("traces.validate", str(tmp_path / "nope.jsonl"), "--known-models", "m")
    assert result.returncode == 1
    assert "nope.jsonl" in result.stderr and "Traceback" not in result.stderr


# --- describe -----------------------------------------------------------------------------------


def test_describe_counts_fan_out_depth_tools_and_model_mix() -> None:
    d = describe(_small_workflows())
    assert (d["kind"], d["count"], d["duration_s"], d["arrival_rate_per_s"]) == (
        "workflow",
        2,
        10.0,
        0.2,
    )
    assert d["llm_calls"] == 3 and d["max_fan_out"] == 3
    assert d["dag_depth"] == {"mean": 2.0, "max": 3}
    assert d["llm_calls_per_workflow"] == {"mean": 1.5, "max": 2}
    assert d["tool_nodes_per_workflow"] == {"mean": 1.5, "max": 3}
    assert d["input_tokens"]["mean"] == pytest.approx(200.0)
    assert d["input_tokens"]["median"] == 200.0
    assert d["models"] == {"small-model": 2, "large-model": 1}
    assert d["tasks"] == {"chat": 2, "summarize": 1}
    assert "max fan-out" in format_description(d)


def test_describe_of_requests_reports_rate_and_token_percentiles() -> None:
    reqs = [Request(f"r{i}", float(i), "small-model", 10 * (i + 1), i) for i in range(100)]
    d = describe(reqs)
    assert d["kind"] == "request" and d["arrival_rate_per_s"] == pytest.approx(100 / 99)
    assert d["input_tokens"]["p99"] == pytest.approx(990.1)
    assert d["output_tokens"]["median"] == pytest.approx(49.5)
    assert "dag_depth" not in d


def test_describe_cli_summarises_a_small_file(workflow_file: Path) -> None:
    result = _run("traces.describe", str(workflow_file), "--known-models", ",".join(MODELS))
    assert result.returncode == 0, result.stderr
    assert "2 workflows" in result.stdout and "max fan-out" in result.stdout
    as_json = _run(
        "traces.describe", str(workflow_file), "--known-models", ",".join(MODELS), "--json"
    )
    assert json.loads(as_json.stdout)["max_fan_out"] == 3


def test_describe_cli_explains_an_unknown_name(tmp_path: Path) -> None:
    result = _run("traces.describe", "no-such-trace")
    assert result.returncode == 1
    assert "no-such-trace" in result.stderr
    assert "nor a generator (known:" in result.stderr and "nor a loader (known:" in result.stderr
    assert "Traceback" not in result.stderr


# --- data directory -----------------------------------------------------------------------------


def test_data_dir_error_explains_how_to_set_and_fill_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SERVEGYM_DATA", raising=False)
    with pytest.raises(DataDirNotFoundError) as info:
        data_dir()
    message = str(info.value)
    assert "SERVEGYM_DATA is not set" in message
    assert "export SERVEGYM_DATA=" in message and "python -m traces.download" in message


def test_data_dir_error_names_a_directory_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(DataDirNotFoundError, match=re.escape(f"'{missing}' does not exist")):
        data_dir(missing)


def test_data_dir_prefers_the_explicit_argument(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SERVEGYM_DATA", str(tmp_path / "nowhere"))
    assert data_dir(tmp_path) == tmp_path.resolve()


def test_require_file_names_the_missing_file_and_its_source(tmp_path: Path) -> None:
    with pytest.raises(MissingDataFileError) as info:
        require_file("mooncake/conversation_trace.jsonl", tmp_path)
    message = str(info.value)
    assert str(tmp_path / "mooncake" / "conversation_trace.jsonl") in message
    assert "'mooncake'" in message and "python -m traces.download" in message
    assert info.value.source == "mooncake"


# --- sources ------------------------------------------------------------------------------------


def test_every_source_file_has_a_checksum_and_a_commit_pinned_url() -> None:
    assert len({s.name for s in SOURCES}) == len(SOURCES)
    for source in SOURCES:
        assert source.licence and source.citation and source.files
        for f in source.files:
            assert f.relpath.startswith(source.name + "/")
            assert re.fullmatch(r"[0-9a-f]{64}", f.sha256) and f.bytes > 0
            assert re.match(re.escape(RAW_GITHUB) + r"/[\w.-]+/[\w.-]+/[0-9a-f]{40}/\S+$", f.url)


def test_get_source_lists_known_names_for_an_unknown_one() -> None:
    assert get_source("mooncake").name == "mooncake"
    with pytest.raises(KeyError, match="ragpulse"):
        get_source("mooncake2")


def test_verify_reports_missing_and_corrupted_files(tmp_path: Path) -> None:
    tracelab = get_source("tracelab_example").files[0]
    corrupt = tmp_path / tracelab.relpath
    corrupt.parent.mkdir(parents=True)
    corrupt.write_bytes(b"x" * tracelab.bytes)
    problems = verify(tmp_path, ["tracelab_example", "lats_logs"])
    assert f"{tracelab.relpath}: checksum mismatch" in problems
    assert "lats_logs/hotpot_tot_10it.log: missing" in problems


@needs_data
def test_sources_checksums_match_the_files_in_the_data_dir() -> None:
    assert verify(os.environ["SERVEGYM_DATA"]) == []


@needs_data
def test_sources_list_every_file_of_the_data_dir() -> None:
    root = Path(os.environ["SERVEGYM_DATA"])
    on_disk = {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.parent != root  # top-level files (SOURCES.md) are documentation
    }
    assert on_disk == {f.relpath for s in SOURCES for f in s.files}


def test_sources_cli_check_fails_on_an_empty_data_dir(tmp_path: Path) -> None:
    result = _run("traces.sources", "--check", "--data-dir", str(tmp_path))
    assert result.returncode == 1
    assert "mooncake/conversation_trace.jsonl: missing" in result.stdout


# --- download -----------------------------------------------------------------------------------


def test_download_reports_an_unreachable_network_cleanly(tmp_path: Path) -> None:
    result = _run(
        "traces.download", "--data-dir", str(tmp_path), "--mirror", REFUSED, "tracelab_example"
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert "unreachable" in result.stderr and "copied by hand" in result.stderr
    assert str(tmp_path) in result.stderr
    assert not any(p.is_file() for p in tmp_path.rglob("*"))  # no partial file left behind


def test_download_without_a_data_dir_says_how_to_give_one(tmp_path: Path) -> None:
    result = _run("traces.download", "tracelab_example", env={"SERVEGYM_DATA": ""})
    assert result.returncode == 2
    assert "--data-dir" in result.stderr and "SERVEGYM_DATA" in result.stderr


@pytest.fixture
def local_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP server on 127.0.0.1 serving a fresh directory; yields (base URL, directory)."""
    served = tmp_path / "served"
    served.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", served
    server.shutdown()
    server.server_close()


def _served_file(served: Path, content: bytes, corrupt: bool = False) -> SourceFile:
    path = served / "owner" / "repo" / ("0" * 40) / "data.bin"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content[::-1] if corrupt else content)
    return SourceFile(
        "demo/data.bin",
        hashlib.sha256(content).hexdigest(),
        len(content),
        f"{RAW_GITHUB}/owner/repo/{'0' * 40}/data.bin",
    )


def test_download_fetches_from_a_mirror_and_checks_the_checksum(
    tmp_path: Path, local_server: tuple[str, Path]
) -> None:
    base, served = local_server
    file = _served_file(served, b"trace bytes\n" * 100)
    root = tmp_path / "data"
    assert fetch([file], root, mirror=base, log=lambda _: None) == []
    assert (root / "demo" / "data.bin").read_bytes() == b"trace bytes\n" * 100


def test_download_discards_a_file_whose_checksum_does_not_match(
    tmp_path: Path, local_server: tuple[str, Path]
) -> None:
    base, served = local_server
    file = _served_file(served, b"abc" * 50, corrupt=True)
    root = tmp_path / "data"
    problems = fetch([file], root, mirror=base, log=lambda _: None)
    assert len(problems) == 1 and "expected 150 bytes with SHA-256" in problems[0]
    assert not any(p.is_file() for p in root.rglob("*"))


def test_download_skips_files_already_present_without_touching_the_network(
    tmp_path: Path,
) -> None:
    content = b"already here"
    file = SourceFile(
        "demo/x.txt",
        hashlib.sha256(content).hexdigest(),
        len(content),
        f"{RAW_GITHUB}/o/r/{'0' * 40}/x.txt",
    )
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "x.txt").write_bytes(content)
    assert fetch([file], tmp_path, mirror=REFUSED, log=lambda _: None) == []
    (tmp_path / "demo" / "x.txt").write_bytes(b"changed")
    with pytest.raises(NetworkUnreachableError):
        fetch([file], tmp_path, mirror=REFUSED, log=lambda _: None)
