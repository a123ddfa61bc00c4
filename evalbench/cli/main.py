"""The ``evalbench`` command: a thin shell over the library. The parser is built from the command
table (:mod:`evalbench.cli.commands`); a command's module is imported only when that command is
parsed, so that ``evalbench --help`` stays instant. The exit codes are a contract:
:mod:`evalbench.cli.exit_codes`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from evalbench.cli.commands import COMMANDS, load
from evalbench.cli.exit_codes import EXIT_CANCELLED, EXIT_OK

EPILOG = """examples:
  evalbench run --config configs/quickstart.yaml
  evalbench run --config configs/quickstart.yaml --resume results/<run_id>
  evalbench run --config configs/quickstart.yaml --fail-under exec_match=60%
  evalbench validate --config configs/quickstart.yaml
  evalbench check --config configs/quickstart.yaml
  evalbench report results/<run_id>
  evalbench compare results/<run_a> results/<run_b>
  evalbench explain results/<run_id> <item_id>
  evalbench rescore results/<run_id> --set 'scorers={exec_match: {semantics: evalbench}}'
  evalbench runs results/
  evalbench view results/
  evalbench datasets --config configs/quickstart.yaml
  evalbench db --config configs/quickstart.yaml --json
"""


if TYPE_CHECKING:  # generic in typeshed only
    _Subcommands = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _Subcommands = argparse._SubParsersAction


class _LazyCommands(_Subcommands):
    """The subcommands of the table: a command's arguments are added (its module imported) only
    when the command line names it."""

    filled: frozenset[str] = frozenset()  # the commands whose arguments are added

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[object] | None, option_string: str | None = None) -> None:
        if isinstance(values, list) and values and values[0] in self.choices:  # else argparse's own error
            self.fill(str(values[0]))
        super().__call__(parser, namespace, values, option_string)

    def fill(self, name: str) -> argparse.ArgumentParser:
        """The parser of command ``name``, its arguments added by its module (once)."""
        parser: argparse.ArgumentParser = self.choices[name]
        if name not in self.filled:
            load(name).add_arguments(parser)
            self.filled |= {name}
        return parser


def command_parser(name: str) -> argparse.ArgumentParser:
    """The full parser of command ``name`` (for tests and docs: the command line fills it itself)."""
    commands = next(a for a in build_parser()._actions if isinstance(a, _LazyCommands))
    return commands.fill(name)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: one subparser per command of the table, empty until named."""
    from evalbench import __version__

    parser = argparse.ArgumentParser(
        prog="evalbench",
        description="Evaluate data agents in multi-turn conversations against real databases.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"evalbench {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", action=_LazyCommands)
    for entry in COMMANDS:
        commands.add_parser(entry.name, help=entry.help, formatter_class=argparse.RawDescriptionHelpFormatter)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from evalbench.core.terminal import escaping_excepthook, safe_console

    # Everything written to the terminal (output, logs, errors, usage, tracebacks) goes through one
    # filter that escapes control characters and scrubs secrets (evalbench/core/terminal.py).
    sys.excepthook = escaping_excepthook
    with safe_console():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.raw_argv = list(argv) if argv is not None else sys.argv[1:]  # what --workers passes on to its workers
    if args.command is None:
        parser.print_help()
        return EXIT_OK
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # psycopg reports a pipeline aborted by a failing agent query, which is an expected outcome
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    from evalbench.core.errors import EvalbenchError

    try:
        return load(args.command).run(args)
    except EvalbenchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return EXIT_CANCELLED
    except BrokenPipeError:  # `evalbench results schema | head`: the reader left, which is not an error of ours
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the exit's flush goes nowhere, quietly
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
