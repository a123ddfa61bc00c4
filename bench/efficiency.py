"""Harness efficiency: the harness against the physical floor, in the same invocation.

For a workload (bench/workload.py) and N items, each repetition runs the harness once, then
replays its journal's work without the harness (bench/floor.py), alternating, so that machine
noise hits both alike. Efficiency = median harness conversations/s ÷ median floor
conversations/s. For the http workload the fakes (bench/fakes.py) count what they served: the
harness's and the floor's counts must agree, or the comparison is refused.
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import fakes
import machine
from floor import plan_from_journal, run_floor
from spread import Spread
from workload import Runners, run_harness, write_config, write_dataset, write_setup

SERVED = ("adk.create", "adk.run", "adk.delete", "gemini")  # what the floor replays (not the preflight's /list-apps)


def _served(adk: fakes.Fake | None, gemini: fakes.Fake | None) -> tuple[dict[str, int], float]:
    """What the fakes served since their reset, and the CPU seconds they used."""
    counts: dict[str, int] = {}
    cpu = 0.0
    for server in (adk, gemini):
        if server is None:
            continue
        stats = server.stats()
        cpu += stats.pop("cpu_s")
        if server.kind == "adk":
            counts |= {k: int(v) for k, v in stats.items() if k in SERVED}
        else:
            counts["gemini"] = int(sum(v for k, v in stats.items() if k.startswith("gemini.")))
    return counts, cpu


def _reset(*servers: fakes.Fake | None) -> None:
    for server in servers:
        if server is not None:
            server.reset()


def _repetition(workload: str, config: Path, dataset: Path, pgdata: Path, runners: Runners, rep: int,
                adk: fakes.Fake | None, gemini: fakes.Fake | None) -> dict[str, Any]:
    """One harness run, then its floor replay; what each did, checked to be the same work."""
    urls = {"adk_url": adk.url if adk else "", "gemini_url": gemini.url if gemini else ""}
    _reset(adk, gemini)
    ticks = machine.cpu_ticks()
    run = run_harness(config, pgdata, run_id=f"rep{rep}")
    machine_busy = machine.cores_busy(ticks, machine.cpu_ticks())  # the whole process, start-up included
    served_harness, fakes_cpu = _served(adk, gemini)
    plan = plan_from_journal(Path(run["run_dir"]), dataset, asdict(runners), http_agent=workload == "http")
    _reset(adk, gemini)
    replayed = run_floor(plan, pgdata, **urls)
    served_floor, fakes_floor_cpu = _served(adk, gemini)
    check = {"journal": plan.counts(), "replayed": replayed["counts"], "served_harness": served_harness,
             "served_floor": served_floor}
    _verify(check)
    return {"harness": run["conversations"] / run["elapsed_s"], "floor": replayed["conversations"] / replayed["elapsed_s"],
            "rate": run["rate"], "check": check,
            "cpu": {"harness": run["cpu_s"] / run["elapsed_s"], "harness_fakes": fakes_cpu / run["elapsed_s"],
                    "harness_machine": machine_busy, "floor": replayed["cpu_s"] / replayed["elapsed_s"],
                    "floor_fakes": fakes_floor_cpu / replayed["elapsed_s"]}}


def measure(workload: str, n: int, reps: int, pgdata: Path, *, runners: Runners | None = None) -> dict[str, Any]:
    """``reps`` interleaved pairs (harness run, floor replay) on ``n`` items of ``workload``."""
    runners = runners or Runners()
    with tempfile.TemporaryDirectory(prefix=f"evalbench-bench-{workload}-") as tmp, ExitStack() as stack:
        root = Path(tmp)
        dataset = root / "items.jsonl"
        write_dataset(dataset, n, single_turn=False)
        adk = gemini = None
        if workload == "http":
            adk = fakes.start("adk", dataset)
            stack.callback(adk.stop)
            gemini = fakes.start("gemini")
            stack.callback(gemini.stop)
        config = write_config(root, dataset, write_setup(root), workload=workload, runners=runners,
                              adk_url=adk.url if adk else "", gemini_url=gemini.url if gemini else "")
        reps_done = [_repetition(workload, config, dataset, pgdata, runners, rep, adk, gemini) for rep in range(reps)]
    h, f = Spread(tuple(r["harness"] for r in reps_done)), Spread(tuple(r["floor"] for r in reps_done))
    return {"workload": workload, "n": n, "reps": reps, "harness": h, "floor": f, "efficiency": h.median / f.median,
            "pass_rate": min(r["rate"] for r in reps_done), "counts": reps_done[-1]["check"], "runners": asdict(runners),
            "cpu": [r["cpu"] for r in reps_done]}


def _verify(check: dict[str, Any]) -> None:
    """The floor did exactly the work the harness did: same SQL count, same calls served."""
    journal, replayed = check["journal"], check["replayed"]
    if journal != replayed:
        raise SystemExit(f"the floor replayed {replayed}, the journal says {journal}")
    for name, count in check["served_harness"].items():
        if check["served_floor"].get(name) != count:
            raise SystemExit(f"the fakes served the harness {check['served_harness']} but the floor {check['served_floor']}")
        if journal.get(name) != count:
            raise SystemExit(f"the fakes served the harness {check['served_harness']}, its journal says {journal}")


HEADER = f"{'workload':>9} {'N':>6} {'harness conv/s':>20} {'floor conv/s':>20} {'efficiency':>11} {'pass':>7}"


def row(result: dict[str, Any]) -> str:
    return (f"{result['workload']:>9} {result['n']:>6} {result['harness'].show():>20} {result['floor'].show():>20} "
            f"{result['efficiency']:>10.1%} {result['pass_rate']:>7.1%}")


def work_line(result: dict[str, Any]) -> str:
    """Per conversation, what both did (from the last repetition)."""
    c, n = result["counts"]["journal"], result["n"]
    line = f"{result['workload']:>9}: per conversation {c['sql'] / n:.2f} SQL executions"
    if c["adk.run"]:
        line += (f", {(c['adk.create'] + c['adk.run'] + c['adk.delete']) / n:.2f} ADK calls ({c['adk.run'] / n:.2f} turns)"
                 f", {c['gemini'] / n:.2f} Gemini calls; the fakes served harness and floor alike")
    return line


def cpu_line(result: dict[str, Any]) -> str:
    """Cores kept busy (medians over the repetitions): is the harness waiting, or computing?"""
    def med(key: str) -> str:
        values = [c[key] for c in result["cpu"] if c[key] is not None]
        return f"{Spread(tuple(values)).median:.2f}" if values else "?"

    line = f"{result['workload']:>9}: cores busy — harness process {med('harness')}, whole machine {med('harness_machine')}"
    if result["workload"] == "http":
        line += f", fakes {med('harness_fakes')}; floor process {med('floor')}, fakes {med('floor_fakes')}"
    else:
        line += f"; floor process {med('floor')}"
    return line
