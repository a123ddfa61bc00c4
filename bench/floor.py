"""The physical floor of a harness run: the same work without the harness.

From a run's journal, :func:`plan_from_journal` takes what each conversation made the outside
world do:

- every SQL execution, golden and predicted (the golden script's statements, the agent's SQL,
  the cleaned SQL compared under BIRD-Interact's semantics, each debugging attempt's SQL);
- every agent HTTP round trip: one ADK session created per session the record says it opened,
  one ``POST /run`` per agent turn (with the turn's user text), one ``DELETE`` per session;
- every model call of the virtual user (the ``calls`` its audit lists: encode, decode), with
  a prompt of the same shape (the default templates, the item's ambiguity lines, the agent's
  question, the action).

:func:`replay` then does that work in a fresh process (``python bench/floor.py PLAN``) as
plainly as it can be done: a psycopg connection per thread, ``execute`` + ``fetchall`` in
autocommit, at the run's ``sqlexec_runners``; a keep-alive httpx client per thread for the ADK
calls, at ``sqlgen_runners``, and for the Gemini calls, at ``vuser_runners``; the three pools at
once. Floor conversations/s = conversations / wall time of the replay. What the harness adds —
the state machine, sandboxing (read-only role, transaction, reset), comparison, scoring, the
journal, reports, SDKs — is what the efficiency ratio measures. The replay ignores the order
between a conversation's steps (the harness overlaps conversations, so only the totals bind).
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections import Counter, deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP = "benchagent"  # the fake ADK server's app (bench/fakes.py)


@dataclass
class Plan:
    conversations: int
    database: str
    sql: list[str] = field(default_factory=list)  # one entry per cursor.execute
    sessions: list[list[str]] = field(default_factory=list)  # per ADK session: the user texts of its turns
    model_calls: list[str] = field(default_factory=list)  # per virtual-user model call: its prompt
    runners: dict[str, int] = field(default_factory=dict)  # execute, generate, vuser

    def counts(self) -> dict[str, int]:
        """What the replay does, in the fakes' /stats names (bench/fakes.py)."""
        return {"sql": len(self.sql), "adk.create": len(self.sessions), "adk.run": sum(map(len, self.sessions)),
                "adk.delete": len(self.sessions), "gemini": len(self.model_calls)}


# --------------------------------------------------------------------------- from the journal


def _phase_sql(phase: dict[str, Any]) -> list[str]:
    """The SQL texts a phase executed, one per statement sent."""
    if phase.get("golden_run_sql"):
        runs = phase["golden_run_sql"]
    elif phase.get("golden_is_script"):
        runs = [phase["golden_sql"]]
    else:
        runs = [[sql] for sql in phase["golden_sql"]]
    out = [sql for run in runs[:len(phase.get("golden") or [])] for sql in run]
    out += [attempt["sql"] for attempt in phase.get("attempts") or [] if attempt.get("sql")]
    if phase.get("sql") and phase.get("generated") is not None:
        out.append(phase["sql"])
    if phase.get("compared_sql") and phase.get("compared") is not None:
        out.append(phase["compared_sql"])
    return out


def _template(name: str) -> str:
    return (ROOT / "prompts" / name).read_text(encoding="utf-8")


def _prompts(record: dict[str, Any], item: Any, encode: str, decode: str) -> list[str]:
    """A prompt of the right step for each model call of the record's virtual-user turns."""
    terms = "\n".join(f'- "{a.term}" -> {a.sql_snippet} ({a.type or a.kind})' for a in item.ambiguities if a.kind != "non_critical")
    out = []
    for turn in record["turns"]:
        vuser = turn.get("vuser") or {}
        question = (turn.get("reply") or {}).get("text") or ""
        for call in (vuser.get("audit") or {}).get("calls") or []:
            if call["step"] == "encode":
                out.append(encode.replace("{question}", question).replace("{ambiguities}", terms or "(none)")
                           .replace("{golden_clauses}", "- " + item.golden_sql[0]))
            else:
                out.append(decode.replace("{action}", vuser.get("action") or "").replace("{question}", question)
                           .replace("{clear_query}", item.question).replace("{knowledge}", ""))
    return out


def plan_from_journal(run_dir: Path, dataset: Path, runners: dict[str, int], *, http_agent: bool) -> Plan:
    """The plan of the run in ``run_dir`` (``http_agent``: the agent is the ADK server, whose
    sessions and turns are HTTP calls; otherwise an in-process agent, which costs no I/O)."""
    from evalbench.dataset import load_items
    from evalbench.results import read_journal

    items = {item.id: item for item in load_items(dataset)[0]}
    encode, decode = _template("vuser_encode.txt"), _template("vuser_decode.txt")
    plan = Plan(conversations=0, database="", runners=runners)
    for record in read_journal(run_dir):
        plan.conversations += 1
        plan.database = record["database"]
        for phase in record["phases"]:
            plan.sql += _phase_sql(phase)
        texts = [turn["user_text"] for turn in record["turns"] if turn.get("reply") is not None]
        if http_agent:
            plan.sessions += _split_sessions(texts, record["sessions_opened"])
        plan.model_calls += _prompts(record, items[record["item_id"]], encode, decode)
    return plan


