"""``python -m test.robustness --output DIR``: the robustness suites, from the repository root.

The node as its own process under floods, a soak and malformed messages, then the hostile-input
suite (an attack's cases against the tools, the node's start-up and the launch files;
``--attack-only`` runs it alone). Writes ``reliability.json`` (``attack.json``), prints the
summary and the targets; exit status 0 when every target is met, 1 when one is missed, 2 on an
expected failure (one line, ``python -m test.robustness: error: <reason>``).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.cli import run_reporting_failures
from benchmarks.targets import format_targets
from gpu_euclidean_cluster.core.config import BACKENDS

from .attack import AttackCaseResult, format_attack, run_attack
from .reliability import (
    QUICK_OPTIONS,
    ReliabilityOptions,
    attack_inputs,
    check_attack,
    format_reliability,
    run_reliability,
)

PROG = "python -m test.robustness"
#: The numeric options: flag, the :class:`~.reliability.ReliabilityOptions` field it sets, its type
#: and what it is.
NUMBERS: tuple[tuple[str, str, type, str], ...] = (
    ("--soak-frames", "soak_frames", int, "frames of the soak"),
    ("--flood-duration-s", "flood_duration_s", float, "seconds per flood step"),
    ("--damaged-bags", "damaged_bags", int,
     "randomly damaged copies of a valid bag per storage in the hostile-input suite"),
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    d = ReliabilityOptions()
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Flood the node (as its own process) at 50 and 200 Hz, soak it with 2000 "
        "frames while sampling its RSS, send a matrix of malformed PointCloud2 messages, and run "
        "the hostile-input suite (files, bags, options, start-up inputs, launch files and Velodyne "
        "packets into the node, each case its own process); writes reliability.json and checks "
        "crashes, tracebacks, wrong outputs, refusals of valid input, peak memory, RSS slope and "
        "drop reporting.",
    )
    parser.add_argument(
        "--output", type=Path, required=True, metavar="DIR", help="folder of the results"
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default=d.backend, help=f"node backend (default {d.backend})"
    )
    parser.add_argument("--frame", type=Path, default=None, help="cloud file to send")
    for flag, field, kind, what in NUMBERS:
        default = getattr(d, field)
        parser.add_argument(flag, type=kind, default=default, help=f"{what} (default {default:g})")
    parser.add_argument(
        "--attack-only",
        action="store_true",
        help="run only the hostile-input suite (no node floods, soak or matrix); writes "
        "attack.json",
    )
    parser.add_argument(
        "--quick", action="store_true", help="CI mode: CPU backend, small cloud, short run"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the suites ``args`` ask for; 0 when every target is met."""
    options = (
        QUICK_OPTIONS
        if args.quick
        else ReliabilityOptions(
            backend=args.backend,
            frame=args.frame,
            log_dir=args.output / "reliability_logs",
            **{field: getattr(args, field) for _, field, _, _ in NUMBERS},
        )
    )
    if args.attack_only:
        return run_attack_only(options, args.output)
    report = run_reliability(options)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "reliability.json").write_text(json.dumps(report.as_dict(), indent=1) + "\n")
    print(format_reliability(report))
    print(f"wrote {args.output / 'reliability.json'}")
    return 0 if report.passed else 1


def run_attack_only(options: ReliabilityOptions, output: Path) -> int:
    """The hostile-input suite alone: each case as it ends, the totals, the targets."""

    def show(case: AttackCaseResult) -> None:
        print(f"{case.group} {case.name}: {case.outcome} (exit {case.exit_code})", flush=True)

    report = run_attack(*attack_inputs(options), progress=show, backend=options.backend)
    targets = check_attack(report)
    output.mkdir(parents=True, exist_ok=True)
    result = {**report.as_dict(), "targets": [t.as_dict() for t in targets]}
    (output / "attack.json").write_text(json.dumps(result, indent=1) + "\n")
    print(format_attack(report))
    print(format_targets(targets))
    print(f"wrote {output / 'attack.json'}")
    return 0 if all(t.status == "met" for t in targets) else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run; the exit status (2: an expected failure)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return run_reporting_failures(PROG, run, args)


if __name__ == "__main__":
    sys.exit(main())
