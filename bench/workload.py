"""The benchmark's synthetic dataset, its run configs, and running the harness on them.

One database ``benchdb`` with one table; N BIRD-Interact items whose golden SQL differs per item
(nothing is cached across items). A third of the items are ambiguous (one critical ambiguity:
one clarification round), a fifth have a follow-up question. Two workloads run on it:

- ``instant``: the in-process ``simulated:oracle`` agent and the ``rules`` virtual user;
- ``http``: the ``adk`` agent over HTTP at the fake ADK server and the ``llm`` virtual user
  through google-genai at the fake Gemini server (bench/fakes.py), as a real evaluation talks
  to its agent and its user model.

Every harness run happens in a child process, so its peak RSS and its CPU are its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROWS = 200
DATABASE = "benchdb"
APP = "benchagent"  # the fake ADK server's app (bench/fakes.py)


def write_setup(root: Path) -> Path:
    """A tiny database ``benchdb`` with one table of ROWS rows."""
    setup = root / "setup"
    (setup / DATABASE / "postgres").mkdir(parents=True)
    (setup / DATABASE / "data").mkdir(parents=True)
    (setup / DATABASE / "postgres" / "setup.sql").write_text(
        "CREATE TABLE readings (id integer PRIMARY KEY, station text, value numeric(8,2), taken date);\n"
    )
    with (setup / DATABASE / "data" / "readings.csv").open("w") as handle:
        for i in range(ROWS):
            handle.write(f"{i},'station_{i % 7}',{(i * 37) % 1000 / 10:.2f},'2025-01-{1 + i % 28:02d}'\n")
    return setup


def write_dataset(path: Path, n: int, *, single_turn: bool) -> None:
    """N BIRD-Interact items; each opening question is unique (the fake ADK server finds the item
    by it) and each golden SQL differs."""
    with path.open("w") as handle:
        for i in range(n):
            station = f"station_{i % 7}"
            sql = f"SELECT id, value FROM readings WHERE station = '{station}' AND id > {i % 150} ORDER BY id"
            item: dict[str, Any] = {
                "instance_id": f"bench_{i}",
                "selected_database": DATABASE,
                "query": f"Request {i}: list id and value of readings from {station} with id above {i % 150}, by id.",
                "amb_user_query": f"Request {i}: list readings from the station with id above {i % 150}.",
                "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
                "knowledge_ambiguity": [],
                "sol_sql": [sql],
                "conditions": {"decimal": 2, "distinct": False, "order": True},
                "category": "Query",
                "difficulty_tier": "Simple",
            }
            if not single_turn and i % 3 == 0:
                item["user_query_ambiguity"]["critical_ambiguity"] = [
                    {"term": "the station", "sql_snippet": f"station = '{station}'", "is_mask": True, "type": "semantic_ambiguity"}
                ]
            if not single_turn and i % 5 == 0:
                item["follow_up"] = {"query": "Now only the count.", "sol_sql": [f"SELECT count(*) FROM readings WHERE station = '{station}'"],
                                     "conditions": {"decimal": -1, "distinct": False, "order": False}, "category": "Query"}
            handle.write(json.dumps(item) + "\n")


@dataclass(frozen=True)
class Runners:
    """The stage pools' sizes: the floor replays at the same concurrency."""

    generate: int = 8  # sqlgen_runners: agent calls in flight
    vuser: int = 2  # vuser_runners: virtual-user answers in flight
    execute: int = 4  # sqlexec_runners: SQL executions in flight (and the sandbox pool)


def write_config(root: Path, dataset: Path, setup: Path, *, latency: float = 0.0, concurrency: int = 8, in_flight: int = 64,
                 workload: str = "instant", adk_url: str = "", gemini_url: str = "", runners: Runners | None = None) -> Path:
    """The run config of a workload (``concurrency``: the generate runners, unless ``runners``)."""
    runners = runners or Runners(generate=concurrency)
    if workload == "instant":
        agent, vuser = f"{{agent: simulated:oracle, latency_s: {latency}}}", "rules"
    elif workload == "http":
        agent = f"{{agent: adk, base_url: '{adk_url}', app_name: {APP}}}"
        vuser = f"{{vuser: llm, model: gemini-2.5-flash, base_url: '{gemini_url}'}}"
    else:
        raise ValueError(f"unknown workload {workload!r}")
    config = root / f"bench-{workload}.yaml"
    config.write_text(
        f"""dataset_config: {dataset}
setup_directory: {setup}
model_config: {agent}
vuser_model_config: {vuser}
scorers: {{exec_match: {{}}, executable: {{}}, turn_count: {{}}}}
runners: {{promptgen_runners: 1, sqlgen_runners: {runners.generate}, vuser_runners: {runners.vuser}, sqlexec_runners: {runners.execute}, scoring_runners: 1}}
max_in_flight: {in_flight}
seed: 1
reporting: {{csv: {{output_directory: {root / 'results'}}}}}
"""
    )
    return config


CHILD = """
import json, resource, sys, time
from evalbench.config import load_run_config
from evalbench.run import run
t, cpu = time.perf_counter(), time.process_time()
result = run(load_run_config(sys.argv[1], run_id=sys.argv[2]), progress=False)
elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
s = result.summary
print(json.dumps({"elapsed_s": elapsed, "cpu_s": cpu, "conversations": s["total_items"], "agent_calls": s["conversation"]["agent_calls"],
                  "outcomes": s["outcomes"], "rate": s["scorers"]["exec_match"]["main"]["rate"], "run_dir": str(result.run_dir),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def child_env(pgdata: Path) -> dict[str, str]:
    # GEMINI_API_KEY: the llm virtual user needs a key even for the fake server
    return dict(os.environ, EVALBENCH_PGDATA=str(pgdata), GEMINI_API_KEY=os.environ.get("GEMINI_API_KEY", "fake"))


def run_harness(config: Path, pgdata: Path, run_id: str = "bench") -> dict:
    """One ``evalbench.run()`` in a fresh process: ``elapsed_s`` is the run alone (``cpu_s`` its CPU
    time, all threads), ``wall_s`` the whole process (imports, starting the embedded server,
    provisioning) to exit."""
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, str(config), run_id], capture_output=True, text=True,
                         env=child_env(pgdata), check=False)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"benchmark run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"wall_s": wall}


def run_cli(config: Path, pgdata: Path, *, workers: int, run_id: str) -> float:
    """``evalbench run --workers N`` as a user runs it; the process's wall time."""
    started = time.perf_counter()
    # `python -m evalbench`, not the console script: the same evalbench as the other runs import
    out = subprocess.run([sys.executable, "-m", "evalbench", "run", "--config", str(config), "--run-id", run_id, "--workers", str(workers),
                          "--no-progress"], capture_output=True, text=True, env=child_env(pgdata), check=False)
    if out.returncode != 0:
        raise SystemExit(f"evalbench run --workers {workers} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return time.perf_counter() - started
