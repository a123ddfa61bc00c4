"""The run config's ``primary:`` key: which scorer decides each phase's ``success``.

It maps a category — ``Query`` or ``Management``, optionally for one phase
(``Query/follow_up``) — to a scorer, or to a list of scorers of which the first one that applies
to the phase decides. Read here, with the schema; applied by
:class:`evalbench.scoring.primary.PrimaryPolicy`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

CATEGORIES = ("Query", "Management")
PHASES = ("main", "follow_up")
DEFAULT_PRIMARY: dict[str, tuple[str, ...]] = {"Query": ("exec_match",), "Management": ("test_cases", "state_match")}
_KEY = re.compile(r"^(Query|Management)(?:[/.](main|follow_up))?$")


def parse_primary(value: Mapping[str, object] | None) -> dict[str, tuple[str, ...]]:
    """``primary:`` as ``{"Query": (...), "Management/follow_up": (...)}``, defaults filled in;
    raises ValueError naming the bad key."""
    mapping = dict(DEFAULT_PRIMARY)
    for key, names in (value or {}).items():
        match = _KEY.match(str(key))
        if match is None:
            raise ValueError(f"primary: unknown key {key!r} (use Query, Management, or e.g. Query/follow_up)")
        listed = [names] if isinstance(names, str) else names
        if not isinstance(listed, list) or not listed or not all(isinstance(n, str) and n for n in listed):
            raise ValueError(f"primary.{key}: expected a scorer name or a non-empty list of scorer names")
        category, phase = match.groups()
        mapping[f"{category}/{phase}" if phase else category] = tuple(listed)
    return mapping
