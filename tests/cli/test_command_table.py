"""The command table: every command gives add_arguments and run, builds its parser and prints its
help; ``evalbench --help`` imports no command module."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import os
import subprocess
import sys

import pytest

from evalbench.cli.commands import COMMANDS
from evalbench.cli.main import command_parser, main

NAMES = [c.name for c in COMMANDS]


def test_the_table_names_each_command_once() -> None:
    assert len(NAMES) == len(set(NAMES))
    assert all(c.module.startswith("evalbench.cli.") and c.help for c in COMMANDS)


@pytest.mark.parametrize("entry", COMMANDS, ids=NAMES)
def test_each_command_module_gives_add_arguments_and_run(entry) -> None:
    module = importlib.import_module(entry.module)
    assert callable(module.add_arguments) and callable(module.run)
    parser = command_parser(entry.name)
    assert isinstance(parser, argparse.ArgumentParser)
    assert parser.description and "example:" in (parser.epilog or "")


@pytest.mark.parametrize("name", NAMES)
def test_each_command_prints_its_help(name: str) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    assert out.getvalue().startswith(f"usage: evalbench {name}")


def test_top_level_help_imports_no_command_module() -> None:
    modules = sorted({c.module for c in COMMANDS})
    code = (
        "import sys, contextlib, io\n"
        "from evalbench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(sorted(set(sys.modules) & set({modules!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_top_level_help_lists_every_command() -> None:
    env = {**os.environ, "COLUMNS": "250"}  # one line per command
    out = subprocess.run([sys.executable, "-m", "evalbench", "--help"], capture_output=True, text=True, check=True, env=env)
    for entry in COMMANDS:
        assert f"    {entry.name} " in out.stdout and entry.help in out.stdout


def test_exported_members() -> None:
    import evalbench.cli as cli

    assert cli.__all__ == ["main"] and cli.main is main


def test_no_command_help_imports_a_heavy_module() -> None:
    heavy = ("sqlglot", "pandas", "google", "sqlalchemy", "psycopg", "pydantic", "httpx", "pgserver", "ray")
    code = (
        "import sys, contextlib, io\n"
        "from evalbench.cli import main\n"
        f"for name in {NAMES!r}:\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        try:\n"
        "            main([name, '--help'])\n"
        "        except SystemExit:\n"
        "            pass\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
