"""The PostgreSQL backend (embedded, external, AlloyDB and Cloud SQL): see :mod:`.backend`.

A regular package (not a namespace one) so that import-linter sees its modules."""
