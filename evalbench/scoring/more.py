"""The old home of ten scorers, kept for one release: they moved to
:mod:`evalbench.scoring.result_match` (``set_match``, ``exact_match``, ``recall_match``),
:mod:`evalbench.scoring.sql_text` (``sql_exact_match``, ``returned_sql``, ``regexp_matcher``),
:mod:`evalbench.scoring.conversation_metrics` (``clarification``, ``latency``, ``tokens``) and
:mod:`evalbench.scoring.bird_reward` (``bird_interact_reward``)."""

from __future__ import annotations

import warnings

from evalbench.scoring.bird_reward import BirdInteractReward
from evalbench.scoring.conversation_metrics import Clarification, Latency, Tokens
from evalbench.scoring.options import config_error as _config_error
from evalbench.scoring.options import no_options as _no_options
from evalbench.scoring.result_match import ExactMatch, RecallMatch, SetMatch, compared_result, precision_recall
from evalbench.scoring.result_match import comparable as _comparable
from evalbench.scoring.result_match import unusable as _unusable
from evalbench.scoring.sql_text import RegexpMatcher, ReturnedSql, SqlExactMatch, normalise_sql, strip_aliases

__all__ = [
    "BirdInteractReward", "Clarification", "ExactMatch", "Latency", "RecallMatch", "RegexpMatcher", "ReturnedSql",
    "SetMatch", "SqlExactMatch", "Tokens", "_comparable", "_config_error", "_no_options", "_unusable",
    "compared_result", "normalise_sql", "precision_recall", "strip_aliases",
]

warnings.warn("evalbench.scoring.more was split into evalbench.scoring.result_match, sql_text, conversation_metrics "
              "and bird_reward; the old import path goes in the next release", DeprecationWarning, stacklevel=2)
