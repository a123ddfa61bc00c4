"""What every self-contained page of a run (report.html, index.html) shares: the document around
its body, with the one inline script allowed by its hash and nothing fetched from the network,
and how time stamps are shown."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib


def page_shell(title: str, css: str, js: str, body: str) -> tuple[str, str]:
    """The page before and after its embedded data (a ``<script type="application/json">`` the
    caller writes between them). ``title`` is HTML already escaped."""
    assert "</script" not in js.lower()
    script_hash = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    csp = (f"default-src 'none'; script-src 'sha256-{script_hash}'; style-src 'unsafe-inline'; "
           "img-src data:; base-uri 'none'; form-action 'none'")
    head = ("<!DOCTYPE html>\n"
            '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
            '<meta name="generator" content="evalbench">\n'
            f"<title>{title}</title>\n"
            f"<style>{css}</style>\n</head>\n<body>\n{body}\n")
    return head, f"<script>{js}</script>\n</body>\n</html>\n"


def format_stamp(stamp: str | None, fmt: str, utc_suffix: str = "") -> str:
    """An ISO time stamp as ``fmt`` (in UTC when it has a zone, then followed by ``utc_suffix``);
    ``—`` when there is none, the text itself when it is not a time stamp."""
    if not stamp:
        return "—"
    try:
        parsed = dt.datetime.fromisoformat(stamp)
    except ValueError:
        return stamp
    if parsed.tzinfo is None:
        return parsed.strftime(fmt)
    return parsed.astimezone(dt.timezone.utc).strftime(fmt) + utc_suffix
