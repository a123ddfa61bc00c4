"""Median and spread of repeated measurements, as the benchmark tables print them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def show(self, digits: int = 0) -> str:
        """``median (min–max)``, or the value alone for one measurement."""
        if len(self.values) == 1:
            return f"{self.values[0]:.{digits}f}"
        return f"{self.median:.{digits}f} ({min(self.values):.{digits}f}–{max(self.values):.{digits}f})"

    def as_dict(self) -> dict[str, object]:
        return {"median": self.median, "min": min(self.values), "max": max(self.values), "values": list(self.values)}
