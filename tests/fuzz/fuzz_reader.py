"""Coverage-guided fuzzing of the trace reader (:func:`traces.io.parse_lines`, what
``read_trace`` and ``python -m traces.validate`` run on a file's bytes).

The property: every input either parses into records that round-trip exactly (write them, read
them back, get equal records) or raises :class:`traces.TraceValidationError` naming the source;
never any other exception, never more than a second on one input.

    python -m tests.fuzz.fuzz_reader --seconds 60            # atheris (libFuzzer), if installed
    python -m tests.fuzz.fuzz_reader --seconds 60 --engine hypothesis

With atheris the reader's modules are instrumented and libFuzzer mutates a seed corpus (the
``trace-*.jsonl`` files of this directory plus valid traces) guided by the lines each input
reaches, with a dictionary of the schema's tokens; it stops after ``--seconds`` and prints
``Done N runs in S second(s)``, N being the inputs tried. An input over ``--timeout`` seconds is a
hang and a crash input is saved as ``crash-*`` under ``--artifacts``. The hypothesis engine (also
run for a few seconds by ``tests/fuzz/test_fuzz.py``) draws raw bytes, mutated seed lines and
generated JSON records; it is not coverage-guided.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SOURCE = "<fuzz>"
#: libFuzzer dictionary: tokens of the schema the mutator splices into inputs.
TOKENS = (
    '"schema"', '"servegym.request/1"', '"servegym.workflow/1"', '"id"', '"arrival"', '"nodes"',
    '"kind"', '"llm"', '"tool"', '"model"', '"llama3.1-70b"', '"input_tokens"', '"output_tokens"',
    '"parents"', '"latency"', '"task"', '"prompt"', '"prefix_hashes"', '"slo"', '"meta"', '"name"',
    "NaN", "Infinity", "-Infinity", "1e308", "-1", "2147483648", "null", "true", "[]", "{}",
    "\\u0000",
)  # fmt: skip


def seed_inputs() -> list[bytes]:
    """The corpus's trace files and two valid traces (one of each record kind)."""
    seeds = [p.read_bytes() for p in sorted(HERE.glob("trace-*.jsonl"))]
    wf = {
        "schema": "servegym.workflow/1",
        "id": "w0",
        "arrival": 0.5,
        "nodes": [
            {"id": "a", "kind": "llm", "model": "llama3.1-70b", "input_tokens": 100,
             "output_tokens": 10, "parents": [], "task": "plan", "prompt": "hi",
             "prefix_hashes": [1, 2]},
            {"id": "t", "kind": "tool", "latency": 0.2, "parents": ["a"], "name": "search"},
            {"id": "b", "kind": "llm", "model": "llama3.1-8b", "input_tokens": 300,
             "output_tokens": 0, "parents": ["a", "t"]},
        ],
        "meta": {"source": "fuzz", "k": [1, 2.5, None]},
    }  # fmt: skip
    req = {
        "schema": "servegym.request/1", "id": "r0", "arrival": 0.0, "model": "llama3.1-8b",
        "input_tokens": 812, "output_tokens": 64, "task": "sql", "slo": 2.5,
    }  # fmt: skip
    seeds.append(
        (json.dumps(wf) + "\n" + json.dumps({**wf, "id": "w1", "arrival": 1}) + "\n").encode()
    )
    seeds.append((json.dumps(req) + "\r\n" + json.dumps({**req, "id": "r1"}) + "\r\n").encode())
    return seeds


def check_one(data: bytes) -> str:
    """Run the reader on ``data``; ``"valid"`` or ``"rejected"``, else an exception escapes.

    :raises AssertionError: if a valid trace does not round-trip, or an error does not name
        the source.
    """
    from traces.io import dumps_record, parse_lines
    from traces.validate import TraceValidationError

    try:
        records = list(parse_lines(data, source=SOURCE))
    except TraceValidationError as err:
        assert str(err).startswith(SOURCE), f"error does not name the source: {err}"
        return "rejected"
    text = "".join(dumps_record(r) + "\n" for r in records).encode("utf-8")
    assert list(parse_lines(text, source=SOURCE)) == records, "valid trace does not round-trip"
    return "valid"


