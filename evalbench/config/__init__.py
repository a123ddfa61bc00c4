"""The configuration schema and its loader: pydantic models for the run, its databases, agents and
virtual users, and :func:`load_run_config`. No run logic lives here, and no adapter is imported:
plugin names are checked against the registries' lists of names."""

from evalbench.config.agents import (
    AdkAgentConfig,
    AgentConfig,
    GeminiAgentConfig,
    OpenAICompatAgentConfig,
    RetryConfig,
    SimulatedAgentConfig,
)
from evalbench.config.databases import CONNECTOR_BACKENDS, DatabaseConfig, is_instance_name
from evalbench.config.load import load_run_config
from evalbench.config.run import (
    CsvReportingConfig,
    EmbeddedConfig,
    ExecutionConfig,
    ReportingConfig,
    RunConfig,
    RunnersConfig,
    SubsetConfig,
)
from evalbench.config.vusers import LlmVUserConfig, ReplayVUserConfig, RulesVUserConfig, VUserConfig

__all__ = [
    "CONNECTOR_BACKENDS",
    "AdkAgentConfig",
    "AgentConfig",
    "CsvReportingConfig",
    "DatabaseConfig",
    "EmbeddedConfig",
    "ExecutionConfig",
    "GeminiAgentConfig",
    "LlmVUserConfig",
    "OpenAICompatAgentConfig",
    "ReplayVUserConfig",
    "ReportingConfig",
    "RetryConfig",
    "RulesVUserConfig",
    "RunConfig",
    "RunnersConfig",
    "SimulatedAgentConfig",
    "SubsetConfig",
    "VUserConfig",
    "is_instance_name",
    "load_run_config",
]