def _split_sessions(texts: list[str], sessions: int) -> list[list[str]]:
    """Sticky sessions: all turns in the first session (any further one is opened empty)."""
    if sessions <= 0:
        return []
    return [texts] + [[] for _ in range(sessions - 1)]


# --------------------------------------------------------------------------- the replay


def _pool(count: int, work: deque[Any], setup: Any, do: Any, done: Counter[str], errors: list[str]) -> list[Any]:
    """``count`` workers, each with its own ``setup()`` resource (a connection, a client), doing
    ``do(resource, unit)`` (which returns what it did, as counts) until ``work`` is empty; the
    counts are added to ``done``. Each worker is a function to run once the clock starts."""
    lock = threading.Lock()

    def worker(resource: Any) -> None:
        mine: Counter[str] = Counter()
        try:
            while True:
                try:
                    unit = work.popleft()
                except IndexError:
                    break
                mine.update(do(resource, unit))
        except Exception as exc:  # noqa: BLE001 (reported, and the floor is then invalid)
            errors.append(f"{type(exc).__name__}: {exc}")
        with lock:
            done.update(mine)

    return [functools.partial(worker, setup()) for _ in range(count if work else 0)]


def replay(plan: Plan, *, pg_url: str, adk_url: str = "", gemini_url: str = "", model: str = "gemini-2.5-flash") -> dict[str, Any]:
    """Do the plan's work with plain clients; returns elapsed_s, counts and errors."""
    import httpx
    import psycopg

    errors: list[str] = []
    done: Counter[str] = Counter()

    def sql(conn: Any, text: str) -> dict[str, int]:
        cur = conn.execute(text)
        if cur.description is not None:
            cur.fetchall()
        return {"sql": 1}

    def session(client: Any, texts: list[str]) -> dict[str, int]:
        made = client.post(f"/apps/{APP}/users/floor/sessions", json={})
        made.raise_for_status()
        session_id = made.json()["id"]
        for text in texts:
            body = {"appName": APP, "userId": "floor", "sessionId": session_id, "newMessage": {"role": "user", "parts": [{"text": text}]}}
            client.post("/run", json=body).raise_for_status()
        client.delete(f"/apps/{APP}/users/floor/sessions/{session_id}").raise_for_status()
        return {"adk.create": 1, "adk.run": len(texts), "adk.delete": 1}

    def model_call(client: Any, prompt: str) -> dict[str, int]:
        body = {"contents": [{"role": "user", "parts": [{"text": prompt}]}], "generationConfig": {"temperature": 0.0, "seed": 1}}
        reply = client.post(f"/v1beta/models/{model}:generateContent", json=body, headers={"x-goog-api-key": "fake"})
        reply.raise_for_status()
        reply.json()
        return {"gemini": 1}

    runners = plan.runners
    # connections and clients are opened before the clock starts: the floor is the work alone
    workers = (
        _pool(runners["execute"], deque(plan.sql), lambda: psycopg.connect(pg_url, autocommit=True), sql, done, errors)
        + _pool(runners["generate"], deque(plan.sessions), lambda: httpx.Client(base_url=adk_url, timeout=60), session, done, errors)
        + _pool(runners["vuser"], deque(plan.model_calls), lambda: httpx.Client(base_url=gemini_url, timeout=60), model_call, done,
                errors)
    )
    threads = [threading.Thread(target=worker) for worker in workers]
    started, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"elapsed_s": elapsed, "cpu_s": cpu, "conversations": plan.conversations, "counts": {key: done[key] for key in plan.counts()}, "errors": errors[:5]}



def run_floor(plan: Plan, pgdata: Path, **urls: str) -> dict[str, Any]:
    """:func:`replay` in a fresh process (its own interpreter, like the harness run)."""
    import os
    import subprocess
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"plan": asdict(plan), "urls": urls}, handle)
    try:
        out = subprocess.run([sys.executable, __file__, handle.name], capture_output=True, text=True,
                             env=dict(os.environ, EVALBENCH_PGDATA=str(pgdata)), check=False)
    finally:
        os.unlink(handle.name)
    if out.returncode != 0:
        raise SystemExit(f"the floor replay failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["errors"]:
        raise SystemExit(f"the floor replay failed: {result['errors']}")
    return result


def main() -> None:
    from evalbench.backends.postgres.embedded import embedded_url

    spec = json.loads(Path(sys.argv[1]).read_text())
    plan = Plan(**spec["plan"])
    pg_url = embedded_url(None, plan.database)  # the same embedded server (EVALBENCH_PGDATA), started if need be
    print(json.dumps(replay(plan, pg_url=pg_url, **spec["urls"])))


if __name__ == "__main__":
    main()