def hypothesis_inputs() -> Any:
    """A hypothesis strategy of reader inputs: raw bytes, seed traces with random byte edits or
    spliced tokens, and JSON records built from the schema's keys with random values."""
    from hypothesis import strategies as st

    seeds = seed_inputs()
    scalars = (
        st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.text(max_size=8)
        | st.floats() | st.sampled_from(["llm", "tool", "llama3.1-70b", "a", "w0"])
    )  # fmt: skip
    values = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
        max_leaves=12,
    )
    keys = st.sampled_from([t.strip('"') for t in TOKENS if t.startswith('"')])
    node = st.dictionaries(keys, values, max_size=8)
    record = st.fixed_dictionaries(
        {"schema": st.sampled_from(["servegym.workflow/1", "servegym.request/1"])},
        optional={
            "id": st.text(max_size=3),
            "arrival": values,
            "nodes": st.lists(node, max_size=4),
            "model": values,
            "input_tokens": values,
            "output_tokens": values,
        },
    )

    def dump(records: list[dict[str, Any]]) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in records).encode("utf-8", "surrogatepass")

    @st.composite
    def mutated(draw: Any) -> bytes:
        data = bytearray(draw(st.sampled_from(seeds)))
        for _ in range(draw(st.integers(1, 8))):
            pos = draw(st.integers(0, len(data)))
            op = draw(st.integers(0, 3))
            if op == 0 and data:
                data[min(pos, len(data) - 1)] = draw(st.integers(0, 255))
            elif op == 1:
                del data[pos : pos + draw(st.integers(1, 16))]
            elif op == 2:
                data[pos:pos] = draw(st.sampled_from(TOKENS)).encode()
            else:
                data[pos:pos] = draw(st.binary(max_size=8))
        return bytes(data)

    return (
        st.sampled_from(seeds)
        | st.binary(max_size=512)
        | mutated()
        | st.lists(record, min_size=1, max_size=3).map(dump)
    )


def run_atheris(seconds: int, timeout: int, artifacts: Path) -> None:
    """libFuzzer over the instrumented reader; does not return (libFuzzer exits)."""
    import atheris

    with atheris.instrument_imports():
        import traces.io  # noqa: F401
        import traces.schema  # noqa: F401
        import traces.validate  # noqa: F401
    from envs.sim.hardware.catalog import model_names

    model_names()  # load the catalog once, outside the timed inputs

    def one_input(data: bytes) -> None:
        check_one(data)

    work = Path(tempfile.mkdtemp(prefix="servegym-fuzz-"))
    corpus = work / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(seed_inputs()):
        (corpus / f"seed-{i:03d}").write_bytes(seed)
    dictionary = work / "trace.dict"
    dictionary.write_text("".join(f"{json.dumps(t)}\n" for t in TOKENS))
    artifacts.mkdir(parents=True, exist_ok=True)
    print(f"fuzzing traces.io.parse_lines with atheris for {seconds} s; corpus {corpus}")
    argv = [
        sys.argv[0],
        f"-max_total_time={seconds}",
        f"-timeout={timeout}",
        "-rss_limit_mb=2048",
        "-max_len=4096",
        f"-dict={dictionary}",
        f"-artifact_prefix={artifacts}/",
        "-print_final_stats=1",
        str(corpus),
    ]
    atheris.Setup(argv, one_input)
    atheris.Fuzz()


def run_hypothesis(seconds: int, timeout: int) -> int:
    """Hypothesis draws for ``seconds``; returns the number of inputs tried."""
    from hypothesis import HealthCheck, given, settings

    counts = {"valid": 0, "rejected": 0}
    deadline = time.monotonic() + seconds

    @settings(
        max_examples=10**9,
        deadline=timeout * 1000,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(hypothesis_inputs())
    def fuzz(data: bytes) -> None:
        if time.monotonic() > deadline:
            raise _Done
        counts[check_one(data)] += 1

    try:
        fuzz()
    except _Done:
        pass
    total = sum(counts.values())
    print(f"hypothesis: {total} inputs in {seconds} s ({counts['valid']} valid, "
          f"{counts['rejected']} rejected with a TraceValidationError)")  # fmt: skip
    return total


class _Done(Exception):
    """Raised inside the hypothesis test when the time budget is spent."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz.fuzz_reader", description=__doc__)
    ap.add_argument("--seconds", type=int, default=60, help="fuzzing time budget (s)")
    ap.add_argument("--timeout", type=int, default=1, help="seconds one input may take")
    ap.add_argument("--engine", choices=("atheris", "hypothesis"), default=None,
                    help="default: atheris if it imports, else hypothesis")  # fmt: skip
    ap.add_argument("--artifacts", type=Path, default=Path("results/fuzz"),
                    help="where atheris saves crash and timeout inputs")  # fmt: skip
    args = ap.parse_args(argv)
    engine = args.engine
    if engine is None:
        engine = "atheris" if _has_atheris() else "hypothesis"
    if engine == "atheris":
        run_atheris(args.seconds, args.timeout, args.artifacts)
    run_hypothesis(args.seconds, args.timeout)
    return 0


def _has_atheris() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
