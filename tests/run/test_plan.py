"""The run plan is resolved once: only config/, run/plan.py and the command line see the whole run
config, a plain `evalbench run` scans its dataset once, and the agent and virtual user it probes
in preflight are the ones it runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.config import load_run_config
from evalbench.dataset import loader
from evalbench.run import parts as run_parts
from evalbench.run.plan import RunPlan

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "evalbench"
SQLITE = ROOT / "configs" / "quickstart_sqlite.yaml"
# who may read the whole run config: the schema, the plan, the command line, and the library entry
# point evalbench.run(config), which resolves the plan and hands it on
ALLOWED = ("config/", "cli/", "run/plan.py", "run/__init__.py")


def names_run_config(source: str) -> bool:
    """Whether Python ``source`` imports RunConfig or reaches it through a module (``config.RunConfig``)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "RunConfig" for alias in node.names):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "RunConfig":
            return True
    return False


def test_the_detector_finds_each_way_of_naming_the_run_config() -> None:
    assert names_run_config("from evalbench.config import RunConfig")
    assert names_run_config("if TYPE_CHECKING:\n    from evalbench.config.run import RunConfig as C")
    assert names_run_config("from evalbench import config\nx: config.RunConfig")
    assert not names_run_config("from evalbench.run.plan import RunPlan")


def test_only_the_plan_the_schema_and_the_command_line_see_the_whole_run_config() -> None:
    offenders = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                       if not str(path.relative_to(PACKAGE)).startswith(ALLOWED) and names_run_config(path.read_text()))
    assert offenders == []


def test_the_plan_is_frozen_and_made_of_parts() -> None:
    plan = RunPlan.resolve(load_run_config(SQLITE))
    with pytest.raises(AttributeError):
        plan.items = plan.items  # type: ignore[misc]  # frozen: assigning must fail
    assert plan.items.dialects == ("sqlite",) and plan.conversation.patience == 3 and plan.identity.seed == 42
    part = plan.databases.for_group("sqlite", "greenleaf")
    assert part.limits.statement_timeout_s == 10 and part.limits.max_rows == 10000 and part.limits.pool_size == 4
    snapshot = plan.identity.snapshot()
    snapshot["seed"] = 7  # a copy: the plan's own record does not change
    assert plan.identity.snapshot()["seed"] == 42


def test_a_plain_run_scans_its_dataset_once_and_builds_its_parts_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scans: list[Path] = []
    reads: list[Path] = []
    built: dict[str, int] = {"agent": 0, "vuser": 0}
    scan, read = loader.Dataset.scan, loader.iter_jsonl

    def counted_scan(self: loader.Dataset) -> loader.DatasetScan:
        scans.append(self.path)
        return scan(self)

    def counted_read(path: Path) -> object:
        reads.append(Path(path))
        return read(path)

    def counting(name: str, build: object) -> object:
        def wrapper(*args: object) -> object:
            built[name] += 1
            return build(*args)  # type: ignore[operator]  # the real builder, counted
        return wrapper

    monkeypatch.setattr(loader.Dataset, "scan", counted_scan)
    monkeypatch.setattr(loader, "iter_jsonl", counted_read)
    monkeypatch.setattr(run_parts, "build_agent", counting("agent", run_parts.build_agent))
    monkeypatch.setattr(run_parts, "build_vuser", counting("vuser", run_parts.build_vuser))
    code = main(["run", "--config", str(SQLITE), "--output-dir", str(tmp_path), "--run-id", "once", "--no-progress"])
    assert code in (0, 1)  # a verdict (the noisy agent fails some items), not an error
    assert (tmp_path / "once" / "summary.json").is_file()
    assert len(scans) == 1  # preflight, worker sizing and the run share the one scan
    groups = 1  # sqlite/greenleaf: its items are streamed once more by the run
    assert len(reads) == len(scans) + groups
    assert built == {"agent": 1, "vuser": 1}  # preflight probed the parts the run used
