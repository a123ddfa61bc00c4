"""SQLite (the standard library's ``sqlite3``): a database is one file, built from a setup
directory or used as it is; agent SQL runs on read-only connections with an authorizer."""
