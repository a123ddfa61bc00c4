"""The exit codes of ``evalbench`` (docs/ci.md): a contract, never changed lightly.

0 pass; 1 a gate failed (``--fail-under``, ``--max-regression``; for ``validate``: an invalid item);
2 invalid config or dataset (with ``run --strict``: also an item whose golden SQL fails — never exit
3, which is for infrastructure; also a preflight check of the configuration, e.g. a misspelt gate
metric); 3 infrastructure errors above ``--max-infra-errors`` (a database that could not be set up —
its items are still journaled, as db_error — a failing virtual user, or a journal that could not be
written), a preflight check of the infrastructure (an agent, model, database or output directory that
cannot be reached) or an agent the circuit breaker found down during the run; 130 cancelled (Ctrl-C).
"""

EXIT_OK, EXIT_GATE, EXIT_CONFIG, EXIT_INFRA, EXIT_CANCELLED = 0, 1, 2, 3, 130
