"""The GoodServe reproduction (docs/reproductions/goodserve.md) on Routing-v1, and the Routing
section of docs/envs/v1-changes.md (what v0's per-request SLO basis leaks).

Every run uses the held-out seeds 100–102 and the paper's setup (GoodServe §5: ``goodserve-4``,
Llama-3.1-8B, the BIRD / SWE-bench / LiveCodeBench mix, load 0.35, τ = 50, token-ID migration,
the MoE predictor); only the SLO scale α and the named option change.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from envs.registry import FAMILIES
from evaluation.report.stage import StageRun, stage, text_block

SEEDS = "100,101,102"
ALPHAS = (1.0, 1.5, 2.0, 2.5, 3.0)
_PAPER = FAMILIES["routing-v1"].baselines
_DEPLOYED = ("llm-d", "sglang-cache-aware", "dynamo-kv")
_GOODSERVE = ("goodserve-no-migration", "goodserve")
_ROUTERS = (*_PAPER, *_DEPLOYED, *_GOODSERVE)
_LABEL = {
    **{p: f"{p} (deployed)" for p in _DEPLOYED},
    "goodserve-no-migration": "goodserve-no-migration (§4.3)",
    "goodserve": "**goodserve** (as written)",
}
_DIAGNOSED = "preble,least-request,dynamo-kv,goodserve-no-migration,goodserve"
_EVAL = f"evaluate.py --quiet --env routing-v1 --seeds {SEEDS}"
_BENCH = f"-m benchmarks.routing_estimates --env routing-v1 --seeds {SEEDS}"


def _means(path: Path) -> dict[tuple[str, float], tuple[float, float]]:
    """(policy, α) → seed means of goodput and SLO-violation ratio from a ``results.json``."""
    runs: dict[tuple[str, float], list[tuple[float, float]]] = {}
    for r in json.loads(path.read_text()):
        m = r["metrics"]
        key = (r["policy"], float(r["slo_scale"]))
        runs.setdefault(key, []).append((m["goodput"], m["slo_violation_ratio"]))
    return {k: tuple(np.mean(v, axis=0).tolist()) for k, v in runs.items()}  # type: ignore[misc]


def _gain(ours: float, other: float) -> str:
    return f"{(ours / other - 1) * 100:+.1f} %"


def _best(means: dict, names: Sequence[str], alpha: float) -> tuple[str, float]:
    name = max(names, key=lambda p: means[p, alpha][0])
    return name, means[name, alpha][0]


def _paper_grid(run: StageRun) -> str:
    means = _means(run.out / "paper" / "results.json")
    head = "| policy | " + " | ".join(f"α={a:g}" for a in ALPHAS) + " |"
    lines = [head, "|---" * (len(ALPHAS) + 1) + "|"]
    for p in _ROUTERS:
        row = " | ".join("{:.2f} / {:.2f}".format(*means[p, a]) for a in ALPHAS)
        lines.append(f"| {_LABEL.get(p, p)} | {row} |")
    others = (*_PAPER, *_DEPLOYED)
    for label, names in (("best paper baseline", _PAPER), ("best of all baselines", others)):
        cells = []
        for a in ALPHAS:
            name, value = _best(means, names, a)
            cells.append(f"{_gain(means['goodserve', a][0], value)} ({name})")
        lines.append(f"| GoodServe gain vs {label} | " + " | ".join(cells) + " |")
    mig = [_gain(means["goodserve", a][0], means["goodserve-no-migration", a][0]) for a in ALPHAS]
    lines.append("| GoodServe vs goodserve-no-migration | " + " | ".join(mig) + " |")
    return (
        "Goodput (req/s) / SLO-violation ratio, means over seeds 100–102; gains compare "
        "goodputs.\n\n" + "\n".join(lines)
    )


_ABLATIONS = (
    ("moe-residual", "--output-predictor moe-residual", "residual-life re-prediction"),
    (
        "history",
        "--output-predictor history",
        "history predictor (the paper's “without prediction”)",
    ),
    ("oracle", "--output-predictor oracle", "oracle lengths"),
    ("kv", "--migration kv", "KV migration"),
)


def _diagnosis_goodput(stdout: str) -> float:
    """GoodServe's goodput from a ``routing_estimates --diagnose`` table."""
    row = next(ln for ln in stdout.splitlines() if ln.startswith("| goodserve |"))
    return float(row.split("|")[2])


