"""``python -m bench [--quick]``: the UNS benchmark, everything started and stopped here."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = (
    "drain", "pgbench", "echo", "accept", "deliver", "watch", "ghz", "growth", "processes",
    "console", "peer", "batch",
)  # fmt: skip
PAIRED = ("accept", "deliver", "ghz")  # the workloads --before measures from both trees


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="UNS beside the PostgreSQL ceiling (pgbench), a bare grpc.aio echo server "
        "and peer queues (procrastinate, River), measured in one run on this machine.",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small counts, 3-5 minutes (default: full)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="token sizes, seconds per workload: checks that the bench runs (figures are noise)",
    )
    parser.add_argument(
        "--only",
        default="",
        help=f"comma-separated subset of: {', '.join(WORKLOADS)} (default: all)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results", help="results directory"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample uns-server with py-spy during accept/deliver/watch and the batch "
        "accept and drain; print hotspots",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="ghz workload: also account the UNS servers' CPU per pipeline phase "
        "(UNS_PHASE_CPU=1, a few per cent of overhead) and print it per call",
    )
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also measure this git revision (or source directory) beside the current "
        "tree: the accept, deliver and ghz UNS rows run from both trees, interleaved, in "
        "this run (servers import their tree's code; both use this venv)",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        metavar="N",
        help="with --before: rounds of (before, after) windows per row and level "
        "(default: 1 smoke, 2 quick, 3 full)",
    )
    parser.add_argument(
        "--fsync", action="store_true", help="PostgreSQL with fsync on (default off, as in tests)"
    )
    parser.add_argument(
        "--no-install",
        action="store_true",
        help="do not install missing optional extras (bench/requirements.txt, ghz)",
    )
    return parser


def _terminate(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM cleans up like Ctrl-C


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    selected = tuple(w.strip() for w in args.only.split(",") if w.strip()) or WORKLOADS
    unknown = sorted(set(selected) - set(WORKLOADS))
    if unknown:
        print(f"bench: unknown workload(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    if args.pairs is not None and (args.before is None or args.pairs < 1):
        print("bench: --pairs N (N >= 1) goes with --before", file=sys.stderr)
        return 2
    if args.before is not None and not set(selected) & set(PAIRED):
        print(f"bench: --before pairs {', '.join(PAIRED)}: --only has none", file=sys.stderr)
        return 2
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench import deps

    deps.ensure(install=not args.no_install)
    from bench.run import Options, run  # after deps: psutil is imported at module load

    signal.signal(signal.SIGTERM, _terminate)
    options = Options(
        quick=args.quick,
        smoke=args.smoke,
        install=not args.no_install,
        workloads=selected,
        out_dir=args.out,
        profile=args.profile,
        phases=args.phases,
        fsync=args.fsync,
        before=args.before,
        pairs=args.pairs,
    )
    try:
        return asyncio.run(run(options))
    except KeyboardInterrupt:
        print("bench: interrupted; everything it started has been stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
