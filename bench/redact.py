"""Secrets never reach the store, logs kept by bench, or reports: values of sensitive-looking names are replaced."""
from __future__ import annotations

import re

SENSITIVE_NAME = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|PASSWD|SAS|CONNECTION_STRING|CREDENTIAL", re.I)
REDACTED = "***REDACTED***"


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (REDACTED if SENSITIVE_NAME.search(k) else v) for k, v in env.items()}
