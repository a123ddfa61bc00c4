"""The scoring part of a run, resolved once from the config and the dataset's format: which
scorers run (those listed, plus those the primary verdict needs), the result semantics, and the
primary policy. Stages and the manifest receive this, never the config."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from evalbench.core.json_types import JsonDict
from evalbench.scoring import Scorer, build_scorers
from evalbench.scoring.primary import PrimaryPolicy, parse_primary
from evalbench.scoring.semantics import ResultRules

_RULE_SCORERS = ("exec_match",)  # the scorers whose options carry the semantics


@dataclass(frozen=True)
class ScoringPlan:
    scorers: dict[str, dict[str, object]]  # name -> options, as they are built
    rules: ResultRules
    primary: PrimaryPolicy
    added: list[str] = field(default_factory=list)  # not listed under scorers:, run for the primary verdict
    semantics_source: str = "default"  # "config" or "default" (followed the dataset format)

    def build(self) -> list[Scorer]:
        return build_scorers(self.scorers)

    def describe(self) -> JsonDict:
        """What the manifest records and ``compare`` / ``--baseline`` check."""
        return {**self.rules.describe(), "semantics_source": self.semantics_source, **self.primary.describe(),
                "scorers_added": list(self.added)}

    def header(self, dataset_format: str | None) -> str:
        """The run header's line about how verdicts are decided."""
        why = "set in the config" if self.semantics_source == "config" else f"default for {dataset_format or 'this'} files"
        empty = f", empty_gold: {self.rules.empty_gold}" if not self.rules.bird else ""
        decides = "; ".join(f"{key} → {' | '.join(names)}" for key, names in sorted(self.primary.mapping.items()))
        nl = ", natural-language answers accepted (answer_match)" if self.primary.accept_nl_answers else ""
        return f"semantics: {self.rules.semantics} ({why}{empty}); primary: {decides}{nl}"


def plan_scoring(scorers: Mapping[str, Mapping[str, object] | None], primary: Mapping[str, object] | None,
                 accept_nl_answers: bool, dataset_format: str | None) -> ScoringPlan:
    """Resolve the scoring of a run; raises ValueError for inconsistent settings."""
    spec = {name: dict(options or {}) for name, options in scorers.items()}
    policy = PrimaryPolicy(parse_primary(primary), accept_nl_answers)
    added = [name for name in policy.scorer_names() if name not in spec]
    for name in added:
        spec[name] = {}
    configured = next((spec[name].get("semantics") for name in _RULE_SCORERS if spec.get(name, {}).get("semantics")), None)
    rules = ResultRules.from_options(spec.get("exec_match"), dataset_format)
    for name in _RULE_SCORERS:
        if name in spec:
            spec[name]["semantics"] = rules.semantics
    return ScoringPlan(spec, rules, policy, added, "config" if configured else "default")
