"""Secrets never reach the store, logs kept by bench, or reports: sensitive values are replaced by a marker.

Three shapes: a variable whose *name* looks sensitive (its whole value goes), secrets embedded in text (SAS
signatures in URLs, connection-string keys, bearer tokens), and command-line flags whose name looks sensitive.
"""
from __future__ import annotations

import re

REDACTED = "***REDACTED***"
SENSITIVE_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|SAS|CONNECTION_STRING|CREDENTIAL", re.I)
_IN_TEXT = (
    # Azure SAS query strings: the signature is the secret (sig=...), wherever the URL appears.
    (re.compile(r"(?i)([?&]sig=)[^&\s\"']+"), r"\1" + REDACTED),
    # Connection strings and key=value secrets.
    (re.compile(r"(?i)\b(AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd|ClientSecret)=([^;&\s\"']+)"),
     r"\1=" + REDACTED),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + REDACTED),
    # NAME=value pairs inside text (a log line echoing an environment, say) whose name looks sensitive.
    (re.compile(r"\b([A-Z0-9_]*(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|CONNECTION_STRING)[A-Z0-9_]*)=(\S+)"),
     r"\1=" + REDACTED),
)
_FLAG = re.compile(r"^--?[\w.-]*(key|secret|token|password|passwd|sas|credential)[\w.-]*$", re.I)


def redact_text(text: str | None) -> str | None:
    if not text:
        return text
    for pattern, repl in _IN_TEXT:
        text = pattern.sub(repl, text)
    return text


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if SENSITIVE_NAME.search(k) else redact_text(v)) for k, v in env.items()}


def redact_argv(argv: list[str]) -> list[str]:
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(REDACTED)
            hide_next = False
            continue
        name, eq, _ = arg.partition("=")
        if _FLAG.match(name):
            if eq:
                out.append(f"{name}={REDACTED}")
                continue
            hide_next = True
        out.append(redact_text(arg))
    return out
