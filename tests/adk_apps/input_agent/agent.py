"""input_agent: convention (b), clarifications through ADK's long-running ``adk_request_input``
tool, SQL in a fenced block of the final text (see ``evalbench_offline_llm`` for the rules)."""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.tools import request_input

try:  # served by `adk api_server tests/adk_apps`: the agents directory is on sys.path
    from evalbench_offline_llm import OfflineDataAgentLlm
except ImportError:  # imported as tests.adk_apps.input_agent.agent
    from ..evalbench_offline_llm import OfflineDataAgentLlm

root_agent = LlmAgent(
    name="input_agent",
    model=OfflineDataAgentLlm(convention="input"),
    description="Offline test data agent: asks through adk_request_input, answers with SQL text.",
    instruction="Answer questions about the Greenleaf database with SQL; ask when unsure.",
    tools=[request_input],
)
