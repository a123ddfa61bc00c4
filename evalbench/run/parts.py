"""What every conversation of a run shares, built once: the agent, the virtual user, the scoring
plan and its scorers, and the catalogs through which agents see the provisioned databases.

Preflight probes these very parts and the run then uses them, so the agent and the virtual user
are built once per run. Each part is built on first use, inside this process's share of every
rate and concurrency limit (a shard of a split run takes 1/n of each). A part that cannot be
built is a ConfigError naming the config file.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

from evalbench.agents import AgentContext, build_agent
from evalbench.agents.tools import ToolKit
from evalbench.core.errors import ConfigError
from evalbench.core.ratelimit import split_between
from evalbench.run.catalogs import QueryCatalog, SchemaCatalog
from evalbench.run.items import Items
from evalbench.run.plan import RunPlan
from evalbench.run.stages import Parts, StageWork
from evalbench.scoring.validity import GoldenCheck
from evalbench.vuser import build_vuser

if TYPE_CHECKING:
    from evalbench.agents import Agent
    from evalbench.backends.base import Sandbox
    from evalbench.scoring import Scorer
    from evalbench.scoring.plan import ScoringPlan
    from evalbench.serve.server import Served
    from evalbench.vuser import VirtualUser

T = TypeVar("T")


class RunParts:
    """The parts of one run (see the module docstring). Close it (or use it as a context manager)
    to close the clients the agent, the virtual user and the judges hold."""

    def __init__(self, plan: RunPlan, items: Items) -> None:
        self.plan, self.items = plan, items
        self.schemas, self.queries = SchemaCatalog(), QueryCatalog()
        self._closed = False
        # preflight probes the agent and the virtual user from two threads: one build at a time, so
        # that each part is built once and the process-wide limit share is set and restored in order
        self._building = threading.RLock()

    def _build(self, make: Callable[[], T]) -> T:
        """``make()`` within this process's share of the limits, its problems as ConfigErrors naming the file."""
        where = self.plan.identity.where
        try:
            with self._building, split_between(self.plan.concurrency.shares):
                return make()
        except (KeyError, ValueError) as exc:
            raise ConfigError(str(exc), file=where) from None
        except ConfigError as exc:
            if exc.file is None and where is not None:  # built from a mapping: name the file it came from
                raise ConfigError(exc.message, file=where, line=exc.line, key=exc.key) from None
            raise

    @cached_property
    def scoring(self) -> ScoringPlan:
        """The scoring plan for the dataset's format (the default semantics follow it)."""
        return self._build(lambda: self.plan.scoring.plan(self.items.found.format))

    @cached_property
    def scorers(self) -> list[Scorer]:
        return self._build(self.scoring.build)

    @cached_property
    def check(self) -> GoldenCheck:
        return GoldenCheck.of_plan(self.scoring.scorers, self.scoring.rules, follow_up=self.plan.conversation.follow_up)

    @cached_property
    def context(self) -> AgentContext:
        """What the agent, and the tools served to it, see of the run's databases."""
        items, queries = self.items, self.queries
        return AgentContext(seed=self.plan.identity.seed, schema=self.schemas, knowledge=items.knowledge, query=queries,
                            execute=queries.execute, tables=queries.tables, column_meanings=items.column_meanings,
                            schema_file=items.schema_files)

    @cached_property
    def agent(self) -> Agent:
        return self._build(lambda: build_agent(self.plan.agent, self.context))

    @cached_property
    def served(self) -> Served | None:
        """The run's server for the agent under test (``serve:``), listening (None without it)."""
        config = self.plan.serve
        if config is None:
            return None
        from evalbench.serve.server import Served  # uvicorn and mcp: loaded only by a run that serves

        tools = [t for t in config.tools if t != "ask_user"]
        served = Served(config, ToolKit(tools, config.tool_limits, self.context))
        self._build(served.start)
        return served

    @cached_property
    def vuser(self) -> VirtualUser:
        return self._build(lambda: build_vuser(self.plan.vuser, self.plan.identity.seed, self.items.knowledge))

    def build(self) -> None:
        """Build every part now: a problem stops the run before its run directory is made."""
        _ = self.scorers, self.check, self.agent, self.vuser, self.served

    def work(self, sandbox: Sandbox | None) -> StageWork:
        scoring = self.scoring
        return StageWork(Parts(self.agent, self.vuser, sandbox, self.scorers, scoring.rules, scoring.primary,  # type: ignore[arg-type]  # a group whose database could not be set up has no sandbox: its conversations only record db_error
                               self.check, self.served))

    def close(self) -> None:
        """Close what was built (the clients of the agent, an LLM virtual user, the llmrater)."""
        if self._closed:
            return
        self._closed = True
        built = self.__dict__
        if "agent" in built:
            built["agent"].close()
        if built.get("served") is not None:
            built["served"].stop()
        for closable in (built.get("vuser"), *built.get("scorers", ())):
            close = getattr(closable, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> RunParts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

