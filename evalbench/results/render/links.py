"""How pages link to one conversation of a run's ``report.html``.

``report.html#<item id>`` opens that item's conversation (the item id percent-encoded as
JavaScript's ``encodeURIComponent`` does); a repeated trial adds ``&trial=<n>`` (trial 1 is the
bare id). The page's script reads the same form (:mod:`evalbench.results.render.html_assets`).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote

from evalbench.results.journal.lines import trial_of

REPORT = "report.html"
_SAFE = "-_.!~*'()"  # what encodeURIComponent leaves as it is, besides letters and digits


def conversation_anchor(record: dict[str, object]) -> str:
    """The fragment (without ``#``) that opens ``record``'s conversation in report.html."""
    anchor = quote(str(record.get("item_id")), safe=_SAFE)
    trial = trial_of(record)
    return anchor if trial == 1 else f"{anchor}&trial={trial}"


def relative_href(target: Path, from_dir: Path) -> str:
    """A relative URL from a page in ``from_dir`` to the file ``target`` (each path part
    percent-encoded, so a run id with ``#`` or ``?`` still links)."""
    rel = os.path.relpath(Path(target).resolve(), Path(from_dir).resolve())
    return "/".join(quote(part, safe=_SAFE) for part in Path(rel).parts)


def report_href(run_dir: Path, from_dir: Path) -> str | None:
    """The relative URL of ``run_dir``'s report.html from a page in ``from_dir``; None when the run
    has no report.html (``evalbench report RUN_DIR`` writes it)."""
    target = Path(run_dir) / REPORT
    return relative_href(target, from_dir) if target.is_file() else None


__all__ = ["conversation_anchor", "relative_href", "report_href"]
