"""gda_agent: convention (a), a GDA-style query tool (see ``evalbench_offline_llm`` for the rules).

The tool really runs the generated SQL on the PostgreSQL database whose libpq URL is in
``$EVALBENCH_TEST_AGENT_DB_URL`` (read at call time; a missing URL or a failing query shows up
as ``queryResult.queryExecutionError``, the SQL is still returned in ``generatedQuery``).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from google.adk.agents import LlmAgent

try:  # served by `adk api_server tests/adk_apps`: the agents directory is on sys.path
    from evalbench_offline_llm import GDA_TOOL, OfflineDataAgentLlm, parse_tool_question, resolve
except ImportError:  # imported as tests.adk_apps.gda_agent.agent
    from ..evalbench_offline_llm import GDA_TOOL, OfflineDataAgentLlm, parse_tool_question, resolve

MAX_ROWS = 100


def _run_sql(sql: str) -> dict[str, Any]:
    """Execute ``sql`` (read-only, 5 s timeout) and shape the rows like GDA's ExecutedQueryResult."""
    import psycopg

    url = os.environ.get("EVALBENCH_TEST_AGENT_DB_URL")
    if not url:
        return {"queryExecutionError": "EVALBENCH_TEST_AGENT_DB_URL is not set"}
    try:
        with psycopg.connect(url, connect_timeout=5, options="-c statement_timeout=5000") as conn:
            conn.read_only = True
            with conn.cursor() as cur:
                cur.execute(sql)
                columns = []
                for col in cur.description or []:
                    info = conn.adapters.types.get(col.type_code)
                    columns.append({"name": col.name, "type": info.name if info else str(col.type_code)})
                rows = cur.fetchmany(MAX_ROWS + 1)
            conn.rollback()
    except psycopg.Error as exc:
        return {"queryExecutionError": str(exc).strip()}
    partial = len(rows) > MAX_ROWS
    rows = rows[:MAX_ROWS]
    return {
        "columns": columns,
        "rows": [{"values": [{"value": None if v is None else str(v)} for v in row]} for row in rows],
        "totalRowCount": str(len(rows)),
        "partialResult": partial,
    }


def _answer(result: dict[str, Any]) -> str:
    if "queryExecutionError" in result:
        return "I could not run the query."
    values = [row["values"][0]["value"] for row in result["rows"] if row["values"]]
    if len(result["columns"]) == 1 and len(values) <= 10:
        return f"The answer is: {', '.join(str(v) for v in values)}." if values else "The query returned no rows."
    return f"The query returned {result['totalRowCount']} rows."


async def cloud_gda_query_tool_alloydb(question: str) -> dict[str, str]:
    """Answer a natural-language question about the Greenleaf database with SQL.

    Args:
      question: the user's question, self-contained (lines "Clarification: ..." and
        "Earlier question: ..." may follow the first line).

    Returns:
      {"result": JSON string} with generatedQuery, naturalLanguageAnswer and queryResult, or
      with disambiguationQuestion when the question is ambiguous.
    """
    text, clarification, earlier = parse_tool_question(question)
    decision = resolve(text, earlier, clarification)
    if decision.kind == "clarify":
        payload: dict[str, Any] = {"disambiguationQuestion": [decision.message]}
    elif decision.kind == "text":
        payload = {"naturalLanguageAnswer": decision.message}
    else:
        result = await asyncio.to_thread(_run_sql, decision.sql)
        payload = {"generatedQuery": decision.sql, "naturalLanguageAnswer": _answer(result), "queryResult": result}
    return {"result": json.dumps(payload)}


assert cloud_gda_query_tool_alloydb.__name__ == GDA_TOOL

root_agent = LlmAgent(
    name="gda_agent",
    model=OfflineDataAgentLlm(convention="gda"),
    description="Offline test data agent: answers via a GDA-style query tool.",
    instruction="Answer questions about the Greenleaf database with the query tool.",
    tools=[cloud_gda_query_tool_alloydb],
)
