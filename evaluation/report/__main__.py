"""Command line of :mod:`evaluation.report` (``make results``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from evaluation.report import runner
from evaluation.report.runner import (
    TABLES,
    StageResult,
    code_fingerprint,
    fragment_fingerprint,
    run_stages,
)
from evaluation.report.stage import Stage
from evaluation.report.stages import all_stages


def _select(stages: list[Stage], names: str | None) -> list[Stage]:
    if not names:
        return stages
    by_name = {s.name: s for s in stages}
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown stage(s) {unknown}; known: {sorted(by_name)}")
    return [by_name[n] for n in wanted]


def _check(stages: Sequence[Stage]) -> int:
    """Print the stages whose fragment is missing or was measured under other code."""
    stale = []
    for s in stages:
        fp = code_fingerprint(s.code_paths())
        path = runner.ROOT / TABLES / f"{s.name}.md"
        got = fragment_fingerprint(path) if path.exists() else None
        if got != fp:
            stale.append(s.name)
            print(f"{s.name}: {'missing' if got is None else f'measured under code {got}'}")
    extra = sorted(
        p.stem
        for p in (runner.ROOT / TABLES).glob("*.md")
        if p.stem not in {s.name for s in stages}
    )
    for name in extra:
        print(f"{name}: a fragment without a stage")
    print(f"{len(stages) - len(stale)} of {len(stages)} fragments measured under the current code")
    return 1 if stale or extra else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evaluation.report",
        description="Regenerate the documentation's results tables and figures, stage by stage, "
        "with a resumable cache (results/report/); fragments go to results/tables/.",
    )
    ap.add_argument("--stages", help="comma-separated stage names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the stages and exit")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="stages run at once (default 1)")
    ap.add_argument("--force", action="store_true", help="re-measure even what is cached")
    ap.add_argument(
        "--check",
        action="store_true",
        help="list fragments missing or measured under other code; exit 1 if any",
    )
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {a.jobs}")
    stages = _select(all_stages(), a.stages)
    if a.list:
        for s in stages:
            print(f"{s.name:32s} {s.minutes:5.1f} min  docs/{s.page}  {s.title}")
        print(f"{len(stages)} stages, about {sum(s.minutes for s in stages):.0f} min on one core")
        return 0
    if a.check:
        return _check(stages)
    from tqdm import tqdm

    bar = tqdm(
        total=round(sum(s.minutes for s in stages), 1),
        unit="min",
        desc="report",
        bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} expected min [{elapsed}<{remaining}]",
    )

    def done(res: StageResult) -> None:
        how = (
            f"{res.minutes:.1f} min" + (f", {res.cached} cached" if res.cached else "")
            if res.ok
            else "FAILED"
        )
        bar.write(f"{res.stage.name}: {how}")
        if not res.ok:
            bar.write(res.error)
        bar.update(res.stage.minutes)

    results = run_stages(stages, a.jobs, a.force, done)
    bar.close()
    failed = [r.stage.name for r in results if not r.ok]
    if failed:
        print(
            f"failed: {', '.join(failed)} (their logs: results/report/<stage>/command-*.stderr)",
            file=sys.stderr,
        )
        return 1
    print(f"{len(results)} fragments in {TABLES}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
