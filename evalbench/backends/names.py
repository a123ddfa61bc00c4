"""Backend names, as this package's face shows them: the registry of backend factories (built in,
or declared by other packages under the ``evalbench.backends`` entry point group), their aliases,
and which backend a database config selects.

The registry lives in :mod:`evalbench.core.registries` and the name rules with the database
config (:mod:`evalbench.config.databases`), so that the config schema checks a ``db_type``
without importing this package.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from evalbench.config.databases import ALIASES as ALIASES
from evalbench.config.databases import FILE_BACKENDS as FILE_BACKENDS
from evalbench.config.databases import backend_name as backend_name
from evalbench.config.databases import is_file_backend as is_file_backend
from evalbench.core import registries
from evalbench.core.registry import Registry

if TYPE_CHECKING:
    from evalbench.backends.base import Backend

BACKENDS: Registry[Callable[[], Backend]] = registries.BACKENDS  # a class or factory, called with no arguments
