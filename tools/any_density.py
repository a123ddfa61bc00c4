"""How often ``Any`` is written in the package's code, per 1,000 lines.

Counts the NAME token ``Any`` (so not in comments or docstrings) and divides by the
non-blank lines of code. ``python tools/any_density.py [package] [--by-package]``.
"""

from __future__ import annotations

import argparse
import io
import sys
import tokenize
from collections import Counter
from pathlib import Path


def count(path: Path) -> tuple[int, int]:
    """(``Any`` tokens, non-blank lines) of one Python file."""
    text = path.read_text(encoding="utf-8")
    anys = sum(
        1 for tok in tokenize.generate_tokens(io.StringIO(text).readline) if tok.type == tokenize.NAME and tok.string == "Any"
    )
    return anys, sum(1 for line in text.splitlines() if line.strip())


def density(root: Path) -> tuple[float, Counter[str], Counter[str]]:
    """Overall ``Any`` per 1,000 lines, and the counts of ``Any`` and lines by subpackage."""
    anys: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        key = rel.parts[0] if len(rel.parts) > 1 else "(top)"
        a, n = count(path)
        anys[key] += a
        lines[key] += n
    total = sum(lines.values())
    return (1000 * sum(anys.values()) / total if total else 0.0), anys, lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("package", nargs="?", default="evalbench")
    parser.add_argument("--by-package", action="store_true")
    args = parser.parse_args()
    overall, anys, lines = density(Path(args.package))
    if args.by_package:
        for key in sorted(lines, key=lambda k: -anys[k]):
            print(f"{key:12} {anys[key]:5} Any {lines[key]:6} lines {1000 * anys[key] / max(lines[key], 1):6.1f} /kLOC")
    print(f"{overall:.1f} Any per 1,000 lines ({sum(anys.values())} in {sum(lines.values())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
