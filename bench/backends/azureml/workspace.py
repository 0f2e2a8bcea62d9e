"""The Azure ML backend's configuration: which workspace (the matrix, its config file, or the AZUREML_* environment)
and the rule that no secret is ever configured (keys, SAS signatures, secret-looking variables)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from bench.backend_settings.azureml import AzureMLConfig
from bench.core.errors import BenchInputError
from bench.core.redact import SENSITIVE_NAME

WORKSPACE_ENV = ("AZUREML_SUBSCRIPTION_ID", "AZUREML_RESOURCE_GROUP", "AZUREML_WORKSPACE")
# A storage account key is 64 random bytes in base64 (88 characters ending "=="); connection strings name it.
_ACCOUNT_KEY = re.compile(r"(?i)AccountKey=|(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{86}==")
_SAS_SIGNATURE = re.compile(r"(?i)[?&]sig=")


@dataclass(frozen=True)
class Workspace:
    subscription_id: str
    resource_group: str
    name: str
    source: str  # where it was named, for messages


# --- configuration checks ---------------------------------------------------------------------------------------
def check_no_secrets(config: AzureMLConfig) -> None:
    """Keys and inline SAS signatures never belong in a matrix (it is shared and printed by `plan`); the message
    names the setting, never its value."""
    for where, value in _settings_text(config):
        if _ACCOUNT_KEY.search(value):
            raise BenchInputError(f"backend.azureml.{where}: looks like a storage account key; keys never go in a "
                                  f"matrix (reach data by identity, or through a workspace datastore)")
        if _SAS_SIGNATURE.search(value):
            raise BenchInputError(f"backend.azureml.{where}: carries a SAS signature; register the SAS in a workspace "
                                  f"datastore and use its azureml://datastores/... URI instead")
    for name in config.env:
        if SENSITIVE_NAME.search(name):
            raise BenchInputError(f"backend.azureml.env.{name}: looks like a secret; secrets do not travel in job "
                                  f"environment variables (use the job's identity)")


def _settings_text(config: AzureMLConfig):
    for field, value in config.model_dump().items():
        if isinstance(value, str):
            yield field, value
        elif isinstance(value, dict):
            for key, item in value.items():
                yield f"{field}.{key}", str(item)


def resolve_workspace(config: AzureMLConfig, environ=os.environ) -> Workspace | None:
    """The matrix's three fields, else its config_file, else the AZUREML_* environment; None if none is set.
    A half-named workspace is an input error naming what is missing."""
    named = {"subscription_id": config.subscription_id, "resource_group": config.resource_group,
             "workspace": config.workspace}
    if any(named.values()):
        return _complete(named, "backend.azureml")
    if config.config_file:
        return _from_config_file(Path(config.config_file))
    from_env = dict(zip(("subscription_id", "resource_group", "workspace"), (environ.get(v) for v in WORKSPACE_ENV)))
    if any(from_env.values()):
        return _complete(from_env, "the AZUREML_* environment")
    return None


def _complete(named: dict[str, str | None], source: str) -> Workspace:
    missing = [k for k, v in named.items() if not v]
    if missing:
        raise BenchInputError(f"{source}: the workspace is half named; missing {', '.join(missing)}")
    return Workspace(named["subscription_id"], named["resource_group"], named["workspace"], source)


def _from_config_file(path: Path) -> Workspace:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise BenchInputError(f"backend.azureml.config_file: cannot read {path} as JSON ({e})") from None
    if not isinstance(data, dict):
        raise BenchInputError(f"backend.azureml.config_file: {path} is not a JSON object")
    return _complete({"subscription_id": data.get("subscription_id"), "resource_group": data.get("resource_group"),
                      "workspace": data.get("workspace_name")}, str(path))
