"""Per-seed goodput table of an ``evaluate.py --env allocation-v1`` run, and the default
episode's ranking criteria (docs/envs/allocation-default-episode.md): on every seed and on the mean,
the best and worst of the four criteria policies differ by >= 1.2x in goodput and none scores 0;
each policy's seed-to-seed spread (max - min) is smaller than the gap between the best and the
worst.

    python examples/allocation_v1_criteria.py results/allocation-v1/results.json [--markdown]

Prints one row per policy: goodput / mean latency per seed and the mean; then each criterion
with PASS or FAIL. Exits 1 if a criterion fails.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

#: The policies the criteria compare: the paper's K8s HPA, the equal split, our
#: demand-proportional reference and Scepsy.
CRITERIA_POLICIES = ("scepsy", "k8s-hpa", "naive-equal", "demand-proportional")


def load(path: Path) -> dict[str, dict[str, dict[int, tuple[float, float]]]]:
    """workload -> policy -> seed -> (goodput, mean latency) from a results.json."""
    rows = json.loads(path.read_text())
    if not isinstance(rows, list):
        raise SystemExit(f"{path}: expected evaluate.py's list of result rows")
    out: dict[str, dict[str, dict[int, tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for r in rows:
        m = r["metrics"]
        out[r["workload"]][r["policy"]][int(r["seed"])] = (m["goodput"], m["latency_mean"])
    return out


def criteria(goodput: dict[str, dict[int, float]]) -> list[tuple[str, bool]]:
    """The criteria over the four policies' goodput per seed, each with whether it holds."""
    seeds = sorted(set.intersection(*(set(goodput[p]) for p in CRITERIA_POLICIES)))
    mean = {p: sum(goodput[p][s] for s in seeds) / len(seeds) for p in CRITERIA_POLICIES}
    checks = []
    for label, values in [("mean", mean)] + [
        (f"seed {s}", {p: goodput[p][s] for p in CRITERIA_POLICIES}) for s in seeds
    ]:
        best, worst = max(values.values()), min(values.values())
        ratio = best / worst if worst > 0 else float("inf")
        checks.append((f"{label}: best / worst = {ratio:.2f} (>= 1.2)", ratio >= 1.2))
        checks.append((f"{label}: worst = {worst:.3f} wf/s (> 0)", worst > 0))
    gap = max(mean.values()) - min(mean.values())
    for p in CRITERIA_POLICIES:
        spread = max(goodput[p][s] for s in seeds) - min(goodput[p][s] for s in seeds)
        checks.append((f"{p}: seed spread {spread:.3f} < gap {gap:.3f}", spread < gap))
    return checks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="results.json of evaluate.py --env allocation-v1")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    a = ap.parse_args(argv)
    ok = True
    for workload, by_policy in load(a.results).items():
        seeds = sorted({s for d in by_policy.values() for s in d})
        head = ["policy", *(f"seed {s}" for s in seeds), "mean"]
        print(f"\n{workload}: goodput (wf/s) / mean latency (s)")
        if a.markdown:
            print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
        for p, d in by_policy.items():
            cells = [f"{d[s][0]:.3f} / {d[s][1]:.1f}" if s in d else "-" for s in seeds]
            g = [d[s][0] for s in seeds if s in d]
            lat = [d[s][1] for s in seeds if s in d]
            cells.append(f"{sum(g) / len(g):.3f} / {sum(lat) / len(lat):.1f}")
            name = f"`{p}`" if a.markdown else f"{p:<24}"
            print(
                "| " + " | ".join([name, *cells]) + " |"
                if a.markdown
                else "  ".join([name, *cells])
            )
        if not all(p in by_policy for p in CRITERIA_POLICIES):
            print(f"criteria need all of {', '.join(CRITERIA_POLICIES)}: skipped")
            continue
        goodput = {p: {s: v[0] for s, v in by_policy[p].items()} for p in CRITERIA_POLICIES}
        for text, passed in criteria(goodput):
            print(f"  {'PASS' if passed else 'FAIL'}  {text}")
            ok &= passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
