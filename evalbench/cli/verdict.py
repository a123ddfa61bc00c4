"""The gates of a command that ends with a summary (run, report, merge, rescore) and its exit code."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NamedTuple

from evalbench.cli.baseline import read_baseline
from evalbench.cli.exit_codes import EXIT_CANCELLED, EXIT_CONFIG, EXIT_GATE, EXIT_INFRA, EXIT_OK
from evalbench.core.errors import ConfigError
from evalbench.results.gates import Threshold, check_baseline_journal, check_gates, parse_threshold
from evalbench.results.summary.regression import check_confidence


class Thresholds(NamedTuple):
    """The gate options, parsed (and the baseline read) before the run, not after it."""

    fail_under: list[Threshold]
    max_regression: list[Threshold]
    baseline: dict[str, object] | None


def gate_list(fail_under: list[Threshold], max_regression: list[Threshold]) -> list[tuple[str, Threshold]]:
    """The gates as preflight checks them: (option, threshold)."""
    return [("--fail-under", t) for t in fail_under] + [("--max-regression", t) for t in max_regression]


def confidence(args: argparse.Namespace) -> float:
    """``--regression-confidence`` (0.95 or 95%); a ConfigError naming it otherwise."""
    text = str(getattr(args, "regression_confidence", "95%")).strip()
    try:
        return check_confidence(float(text[:-1]) / 100 if text.endswith("%") else float(text))
    except ValueError as exc:
        reason = str(exc) if "confidence" in str(exc) else "not a number (write 0.95 or 95%)"
        raise ConfigError(f"--regression-confidence {text}: {reason}") from None


def thresholds(args: argparse.Namespace) -> Thresholds:
    fail_under = [parse_threshold(t, "--fail-under") for t in args.fail_under]
    max_regression = [parse_threshold(t, "--max-regression") for t in args.max_regression]
    baseline = None
    if max_regression and not args.baseline:
        raise ConfigError("--max-regression needs --baseline RUN_DIR")
    if args.baseline:
        path = Path(args.baseline) / "summary.json"
        if not os.path.lexists(path):  # anything else there is refused, naming it, by read_baseline
            raise ConfigError(f"--baseline {args.baseline}: no summary.json there (is it a run directory?)")
        baseline = read_baseline(path)
        check_baseline_journal(Path(args.baseline))  # paired by --max-regression: refused now, not after the run
    if args.max_infra_errors < 0:
        raise ConfigError("--max-infra-errors must be 0 or more")
    confidence(args)
    return Thresholds(fail_under, max_regression, baseline)


def verdict(args: argparse.Namespace, summary: dict[str, object], run_dir: Path, limits: Thresholds, *,
            cancelled: bool) -> int:
    """Check the gates, record them in summary.md and pick the exit code."""
    from evalbench.results.journal.files import write_atomic
    from evalbench.results.render.summary_md import incomplete_note, render_summary_markdown

    incomplete = incomplete_note(summary)
    if incomplete:  # the gates below fail on it, unless --allow-incomplete
        print(f"  {incomplete}")
    if limits.baseline is not None and not args.force and _scoring_differs(args, limits.baseline, summary):
        return EXIT_CONFIG
    gates = check_gates(summary, limits.fail_under, limits.max_regression, limits.baseline,
                        allow_incomplete=getattr(args, "allow_incomplete", False), run_dir=Path(run_dir),
                        baseline_dir=Path(args.baseline) if args.baseline else None,
                        confidence=confidence(args))
    if gates:
        write_atomic(run_dir / "summary.md", render_summary_markdown(summary, gates))
        for gate in gates:
            print(f"  gate {gate.name}: {'pass' if gate.passed else 'FAIL'} ({gate.message})")
    if cancelled:
        print(f"cancelled: resume with --resume {run_dir}", file=sys.stderr)
        return EXIT_CANCELLED
    return _strict_and_infra(args, summary) or (EXIT_GATE if any(not g.passed for g in gates) else EXIT_OK)


def _scoring_differs(args: argparse.Namespace, baseline: dict[str, object], summary: dict[str, object]) -> bool:
    from evalbench.results.summary.comparison import scoring_differences

    differences = scoring_differences(_object_or_none(baseline.get("scoring")), _object_or_none(summary.get("scoring")))
    if differences:
        print(f"error: --baseline {args.baseline} decides its verdicts otherwise than this run "
              f"({'; '.join(differences)}); use --force to compare anyway", file=sys.stderr)
    return bool(differences)


def _strict_and_infra(args: argparse.Namespace, summary: dict[str, object]) -> int:
    """EXIT_CONFIG for invalid items under --strict, EXIT_INFRA above --max-infra-errors, else 0."""
    invalid = _object(summary.get("invalid_items") or {}).get("count", 0)
    if invalid and getattr(args, "strict", False):
        print(f"error: {invalid} invalid item(s) (--strict): their golden SQL cannot judge an answer "
              "(see summary.json: invalid_items, or evalbench validate)", file=sys.stderr)
        return EXIT_CONFIG
    infra = summary.get("infra_errors", 0)
    if isinstance(infra, int) and infra > args.max_infra_errors:
        print(f"error: {infra} conversation(s) ended in an infrastructure error (db_error, vuser_error); "
              f"--max-infra-errors is {args.max_infra_errors}", file=sys.stderr)
        return EXIT_INFRA
    return EXIT_OK


def _object(value: object) -> dict[str, object]:
    """A summary's JSON object (the summary is written by evalbench: anything else reads as empty)."""
    return value if isinstance(value, dict) else {}


def _object_or_none(value: object) -> dict[str, object] | None:
    return value if isinstance(value, dict) else None
