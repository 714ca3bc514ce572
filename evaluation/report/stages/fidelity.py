"""The fidelity pages (docs/fidelity/, docs/benchmarks/peer-vidur.md): the latency model and the
engine replay against measurements they were not fitted to, under both per-op calibrations.

Every command reads the measured-latency folder (``SERVEGYM_LATENCY_DATA``) and stops with its
own error naming the folder when it is missing; the Vidur cross-check also needs Vidur
(``SERVEGYM_VIDUR_PYTHON``, see docs/benchmarks/peer-vidur.md).
"""

from __future__ import annotations

import re

from evaluation.report.stage import StageRun, stage, text_block


def _variant_blocks(stdout: str) -> dict[str, list[str]]:
    """``benchmarks.serving_fidelity --variants`` output split by variant."""
    blocks: dict[str, list[str]] = {}
    current: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("=== per-op calibration variant:"):
            current = blocks.setdefault(line.split(":", 1)[1].strip(" ="), [])
        else:
            current.append(line)
    return blocks


def _summaries(lines: list[str]) -> dict[tuple[str, str, str], list[str]]:
    """(scheme, kind, engine) -> the six error cells of each engine row of the summary tables
    (kind "all", "dense" or "moe"; scheme "model", "engine" or "gpu")."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    scheme = kind = ""
    for line in lines:
        if line.startswith("leave one "):
            scheme, kind = line.split()[2].rstrip(":,"), "all"
        elif line.startswith("  leave one ") and line.rstrip().endswith("rows:"):
            kind = line.split(",")[1].split()[0]
        elif scheme and line.startswith("  ") and not line.startswith("   "):
            cells = line.split()
            if len(cells) == 8 and cells[1].isdigit():
                rows[(scheme, kind, cells[0])] = [cells[1], *cells[2:]]
        elif line.startswith("  by "):
            kind = ""
    return rows


def _lines_after(lines: list[str], scheme: str, header: str) -> list[str]:
    """The indented lines of ``header``'s section inside the ``leave one <scheme> out`` part."""
    start = lines.index(f"leave one {scheme} out:")
    out, inside = [], False
    for line in lines[start + 1 :]:
        if line.startswith("leave one "):
            break
        if line.strip() == header:
            inside = True
        elif inside and line.startswith("  ") and line.strip().endswith(":"):
            break
        elif inside:
            out.append(line.strip())
    return out


def _serving_render(run: StageRun) -> str:
    blocks = _variant_blocks(run.outputs[0].stdout)
    base, default = blocks["roofline"], blocks["smooth-roofline"]
    old, new = _summaries(base), _summaries(default)
    engines = {"sglang": "SGLang", "trtllm": "TensorRT-LLM", "vllm": "vLLM", "all": "**all**"}
    kinds = {"all": "", "dense": "dense", "moe": "MoE"}
    table = [
        "| held out | rows | kind | engine | TTFT: `roofline` → `smooth-roofline` "
        "| TPOT | latency |",
        "|---|---:|---|---|---|---|---|",
    ]
    for scheme in ("model", "engine", "gpu"):
        for kind, kind_label in kinds.items():
            for engine, label in engines.items():
                key = (scheme, kind, engine)
                if key not in new or (kind != "all" and engine != "all"):
                    continue
                a, b = old[key], new[key]
                cells = [
                    f"{a[i]} / {a[i + 1]} → {b[i]} / {b[i + 1]}".replace("%", "") + " %"
                    for i in (1, 3, 5)
                ]
                table.append(
                    f"| one {scheme} | {b[0]} | {kind_label} | {label} | "
                    + " | ".join(cells)
                    + " |"
                )
    frontends = [
        f"{name}: {next(ln for ln in lines if ln.startswith('fitted on every row')).rstrip(':')}"
        for name, lines in blocks.items()
    ]
    targets: list[str] = []
    units: list[str] = []
    for scheme in ("model", "engine", "gpu"):
        part = default[default.index(f"leave one {scheme} out:") :]
        for line in part:
            if line.startswith("leave one ") and not line.startswith(f"leave one {scheme} "):
                break
            if line.strip().startswith("targets:"):
                kind = ("all rows", "dense", "MoE")[sum(t.startswith(scheme) for t in targets)]
                targets.append(f"{scheme}, {kind}: {line.strip().removeprefix('targets: ')}")
            elif line.strip().startswith("held out "):
                units.append(line.strip())
    by_kind = [
        "| engine | dense: TTFT median · TPOT median | MoE: TTFT median · TPOT median |",
        "|---|---|---|",
    ]
    for engine, label in engines.items():
        cells = []
        for kind in ("dense", "moe"):
            a, b = old[("model", kind, engine)], new[("model", kind, engine)]
            cells.append(f"{a[1]} · {a[3]} → {b[1]} · {b[3]}")
        by_kind.append(f"| {label} | " + " | ".join(cells) + " |")
    causes = _lines_after(default, "model", "by engine, model, precision:")
    by_gpu = _lines_after(default, "model", "by engine, model, GPU, TP:")
    return "\n\n".join(
        [
            "Median / worst |relative error| of the simulated mean TTFT, mean TPOT and mean "
            "request latency, `roofline` → `smooth-roofline`; *kind* splits the rows into "
            "the dense and the MoE models:",
            "\n".join(table),
            "Against the targets (TTFT median ≤ 20 %, worst ≤ 100 %, TPOT median ≤ 10 %), "
            "`smooth-roofline`, leaving one model, engine or GPU out:",
            text_block("\n".join(targets)),
            "Each held-out group alone (`smooth-roofline`; the frontends fitted without it):",
            text_block("\n".join(units)),
            "Leave one model out, by engine, model and precision (`smooth-roofline`; "
            "signed error: + is too slow; columns > 20 % and > 10 % count the rows off):",
            text_block("\n".join(causes)),
            "Leave one model out, by GPU and TP degree (`smooth-roofline`):",
            text_block("\n".join(by_gpu)),
            "Leave one model out, each engine's dense and MoE rows apart, `roofline` → "
            "`smooth-roofline`:",
            "\n".join(by_kind),
            "The one constant fitted on the rows, each engine's `frontend_seconds`:",
            text_block("\n".join(frontends)),
        ]
    )


