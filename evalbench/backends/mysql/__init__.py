"""MySQL and MariaDB (the ``pymysql`` package, ``pip install evalbench[mysql]``): a database on
a server, provisioned from a setup directory; agent SQL runs as unprivileged users in
transactions that are always rolled back (DDL, which MySQL commits at once, is refused)."""
