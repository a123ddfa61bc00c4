"""DuckDB (the ``duckdb`` package, ``pip install evalbench[duckdb]``): a database is one file,
built from a setup directory or used as it is; agent SQL runs with file and network access off,
its configuration locked, in transactions that are always rolled back."""