def _peer_render(run: StageRun) -> str:
    """Each run's tables without the paths of its scratch files; a note when the two runs did
    not replay the same request list (the overlap run takes the default run's rate)."""
    rates = [
        re.search(r"--rate ([0-9.]+)", line)
        for o in run.outputs
        for line in o.stdout.splitlines()
        if "Poisson rate" in line
    ]
    parts = []
    for o in run.outputs:
        lines = []
        for line in o.table_text().splitlines():
            line = re.sub(r", trace \S+$", "", line)
            line = re.sub(r" \(rewritten to [^)]*\)", "", line)
            lines.append(re.sub(r"; outputs \S+$", "", line))
        parts.append(text_block("\n".join(lines)))
    given = [a for o in run.outputs for a in o.argv]
    if rates[0] and "--rate" in given and given[given.index("--rate") + 1] != rates[0].group(1):
        parts.append(
            f"**Note:** the second run's `--rate` is not the first run's ({rates[0].group(1)}): "
            "the two replay different request lists; update the stage's `--rate`."
        )
    return "\n\n".join(parts)


STAGES = [
    stage(
        "fidelity-per-op",
        "Per-op held-out errors of both calibrations (363 whole-prefill measurements)",
        "fidelity/serving.md",
        0.2,
        "-m envs.sim.calibration.calibrate --summary --variants",
    ),
    stage(
        "fidelity-serving",
        "Held-out serving errors of 883 measured deployments, both calibrations",
        "fidelity/serving.md",
        7.3,
        "-m benchmarks.serving_fidelity --variants roofline,smooth-roofline --causes --jobs 2 "
        "--plot {out}/heldout.png --plot-kinds {out}/dense_vs_moe.png",
        render=_serving_render,
        figures=[
            ("heldout.png", "docs/fidelity/serving_heldout.png"),
            ("heldout.png", "docs/serving_fidelity.png"),
            ("dense_vs_moe.png", "docs/fidelity/dense_vs_moe.png"),
        ],
    ),
    stage(
        "fidelity-ttft-causes",
        "Why the replayed TTFT misses: the counted causes (default calibration)",
        "fidelity/serving.md",
        3.1,
        "-m benchmarks.ttft_causes --jobs 2",
    ),
    stage(
        "peer-vidur",
        "servegym and Vidur on the same request list (Llama-3-8B, one A100, 70 % load)",
        "benchmarks/peer-vidur.md",
        2.3,
        "-m benchmarks.peer_vidur --require-vidur --vidur-grid quick --count 1000 10000 "
        "--work-dir {out}/default",
        # the default run's request list: its rate, as it prints it
        "-m benchmarks.peer_vidur --require-vidur --vidur-grid quick --count 1000 "
        "--overlap-scheduling --rate 12.539098081101884 --work-dir {out}/overlap",
        render=_peer_render,
    ),
]
