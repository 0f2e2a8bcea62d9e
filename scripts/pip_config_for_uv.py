"""pip's package sources and limits as uv's options, one a line, for scripts/install.sh: uv does not read pip's
configuration, and the same pinned set must come from the same places (an index, extra indexes, find-links
folders, constraints: a machine's own package folders, or a company mirror). Read with `pip config list`, which
covers pip's files and PIP_* variables; a variable wins over the files, and `install.` over `global.`, as in pip.
The certificate bundle and timeout go to uv as the variables it reads (SSL_CERT_FILE, UV_HTTP_TIMEOUT), printed as
NAME=value lines first.

    python scripts/pip_config_for_uv.py
"""
from __future__ import annotations

import ast
import subprocess
import sys

OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url", "find-links": "--find-links",
           "constraint": "--constraint"}
VARIABLES = {"cert": "SSL_CERT_FILE", "default-timeout": "UV_HTTP_TIMEOUT", "timeout": "UV_HTTP_TIMEOUT"}
RANK = {"global": 0, "install": 1, ":env:": 2}  # who wins where several set a name


def settings(listing: str) -> dict[str, str]:
    """name → value from `pip config list` lines (section.name='value'), the highest-ranked section's."""
    best: dict[str, tuple[int, str]] = {}
    for line in listing.splitlines():
        key, sep, quoted = line.partition("=")
        section, _, name = key.rpartition(".")
        if not sep or section not in RANK:
            continue
        value = ast.literal_eval(quoted) if quoted[:1] in "'\"" else quoted
        if name not in best or RANK[section] >= best[name][0]:
            best[name] = (RANK[section], str(value))
    return {name: value for name, (_, value) in best.items()}


def uv_lines(found: dict[str, str]) -> list[str]:
    out = [f"{VARIABLES[n]}={v.strip()}" for n, v in found.items() if n in VARIABLES and v.strip()]
    for name, option in OPTIONS.items():
        for value in found.get(name, "").split():
            out += [option, value]
    return out


def main() -> int:
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             check=True).stdout
    print("\n".join(uv_lines(settings(listing))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
