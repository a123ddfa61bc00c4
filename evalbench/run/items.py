"""The run's items, read once: the dataset scanned in one pass (groups, counts, record errors),
the subset chosen from that scan, and the knowledge base.

Preflight, worker sizing, the run itself, ``evalbench datasets`` and ``evalbench db`` share one
:class:`Items`: the dataset file is scanned once per command. Each (dialect, database) group then
streams its own items (:meth:`evalbench.dataset.Dataset.items`), so memory stays flat in the
number of items.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import cached_property

from evalbench.core.errors import ConfigError, DatasetError
from evalbench.dataset import Dataset, DatasetScan
from evalbench.dataset.column_meanings import ColumnMeanings, load_column_meanings
from evalbench.dataset.knowledge import Knowledge, load_knowledge
from evalbench.dataset.loader import Group
from evalbench.dataset.schema_files import SchemaFiles
from evalbench.dataset.subset import choose
from evalbench.run.plan import ItemsSpec

log = logging.getLogger(__name__)

ERRORS_LOGGED = 20  # record errors written to the log (all are listed in summary.json)


class Items:
    """The items of one run (see the module docstring); each part is read on first use."""

    def __init__(self, spec: ItemsSpec) -> None:
        self.spec = spec

    @cached_property
    def dataset(self) -> Dataset:
        return self.spec.dataset()

    @cached_property
    def found(self) -> DatasetScan:
        """The one scan of the dataset file: every group, record error and filtered-out item."""
        return self.dataset.scan()

    @cached_property
    def _chosen(self) -> tuple[DatasetScan, dict[str, object] | None]:
        found, subset = self.found, self.spec.subset
        if subset is None or found.total == 0:
            return found, None
        chosen = choose(self.dataset, subset, found.total, where=self.spec.where, groups=found.groups)
        self.dataset.only = chosen.keys
        return replace(found, groups=chosen.groups), chosen.describe(subset)

    @property
    def scan(self) -> DatasetScan:
        """The scan of the items the run keeps (its subset's groups)."""
        return self._chosen[0]

    @property
    def subset(self) -> dict[str, object] | None:
        """What the subset chose, as the manifest records it (None: every item)."""
        return self._chosen[1]

    @cached_property
    def knowledge(self) -> Knowledge:
        return load_knowledge(self.spec.knowledge_path)

    @cached_property
    def column_meanings(self) -> ColumnMeanings:
        return load_column_meanings(self.spec.knowledge_path)

    @cached_property
    def schema_files(self) -> SchemaFiles:
        """The databases' ``<database>_schema.txt``, read when a session state names ``{schema_file}``."""
        return SchemaFiles(self.spec.knowledge_path)

    def groups(self) -> dict[Group, int]:
        """The (dialect, database) groups of the run and their item counts, without a word (the run
        itself reports the dataset's problems)."""
        return dict(self.scan.groups) if self.found.total else {}

    def check(self, strict: bool) -> None:
        """What a run needs of its items: bad records logged (with ``strict``, an error), at least
        one item, a subset that names known items, and a knowledge directory that holds the
        knowledge of the dataset's databases."""
        found, path = self.found, str(self.dataset.path)
        for error in found.errors[:ERRORS_LOGGED]:
            log.warning("dataset record skipped: %s", error)
        if len(found.errors) > ERRORS_LOGGED:
            log.warning("... and %d more dataset record errors (all listed in summary.json)", len(found.errors) - ERRORS_LOGGED)
        if found.errors and strict:
            raise DatasetError(f"{len(found.errors)} invalid record(s) (--strict); first: {found.errors[0]}", file=path)
        if found.total == 0:
            raise DatasetError(self.dataset.nothing_to_run(), file=path)
        self._check_knowledge(self.scan.groups)

    def _check_knowledge(self, groups: dict[Group, int]) -> None:
        """A configured knowledge directory must hold the knowledge of the dataset's databases:
        one that does not (a wrong folder) is an error naming the key, not silently ignored."""
        directory, where = self.spec.knowledge_directory, self.spec.where
        if directory is None:
            return
        if not directory.is_dir():
            raise ConfigError(f"not a directory: {directory}", file=where, key="knowledge_directory")
        databases = sorted({database for _, database in groups})
        missing = [database for database in databases if database not in self.knowledge]
        if missing and len(missing) == len(databases):
            found = ", ".join(sorted(p.name for p in directory.glob("*_kb.jsonl"))) or "none"
            raise ConfigError(f"{directory} holds no {missing[0]}_kb.jsonl (knowledge files found: {found})",
                              file=where, key="knowledge_directory")
        for database in missing:
            log.warning("knowledge_directory %s has no %s_kb.jsonl: items of %s get no external knowledge",
                        directory, database, database)
