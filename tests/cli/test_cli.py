"""The command line: help is instant because heavy modules are imported lazily."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ("sqlglot", "pandas", "google", "sqlalchemy", "psycopg", "pydantic", "httpx", "pgserver")


def test_help_imports_no_heavy_module():
    code = (
        "import sys, contextlib, io\n"
        "from evalbench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_help_lists_commands_with_an_example():
    out = subprocess.run([sys.executable, "-m", "evalbench", "run", "--help"], capture_output=True, text=True, check=True)
    assert "--config" in out.stdout and "example:" in out.stdout


def test_no_command_prints_help():
    out = subprocess.run([sys.executable, "-m", "evalbench"], capture_output=True, text=True, check=True)
    assert "run" in out.stdout and "examples:" in out.stdout


def test_unreachable_database_records_every_item_and_exits_3(tmp_path, capsys):
    from evalbench.cli import main
    from evalbench.results import read_journal
    from tests.conftest import DEMO

    config = tmp_path / "run.yaml"
    config.write_text(
        f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n"
        "model_config: simulated:oracle\n"
        "database_configs:\n"
        "  - {database_name: greenleaf, url: 'postgresql://postgres:sekrit@127.0.0.1:1/postgres'}\n"
        f"reporting: {{csv: {{output_directory: {tmp_path}}}}}\n"
    )
    # --no-preflight: the run itself records the items of a database it cannot reach (preflight would stop before)
    assert main(["run", "--config", str(config), "--run-id", "r", "--no-progress", "--no-preflight"]) == 3
    records = list(read_journal(tmp_path / "r"))
    assert len(records) == 43 and {r["outcome"] for r in records} == {"db_error"}
    out = capsys.readouterr()
    assert "setup FAILED" in out.out
    assert "sekrit" not in out.out + out.err
    assert "sekrit" not in (tmp_path / "r" / "manifest.json").read_text()
