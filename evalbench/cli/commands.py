"""The command table: each command's name, its one-line help and the module that gives its
``add_arguments(parser)`` and ``run(args) -> int``.

Modules are named as strings and imported only when their command is parsed or run, so that
``evalbench --help`` imports none of them (tests/cli/test_command_table.py).
"""

from __future__ import annotations

import argparse
import importlib
from typing import NamedTuple, Protocol, cast


class Command(NamedTuple):
    name: str
    help: str
    module: str  # "evalbench.cli.<module>": its add_arguments and run


class CommandModule(Protocol):
    """What a command module gives."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


COMMANDS: tuple[Command, ...] = (
    Command("run", "run an evaluation", "evalbench.cli.run"),
    Command("validate", "check a dataset: run every golden SQL, check conditions and annotations",
            "evalbench.cli.validate"),
    Command("report", "regenerate a run's reports from its journal", "evalbench.cli.report"),
    Command("merge", "join the run directories of a run's shards (--shard i/n) into one", "evalbench.cli.merge"),
    Command("compare", "compare two runs item by item, with paired statistics", "evalbench.cli.compare"),
    Command("explain", "show one conversation and why it failed", "evalbench.cli.explain"),
    Command("runs", "list the runs in a folder: date, status, headline with its CI, agent, dataset, config",
            "evalbench.cli.runs"),
    Command("view", "write one index.html over every run in a folder, with an N-way comparison matrix",
            "evalbench.cli.view"),
    Command("check", "preflight: check a config's agent, virtual user, databases, gates and output directory",
            "evalbench.cli.check"),
    Command("rescore", "score a run again (other scorers or semantics) into a new run directory, without the agent",
            "evalbench.cli.rescore"),
    Command("datasets", "what a config's dataset holds: items by category, difficulty, ambiguity, phase; knowledge",
            "evalbench.cli.datasets"),
    Command("db", "the tables of a config's databases: row counts, columns and types, knowledge entries per table",
            "evalbench.cli.db"),
    Command("results", "what a run directory holds: `results schema [manifest|journal|summary]` prints its JSON Schema",
            "evalbench.cli.results"),
)


def command(name: str) -> Command:
    """The table's entry for ``name`` (a KeyError when there is none)."""
    return {c.name: c for c in COMMANDS}[name]


def load(name: str) -> CommandModule:
    """The module of command ``name``, imported now."""
    return cast(CommandModule, importlib.import_module(command(name).module))  # tests/cli/test_command_table.py checks it
