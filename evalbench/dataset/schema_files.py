"""The dataset's schema texts (BIRD-Interact's ``<database>_schema.txt``), beside the knowledge
files: ``<dir>/<database>_schema.txt`` or ``<dir>/<database>/<database>_schema.txt``.

BIRD-Interact's ADK environment gives its agent this file as it is
(``db_environment/server.py::_load_db_data`` reads ``<data dir>/<db>/<db>_schema.txt``); the
session state names it ``{schema_file}``. A file is read when a session first names it, once.
"""

from __future__ import annotations

import threading
from pathlib import Path

SUFFIX = "_schema.txt"


class SchemaFiles:
    """database -> the text of its schema file under ``directory`` (a ValueError naming where it
    was looked for when there is none)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._texts: dict[str, str] = {}
        self._lock = threading.Lock()  # sessions open from several runner threads

    def __call__(self, database: str) -> str:
        with self._lock:
            if database not in self._texts:
                self._texts[database] = self._read(database)
            return self._texts[database]

    def _read(self, database: str) -> str:
        name = f"{database}{SUFFIX}"
        if self.directory is None:
            raise ValueError(f"{{schema_file}}: no folder to find {name} in: set knowledge_directory (or "
                             "dataset_directory) to the folder of the dataset's <database>_schema.txt files")
        for path in (self.directory / name, self.directory / database / name):
            if path.is_file():
                return path.read_text(encoding="utf-8-sig")
        raise ValueError(f"{{schema_file}}: neither {self.directory / name} nor {self.directory / database / name} exists")
