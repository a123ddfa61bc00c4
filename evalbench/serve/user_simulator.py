"""The user-simulator endpoint, as BIRD-Interact's own ADK agent calls it (bird-bench/BIRD-Interact,
``BIRD-Interact-ADK/system_agent/tools.py``: ``ask_user`` posts ``{task_id, question}`` to the
user simulator's ``/ask`` and reads ``answer``; ``submit_sql`` posts ``{task_id, sql}`` to the
database environment's ``/submit``; after a passed phase 1 it posts ``/phase_transition``).

``task_id`` is the conversation's token. ``/ask`` is answered by the run's virtual user through the
conversation's port (a clarification like any other). ``/submit`` records the SQL as the phase's
answer and says nothing of its verdict: the harness judges it when the agent's turn ends (its
reply's SQL, if any, comes first). ``/phase_transition`` is acknowledged: the harness moves to
the follow-up itself.
"""

from __future__ import annotations

import json

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evalbench.serve.mcp_tools import Lookup
from evalbench.serve.port import ASK_USER, SUBMIT_SQL, ConversationPort

_MAX_BODY = 1 << 20
SUBMITTED = "Submitted. The harness judges your SQL when your turn ends."


async def _body(request: Request, lookup: Lookup) -> tuple[ConversationPort, dict[str, object]] | JSONResponse:
    raw = await request.body()
    if len(raw) > _MAX_BODY:
        return JSONResponse({"error": f"the body is over {_MAX_BODY} bytes"}, status_code=413)
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return JSONResponse({"error": "the body is not JSON"}, status_code=400)
    task_id = body.get("task_id") if isinstance(body, dict) else None
    port = lookup(task_id) if isinstance(task_id, str) and task_id else None
    if port is None:
        return JSONResponse({"error": "unknown task_id (or its conversation has ended)"}, status_code=404)
    return port, body


async def _called(request: Request, lookup: Lookup, tool: str, arg: str) -> dict[str, object] | JSONResponse:
    """The response of ``tool`` called with the body's ``arg`` through the task's port (a JSONResponse: no such task)."""
    found = await _body(request, lookup)
    if isinstance(found, JSONResponse):
        return found
    port, body = found
    return await anyio.to_thread.run_sync(port.call, tool, {arg: body.get(arg)})


def routes(lookup: Lookup) -> list[Route]:
    async def ask(request: Request) -> JSONResponse:
        response = await _called(request, lookup, ASK_USER, "question")
        if isinstance(response, JSONResponse):
            return response
        if "error" in response:
            return JSONResponse({"answer": f"(not answered: {response['error']})", "error": response["error"]})
        return JSONResponse({"answer": response["answer"]})

    async def submit(request: Request) -> JSONResponse:
        response = await _called(request, lookup, SUBMIT_SQL, "sql")
        if isinstance(response, JSONResponse):
            return response
        message = f"[not recorded] {response['error']}" if "error" in response else SUBMITTED
        return JSONResponse({"passed": False, "message": message, "reward": 0.0, "phase_completed": None,
                             "has_follow_up": False, "follow_up_query": None})

    async def phase_transition(request: Request) -> JSONResponse:
        found = await _body(request, lookup)
        return found if isinstance(found, JSONResponse) else JSONResponse({"status": "ok"})

    return [Route("/ask", ask, methods=["POST"]), Route("/submit", submit, methods=["POST"]),
            Route("/phase_transition", phase_transition, methods=["POST"])]
