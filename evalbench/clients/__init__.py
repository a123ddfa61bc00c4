"""How adapters reach models and servers within the conversation deadline (README.md).

The face holds what every adapter and judge shares and that imports nothing heavy: the failed
call (:mod:`.calls`) and the limiter and backoff (:mod:`.limits`). The HTTP transport
(:mod:`.http`, httpx), the google-genai client (:mod:`.genai`) and the probes (:mod:`.probes`)
are imported by their module, so that importing this package loads no HTTP library.
"""

from __future__ import annotations

from evalbench.clients.calls import BODY_KEPT, RAW_MAX_CHARS, CallFailed, transport_failure, truncate
from evalbench.clients.limits import RETRY_STATUSES, CallLimiter, backoff_delay, parse_retry_after

__all__ = [
    "BODY_KEPT",
    "RAW_MAX_CHARS",
    "RETRY_STATUSES",
    "CallFailed",
    "CallLimiter",
    "backoff_delay",
    "parse_retry_after",
    "transport_failure",
    "truncate",
]
