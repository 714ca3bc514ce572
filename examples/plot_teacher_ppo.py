"""Learning curves of ``teacher-ppo`` runs of one env against their teacher's line: the
validation-seed selection metric at every evaluation during RL (and after behaviour cloning, at
step 0, for a run that finished), beside the teacher's, the env's expert's and the best
baseline's figures on the same seeds from the first finished run, read from the ``train.py``
run directories (``config.json``, ``eval_history.json``, ``eval.json``).

    python examples/plot_teacher_ppo.py RUN [RUN ...] [--out docs/teacher_ppo_curves.png]

A run stopped before its end (no ``eval.json``) adds its curve only; a directory without
``eval_history.json`` is named and skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository root (evaluation/)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="train.py run directories of one env")
    ap.add_argument("--out", default="docs/teacher_ppo_curves.png")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import evaluation

    runs = [Path(r) for r in args.runs if (Path(r) / "eval_history.json").is_file()]
    for r in args.runs:
        if Path(r) not in runs:
            print(f"no eval_history.json in {r}: skipped", file=sys.stderr)
    if not runs:
        print("no run found", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    lines_from = None
    for run in runs:
        cfg = json.loads((run / "config.json").read_text())
        select = evaluation.env_entry(cfg["env"]).select_metric
        history = json.loads((run / "eval_history.json").read_text())
        steps = [h["global_step"] for h in history]
        values = [h[select.key] for h in history]
        report_path = run / "eval.json"
        label = f"{run.name} (stopped before its end)"
        if report_path.is_file():
            report = json.loads(report_path.read_text())
            steps, values = [0, *steps], [report["bc"]["eval"][select.key], *values]
            lines_from = lines_from or (report, cfg, select)
            label = f"{run.name} (step 0: the clone)"
        ax.plot(steps, values, marker="o", label=label)
    if lines_from is not None:
        report, cfg, select = lines_from
        teacher = str(cfg["bc_expert"]).split(":")[-1]
        ax.axhline(report["bc"]["teacher_eval"][select.key], color="k", lw=1.2,
                   label=f"teacher {teacher}")  # fmt: skip
        for name, ref in report.get("validation_references", {}).items():
            if name != cfg["bc_expert"]:
                label = "best baseline" if name == "best_baseline" else f"{name} (expert)"
                ax.axhline(ref[select.key], ls="--", lw=1, color="grey", label=label)
    ax.set_title(f"{cfg['env']}: {cfg['algo']} from the teacher's clone", fontsize=9)
    ax.set_xlabel("RL env steps (critic warm-up included)")
    ax.set_ylabel(f"{select.label}, validation seeds ({select.better} is better)", fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
