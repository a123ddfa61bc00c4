"""bird_like_agent: BIRD-Interact's c-interact agent protocol, written anew (not copied), with the
offline model of ``evalbench_tool_llm`` (protocol ``bird``).

What BIRD-Interact-ADK's ``system_agent`` does and this app does the same way:

* ``ask_user(question)`` POSTs ``{"task_id": state["task_id"], "question": ...}`` to
  ``http://127.0.0.1:$USER_SIM_PORT/ask`` and returns its ``answer``
  (``system_agent/tools.py::ask_user``);
* ``submit_sql(sql)`` POSTs ``{"task_id", "sql"}`` to ``http://127.0.0.1:$DB_ENV_PORT/submit``
  and returns its ``message``; a passed phase 1 with a follow-up POSTs ``/phase_transition`` to
  the user simulator (``system_agent/tools.py::submit_sql``);
* a failing request is the tool's text ``Error: <what>``, never an exception;
* ``after_tool_callback`` sets ``_submitted_this_phase`` after ``submit_sql``, and
  ``before_model_callback`` answers "SQL submitted. Awaiting result." while it is set
  (``system_agent/callbacks_cinteract.py``). BIRD's runtime resets the flag before each turn
  (``system_agent/adk_runtime.py::AdkRuntime.run_turn``); served by ``adk api_server`` nothing
  does, unless the client sends ``state_delta`` with the turn (``model_config.state_each_turn``).

Ports default to BIRD-Interact's (user simulator 6001, database environment 6002).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import httpx
from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.tools.base_tool import BaseTool
from google.adk.tools.tool_context import ToolContext
from google.genai import types

try:  # served by `adk api_server tests/adk_apps`: the agents directory is on sys.path
    from evalbench_tool_llm import ToolCallingLlm
except ImportError:  # imported as tests.adk_apps.bird_like_agent.agent
    from ..evalbench_tool_llm import ToolCallingLlm

SUBMITTED = "SQL submitted. Awaiting result."
SUBMITTED_FLAG = "_submitted_this_phase"


def _url(port_variable: str, default: int, path: str) -> str:
    return f"http://127.0.0.1:{os.environ.get(port_variable, default)}{path}"


def _post(port_variable: str, default: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with httpx.Client(timeout=60.0, trust_env=False) as client:
        response = client.post(_url(port_variable, default, path), json=body)
        response.raise_for_status()
        data = response.json()
    return data if isinstance(data, dict) else {}


def ask_user(question: str, tool_context: ToolContext) -> str:
    """Ask the user a clarification question about their query.

    Args:
        question: the clarification question.

    Returns:
        The user's answer.
    """
    try:
        data = _post("USER_SIM_PORT", 6001, "/ask", {"task_id": tool_context.state.get("task_id", ""), "question": question})
    except Exception as exc:  # noqa: BLE001 (BIRD's tools answer any failure as text)
        return f"Error: {exc}"
    return str(data.get("answer", "No response from user."))


def submit_sql(sql: str, tool_context: ToolContext) -> str:
    """Submit your final SQL query for evaluation.

    Args:
        sql: the final PostgreSQL query.

    Returns:
        The evaluation's message.
    """
    task_id = tool_context.state.get("task_id", "")
    try:
        data = _post("DB_ENV_PORT", 6002, "/submit", {"task_id": task_id, "sql": sql})
    except Exception as exc:  # noqa: BLE001
        return f"Error: {exc}"
    phase = data.get("phase_completed") if data.get("passed") else None
    if phase == 1 and data.get("has_follow_up"):
        # as BIRD's submit_sql: the user simulator moves to the follow-up; a failure is only logged there
        with contextlib.suppress(Exception):
            _post("USER_SIM_PORT", 6001, "/phase_transition", {"task_id": task_id})
    elif phase in (1, 2):
        tool_context.state["task_done"] = True
    return str(data.get("message", "")).replace("[exec_err_flg] ", "")


def _text(text: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def before_model(callback_context: CallbackContext, llm_request: LlmRequest) -> LlmResponse | None:
    """One submission per turn: after it, the turn ends without another model call."""
    if callback_context.state.get("task_done", False):
        return _text("Task completed.")
    if callback_context.state.get(SUBMITTED_FLAG, False):
        return _text(SUBMITTED)
    return None


def after_tool(tool: BaseTool, args: dict[str, Any], tool_context: ToolContext, tool_response: Any) -> Any:
    if tool.name == "submit_sql":
        tool_context.state[SUBMITTED_FLAG] = True
    return None


root_agent = LlmAgent(
    name="bird_like_agent",
    model=ToolCallingLlm(protocol="bird"),
    description="Offline test agent speaking BIRD-Interact's c-interact protocol.",
    # BIRD's instruction names its state ({db_name}, {db_schema}, ...); "?" keeps a missing one from failing
    instruction="You have a DB called {db_name?}.\n# DB Schema Info:\n{db_schema?}\n# External Knowledge:\n{external_kg?}\n"
                "You have at most {max_turn?} clarification turns. Use ask_user, then submit_sql.",
    tools=[ask_user, submit_sql],
    before_model_callback=before_model,
    after_tool_callback=after_tool,
)
