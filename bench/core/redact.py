"""Secrets never reach the store, logs kept by bench, or reports: sensitive values are replaced by a marker.

Three shapes: a variable whose *name* looks sensitive (its whole value goes), secrets embedded in text (SAS
signatures in URLs, connection-string keys, bearer tokens), and command-line flags whose name looks sensitive.
"""
from __future__ import annotations

import re

REDACTED = "***REDACTED***"
SENSITIVE_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|_PWD$|SAS|CONNECTION_STRING|CREDENTIAL", re.I)
_WORDS = r"(?:key|secret|token|password|passwd|pwd|sas|credential)"
_IN_TEXT = (
    # Azure SAS query strings: the signature is the secret (sig=...), wherever the URL appears.
    (re.compile(r"(?i)([?&]sig=)[^&\s\"']+"), r"\1" + REDACTED),
    # Connection strings and key=value secrets.
    # (An upper-case PWD= is the shell's working directory, not an ODBC password.)
    (re.compile(r"(?i)\b(?!(?-i:PWD)=)(AccountKey|SharedAccessKey|SharedAccessSignature|Password|Pwd|ClientSecret)=([^;&\s\"']+)"),
     r"\1=" + REDACTED),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1" + REDACTED),
    # NAME=value pairs inside text (a log line echoing an environment, say) whose name looks sensitive.
    (re.compile(r"\b([A-Z0-9_]*(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|CONNECTION_STRING)[A-Z0-9_]*|[A-Z0-9]+_PWD)=(\S+)"),
     r"\1=" + REDACTED),
    # A sensitive-looking option on a command line printed in text: --storage-key VALUE, --sas-token=VALUE.
    (re.compile(r"(?i)(?<![\w-])(--?[\w.-]*" + _WORDS + r"[\w.-]*)([= ])(?!\*\*\*)([^\s\"']+)"), r"\1\2" + REDACTED),
    # config-file style `client_secret: value` / `password = value` (lower or mixed case).
    (re.compile(r"(?i)\b([\w.-]*(?:secret|password|passwd|api[_-]?key|access[_-]?key|account[_-]?key))(\s*[:=]\s*)"
                r"(?!\*\*\*)([^\s\"',;&]+)"), r"\1\2" + REDACTED),
    # Credentials in a URL's userinfo: scheme://user:password@host.
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+(@)"), r"\1" + REDACTED + r"\2"),
    # The shapes themselves, whatever surrounds them: an Azure storage account key (64 bytes, base64) and JWTs.
    (re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{86}=="), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"), REDACTED),
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
