"""Learning curves of the shipped policies: behaviour-cloning accuracy per epoch and
the validation-seed selection metric during RL, beside the expert's and the best baseline's
validation figures, read from the ``train.py`` run directories.

    python examples/plot_shipped_curves.py [--runs runs] [--out results/learned_curves.png]

Each family's run directory is the ``out`` of the run that wrote its shipped checkpoint
(``checkpoints/<family>/config.json``; ``<runs>/train_<family>`` when that has none), with
``--runs`` replacing its leading ``runs/``: ``eval.json`` (BC curve, BC-only and reference
figures on the validation seeds) and ``eval_history.json`` (every evaluation during RL). A
family whose run is missing is named and skipped. The same curves are in each run's offline
W&B run (``wandb/offline-run-*``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

FAMILIES = ("pd-cluster", "routing", "allocation")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the repository root (evaluation/)


def run_dir(family: str, runs: Path) -> Path:
    """The run directory of ``family``'s shipped checkpoint: its ``config.json``'s ``out`` under
    ``runs`` (which stands for the leading ``runs/``), else ``runs/train_<family>``."""
    cfg = ROOT / "checkpoints" / family / "config.json"
    out = json.loads(cfg.read_text()).get("out") if cfg.is_file() else None
    if not out:
        return runs / f"train_{family}"
    parts = Path(out).parts
    return runs.joinpath(*parts[1:]) if parts and parts[0] == "runs" else Path(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", default="runs", help="folder holding runs/train_<family>")
    ap.add_argument("--out", default="results/learned_curves.png")
    args = ap.parse_args(argv)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import evaluation

    runs = {f: run_dir(f, Path(args.runs)) for f in FAMILIES}
    found = [f for f in FAMILIES if (runs[f] / "eval.json").is_file()]
    for f in FAMILIES:
        if f not in found:
            print(f"no run at {runs[f]}: {f} skipped", file=sys.stderr)
    if not found:
        print("no run found", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(2, len(found), figsize=(4.2 * len(found), 6.5), squeeze=False)
    for col, family in enumerate(found):
        run = runs[family]
        report = json.loads((run / "eval.json").read_text())
        select = evaluation.env_entry(family).select_metric
        bc = report.get("bc", {})
        epochs = [h["epoch"] for h in bc.get("history", [])]
        ax = axes[0][col]
        ax.plot(range(1, len(epochs) + 1), [h["accuracy"] for h in bc["history"]], marker="o")
        expert = str(report["config"]["bc_expert"]).split(":")[-1]  # a py: spec's factory name
        ax.set_title(f"{family}: BC from {expert}", fontsize=9)
        ax.set_xlabel("BC epoch (incl. DAgger rounds)")
        ax.set_ylabel("share of expert actions ranked first")
        ax.set_ylim(0, 1.02)
        ax = axes[1][col]
        history_path = run / "eval_history.json"
        history = json.loads(history_path.read_text()) if history_path.is_file() else []
        steps = [0] + [h["global_step"] for h in history]
        values = [bc["eval"][select.key]] + [h[select.key] for h in history]
        ax.plot(steps, values, marker="o", label="learned (0: after BC)")
        for name, ref in report.get("validation_references", {}).items():
            label = "best baseline" if name == "best_baseline" else f"{name} (reference)"
            ax.axhline(ref[select.key], ls="--", lw=1, color="grey" if "best" in name else "k",
                       label=label)  # fmt: skip
        ax.set_xlabel("RL env steps")
        ax.set_ylabel(f"{select.label} on validation seeds ({select.better} is better)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