def _ablations(run: StageRun) -> str:
    base = _means(run.out / "default" / "results.json")
    alphas = (2.0, 3.0)
    rows: list[tuple[str, list[float]]] = [
        (
            "MoE predictor + MoE re-prediction, token-ID migration, queued requests checked "
            "(default)",
            [base["goodserve", a][0] for a in alphas],
        ),
        (
            "no migration (`goodserve-no-migration`)",
            [base["goodserve-no-migration", a][0] for a in alphas],
        ),
    ]
    for name, option, label in _ABLATIONS:
        m = _means(run.out / name / "results.json")
        rows.append((f"{label} (`{option}`)", [m["goodserve", a][0] for a in alphas]))
    checks = [_diagnosis_goodput(o.stdout) for o in run.outputs[-2:]]
    rows.append(("running requests checked only (`--running-checks-only`)", checks))
    lines = ["| GoodServe with | α=2 | α=3 |", "|---|---|---|"]
    for i, (label, values) in enumerate(rows):
        cells = [
            f"{v:.2f}" + ("" if i == 0 else f" ({_gain(v, base['goodserve', a][0])})")
            for v, a in zip(values, alphas, strict=True)
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return (
        "Goodput (req/s), means over seeds 100–102; in brackets the change against the "
        "default.\n\n" + "\n".join(lines)
    )


def _diagnosis(run: StageRun) -> str:
    """The ``--diagnose`` tables as Markdown, the per-GPU audits as text blocks."""
    parts = []
    for o in run.outputs:
        text = o.table_text()
        parts.append(text if "| policy |" in text else text_block(text))
    return "\n\n".join(parts)


def _slo_basis(run: StageRun) -> str:
    cols = (
        ("v0", "routing-v0 (per-request basis, `roofline`)"),
        ("v1-roofline", "routing-v1 at `roofline` (task basis only)"),
        ("v1", "routing-v1 (task basis, `smooth-roofline`)"),
    )
    per_seed: dict[str, dict[str, list[float]]] = {}
    for folder, _ in cols:
        for r in json.loads((run.out / folder / "results.json").read_text()):
            per_seed.setdefault(r["policy"], {}).setdefault(folder, []).append(
                r["metrics"]["goodput"]
            )
    head = "| policy | " + " | ".join(f"{label}: seeds 100 / 101 / 102 | mean" for _, label in cols)
    lines = [head + " |", "|---" * (2 * len(cols) + 1) + "|"]
    for policy, by in per_seed.items():
        cells = []
        for folder, _ in cols:
            vals = by[folder]
            cells += [" / ".join(f"{v:.3f}" for v in vals), f"{np.mean(vals):.3f}"]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "Goodput (req/s) at α = 2.\n\n" + "\n".join(lines)


_SWEEP = "--sweep slo_scale=" + ",".join(f"{a:g}" for a in ALPHAS)
STAGES = [
    stage(
        "goodserve-paper",
        "GoodServe Fig. 6 on Routing-v1: every router, SLO scale α 1–3",
        "reproductions/goodserve.md",
        5,
        f"{_EVAL} {_SWEEP} --policies {','.join(_ROUTERS)} --out {{out}}/paper",
        render=_paper_grid,
        figures=[
            ("paper/goodput_vs_slo_scale_goodserve.png", "docs/routing_goodput_vs_slo_scale.png")
        ],
    ),
    stage(
        "goodserve-ablations",
        "GoodServe's ablations on Routing-v1 at α 2 and 3 (GoodServe §5, Fig. 7)",
        "reproductions/goodserve.md",
        2,
        f"{_EVAL} --sweep slo_scale=2,3 --policies goodserve,goodserve-no-migration "
        "--out {out}/default",
        *(
            f"{_EVAL} --sweep slo_scale=2,3 --policies goodserve {option} --out {{out}}/{name}"
            for name, option, _ in _ABLATIONS
        ),
        *(
            f"{_BENCH} --diagnose --policies goodserve --running-checks-only --slo-scale {a}"
            for a in (2, 3)
        ),
        render=_ablations,
    ),
    stage(
        "goodserve-diagnosis",
        "Why requests miss on Routing-v1 at α = 3: misses by cause, migrations, Eq. 2 per GPU",
        "reproductions/goodserve.md",
        1,
        f"{_BENCH} --diagnose --slo-scale 3 --policies {_DIAGNOSED}",
        *(f"{_BENCH} --policy {p} --slo-scale 3" for p in ("goodserve", "preble")),
        render=_diagnosis,
    ),
    stage(
        "goodserve-capacity",
        "The load goodserve-4 sustains on Routing-v1: least-request latency vs load (α = 2)",
        "reproductions/goodserve.md",
        0.5,
        f"{_BENCH} --capacity --policy least-request --loads 0.2,0.35,0.5,0.7,1.0",
    ),
    stage(
        "goodserve-predictors",
        "Output-length predictors on the goodserve workload (GoodServe Fig. 8)",
        "reproductions/goodserve.md",
        0.5,
        "-m envs.common.predictors --report",
    ),
    stage(
        "routing-v1-slo-basis",
        "What the per-request SLO basis leaks: goodput at α = 2, v0 vs v1",
        "envs/v1-changes.md",
        1.5,
        *(
            f"evaluate.py --quiet --env {env} --seeds {SEEDS} --slo-scale 2 "
            f"--policies goodserve,preble,implied-triage{extra} --out {{out}}/{folder}"
            for env, extra, folder in (
                ("routing-v0", "", "v0"),
                ("routing-v1", " --latency-calibration roofline", "v1-roofline"),
                ("routing-v1", "", "v1"),
            )
        ),
        render=_slo_basis,
    ),
]
