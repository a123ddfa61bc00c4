"""The four registries of evalbench, with their built-ins as ``"module:attr"`` (docs/extending.md).

They live here, beside the mechanism and apart from the packages that implement them, so that
the config schema checks agent, virtual-user, scorer and backend names without importing
``evalbench.agents``, ``evalbench.vuser``, ``evalbench.scoring`` or ``evalbench.backends``: a
built-in is imported only when a run asks for it. Each package's face re-exports its registry
with the factory type it defines (``evalbench.agents.AGENTS: Registry[AgentFactory]``). A new
built-in is one line here, naming its factory.
"""

from __future__ import annotations

from typing import Any

from evalbench.core.registry import Registry

# Registry[Any]: the factory types are defined by the packages above core, which narrow them.
AGENTS: Registry[Any] = Registry("agent", group="evalbench.agents", builtins={
    "simulated:oracle": "evalbench.agents.simulated:SimulatedAgent",
    "simulated:noisy": "evalbench.agents.simulated:SimulatedAgent",
    "adk": "evalbench.agents.adk:AdkAgent",
    "gemini": "evalbench.agents.gemini:build_gemini_agent",
    "openai_compat": "evalbench.agents.openai_compat:build_openai_compat_agent",
    "http": "evalbench.agents.http_agent:HttpAgent",
    "predictions": "evalbench.agents.predictions:PredictionsAgent",
    "replay": "evalbench.agents.replay:ReplayAgent",
})

VUSERS: Registry[Any] = Registry("virtual user", group="evalbench.vusers", builtins={
    "rules": "evalbench.vuser.rules:RulesVirtualUser",
    "llm": "evalbench.vuser.llm:build_llm_vuser",
    "replay": "evalbench.vuser.replay:ReplayVirtualUser",
})

SCORERS: Registry[Any] = Registry("scorer", group="evalbench.scorers", builtins={
    "exec_match": "evalbench.scoring.execution:ExecMatch",
    "executable": "evalbench.scoring.execution:Executable",
    "answer_match": "evalbench.scoring.answer_match:AnswerMatch",
    "llmrater": "evalbench.scoring.llmrater:LlmRater",
    "turn_count": "evalbench.scoring.metrics:TurnCount",
    "state_match": "evalbench.scoring.state_match:StateMatch",
    "test_cases": "evalbench.scoring.test_cases:TestCases",
    "set_match": "evalbench.scoring.result_match:SetMatch",
    "exact_match": "evalbench.scoring.result_match:ExactMatch",
    "sql_exact_match": "evalbench.scoring.sql_text:SqlExactMatch",
    "returned_sql": "evalbench.scoring.sql_text:ReturnedSql",
    "recall_match": "evalbench.scoring.result_match:RecallMatch",
    "regexp_matcher": "evalbench.scoring.sql_text:RegexpMatcher",
    "clarification": "evalbench.scoring.conversation_metrics:Clarification",
    "latency": "evalbench.scoring.conversation_metrics:Latency",
    "tokens": "evalbench.scoring.conversation_metrics:Tokens",
    "bird_interact_reward": "evalbench.scoring.bird_reward:BirdInteractReward",
})

# Each entry is a Backend class, called with no arguments once per process (backends.get_backend).
BACKENDS: Registry[Any] = Registry("backend", group="evalbench.backends", builtins={
    "postgres": "evalbench.backends.postgres.backend:PostgresBackend",
    "alloydb": "evalbench.backends.postgres.connectors:AlloyDBBackend",
    "cloudsql": "evalbench.backends.postgres.connectors:CloudSQLBackend",
    "sqlite": "evalbench.backends.sqlite.backend:SQLiteBackend",
    "duckdb": "evalbench.backends.duckdb.backend:DuckDBBackend",
    "mysql": "evalbench.backends.mysql.backend:MySQLBackend",
})
