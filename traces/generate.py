"""Write a generated trace: ``python -m traces.generate NAME --seed S [--count N] [--rate R]
[--model M] [--arrivals A] --out FILE``.

``NAME`` is a key of :data:`traces.generators.GENERATORS`. The file is written with
:func:`traces.io.write_trace` (validated, deterministic: the same arguments give identical
bytes). ``--arrivals`` is passed to ``goodserve`` / ``goodserve-sessions``; for
the workflow generators ``poisson`` / ``bursty`` select the arrival process.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from traces.generators import GENERATORS, generate
from traces.io import write_trace


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point.

    :param argv: arguments (default ``sys.argv[1:]``).
    :return: exit status (0 on success).
    """
    ap = argparse.ArgumentParser(description="Generate a calibrated servegym trace.")
    ap.add_argument("name", choices=sorted(GENERATORS))
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=None, help="records (default: paper default)")
    ap.add_argument("--rate", type=float, default=None, help="mean arrival rate, per second")
    ap.add_argument("--model", default=None, help="catalog model (default: paper default)")
    ap.add_argument(
        "--arrivals",
        default=None,
        help="goodserve: mooncake | mooncake-replay | poisson; "
        "goodserve-sessions: poisson | bursty | mooncake",
    )
    ap.add_argument("--data-dir", default=None, help="raw-trace dir for --arrivals mooncake")
    ap.add_argument("--out", required=True, help="output JSONL file")
    args = ap.parse_args(argv)
    kw: dict[str, object] = {
        "seed": args.seed,
        "count": args.count,
        "rate": args.rate,
        "model": args.model,
    }
    if args.arrivals is not None:
        if args.name in ("goodserve", "goodserve-sessions"):
            kw["arrivals"] = args.arrivals
            kw["data_dir"] = args.data_dir
        elif args.arrivals in ("poisson", "bursty"):
            kw["arrival_process"] = args.arrivals
        else:
            ap.error(f"--arrivals {args.arrivals!r} is only valid for goodserve(-sessions)")
    records = generate(args.name, **kw)
    path = write_trace(records, args.out)
    print(f"wrote {len(records)} {args.name} records to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
