"""BIRD-Interact's official figures, computed from a run's journal the way its own scripts compute
them, so that a published number can be compared with the same agent outputs.

- **Success rate** — ``evaluation/src/eval_bird_interact_batch.py::batch_eval`` prints
  ``successes / total`` over every record it was given: every item counts, so an item whose
  golden work cannot judge (``invalid_item`` here, in no rate of ours) is a failure, and so is a
  conversation that ended without an answer (timeout, agent error).
- **Phase rates and reward** — ``bird_interact_agent/batch_run_bird_interact/main.py``
  (``calculate_metrics``): ``phase1_completed / total_samples``, ``phase2_completed /
  total_samples``, ``total_reward / completed_samples``; the reward of a solved phase is 0.7 / 0.3
  at the first try, 0.5 / 0.2 after debugging (``action_handler.py::execute_submit_action``).

A phase passes officially when our ``bird_interact`` verdict passes and was reached by one of
BIRD-Interact's own judges: ``exec_match`` (``test_case_default`` → ``ex_base``) or the item's
``test_cases``. A management phase without test cases is judged upstream by ``ex_base`` on the
scripts' last results, which fails when the golden result is empty; an answer in words
(``answer_match``, ``llmrater``) has no SQL to submit upstream and fails. With trials every
conversation is a sample. Only meaningful under ``semantics: bird_interact``: the summary
carries it then.
"""

from __future__ import annotations

from typing import Any

from evalbench.core.conversation import Phase
from evalbench.results.journal.lines import phase_passed
from evalbench.results.journal.record import REWARDS  # a solved phase's reward: (first try, after debugging)

JUDGES = frozenset({"exec_match", "test_cases"})  # what BIRD-Interact's evaluator itself runs


def official_pass(phase: dict[str, Any]) -> bool:
    """Whether BIRD-Interact's evaluator passes this journaled phase."""
    if phase.get("outcome") != "scored" or not phase_passed(phase):
        return False
    primary = phase.get("primary")
    if primary == "state_match":  # upstream: ex_base on the scripts' results, 0 when the golden one is empty
        golden = phase.get("golden") or []
        return bool(golden) and bool((golden[0] or {}).get("row_count"))
    return primary in JUDGES


class OfficialTally:
    """Counts the official passes and reward of each conversation record."""

    def __init__(self) -> None:
        self.total = 0
        self.passed = {"main": 0, "follow_up": 0}
        self.reward = 0.0

    def add(self, record: dict[str, Any]) -> None:
        self.total += 1
        for phase in record.get("phases") or ():
            name = phase.get("phase")
            if name in self.passed and official_pass(phase):
                self.passed[name] += 1
                first, debugged = REWARDS[Phase(name)]
                self.reward += debugged if phase.get("debug_used") else first

    def result(self) -> dict[str, int | float | None]:
        def rate(count: int) -> float | None:
            return round(count / self.total, 4) if self.total else None

        return {"total": self.total, "passed": self.passed["main"], "success_rate": rate(self.passed["main"]),
                "follow_up_passed": self.passed["follow_up"], "follow_up_rate": rate(self.passed["follow_up"]),
                "mean_reward": round(self.reward / self.total, 4) if self.total else None}


def official_line(summary: dict[str, Any]) -> str | None:
    """One line for the console, summary.md and the report: the official figures beside ours."""
    official = summary.get("official")
    if not official or official.get("success_rate") is None:
        return None
    ours = (summary.get("success") or {}).get("main") or {}
    ours_text = f"{ours['rate']:.1%} of {ours.get('total')} judged" if ours.get("rate") is not None else "n/a"
    return (f"BIRD-Interact official (every item counts; invalid and unanswered fail): success {official['success_rate']:.1%} "
            f"({official['passed']}/{official['total']}), follow-up {official['follow_up_rate']:.1%}, "
            f"mean reward {official['mean_reward']:.4f} — ours: {ours_text}")


def official_comparison(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    """Lines comparing BIRD-Interact's official figures of runs A and B (none unless both have them)."""
    fa, fb = (a or {}).get("official"), (b or {}).get("official")
    if not fa or not fb or fa.get("success_rate") is None or fb.get("success_rate") is None:
        return []
    lines = []
    for key, label in (("success_rate", "success"), ("follow_up_rate", "follow-up")):
        diff = 100 * (fb[key] - fa[key])
        lines.append(f"BIRD-Interact official {label} (every item counts): A {fa[key]:.1%} ({fa.get('total')} items), "
                     f"B {fb[key]:.1%} ({fb.get('total')} items), B-A {diff:+.1f} pp")
    lines.append(f"BIRD-Interact official mean reward: A {fa['mean_reward']:.4f}, B {fb['mean_reward']:.4f}, "
                 f"B-A {fb['mean_reward'] - fa['mean_reward']:+.4f}")
    return lines
