"""The leaderboard (docs/leaderboard.md): every family's v1 default, short episodes, two seeds."""

from __future__ import annotations

from evaluation.report.stage import StageRun, stage


def _leaderboard(run: StageRun) -> str:
    text = (run.out / "leaderboard.md").read_text()
    # The page has its own title; the leaderboard's sections stay one level below it.
    return text.split("\n", 1)[1] if text.startswith("# ") else text


_RESULTS = [f"{{out}}/{env}/results.json" for env in ("pd-cluster", "routing", "allocation")]
STAGES = [
    stage(
        "leaderboard",
        "Leaderboard: every policy of each family at its v1 default (seeds 0 and 1)",
        "leaderboard.md",
        14,
        "evaluate.py --quiet --env pd-cluster-v1 --workload mixed,bfcl --count 40 --seeds 0,1 "
        "--out {out}/pd-cluster",
        "evaluate.py --quiet --env routing-v1 --count 1000 --seeds 0,1 --out {out}/routing",
        "evaluate.py --quiet --env allocation-v1 --seeds 0,1 --out {out}/allocation",
        ["evaluate.py", "--leaderboard", "{out}/leaderboard.md", *_RESULTS],
        render=_leaderboard,
    )
]
