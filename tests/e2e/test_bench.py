"""`make bench` cannot rot: the http workload (the adk agent and the llm virtual user at the
benchmark's fake servers, bench/fakes.py) and its floor replay, on 20 items, once. No timing is
asserted: the table is printed, the oracle's answers pass, and the floor did exactly the work
the harness did — the SQL its journal records, and the HTTP calls the fakes counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
N = 20


def expected_work(n: int) -> dict[str, int]:
    """What n items of bench/workload.py's dataset make the outside world do: a third ambiguous
    (one clarification: one more agent turn, one encode and one decode call), a fifth with a
    follow-up (one more turn); each phase runs its golden SQL and the agent's SQL once."""
    ambiguous = len(range(0, n, 3))
    follow_ups = len(range(0, n, 5))
    return {"sql": 2 * (n + follow_ups), "adk.create": n, "adk.run": n + ambiguous + follow_ups, "adk.delete": n,
            "gemini": 2 * ambiguous}


def test_http_workload_and_its_floor_do_the_same_work(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = dict(os.environ, GEMINI_API_KEY="fake")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run_bench.py"), "efficiency", "--workload", "http", "--n", str(N), "--reps", "1",
         "--json", str(out)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("cpu ") for line in lines) and any(line.startswith("commit ") for line in lines)
    assert any("harness conv/s" in line and "floor conv/s" in line and "efficiency" in line for line in lines)
    [row] = [line.split() for line in lines if line.split()[:2] == ["http", str(N)]]
    assert row[-2].endswith("%") and row[-1].endswith("%")  # efficiency, pass rate

    [result] = json.loads(out.read_text())["efficiency"]
    assert result["workload"] == "http" and result["n"] == N
    assert result["pass_rate"] >= 0.95
    counts = result["counts"]
    assert counts["journal"] == expected_work(N)
    assert counts["replayed"] == counts["journal"]
    served = {k: v for k, v in counts["journal"].items() if k != "sql"}
    assert counts["served_harness"] == served and counts["served_floor"] == served
    assert result["harness"]["median"] > 0 and result["floor"]["median"] > 0
