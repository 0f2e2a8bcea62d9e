"""Checking a rendered job offline, before anything reaches a cluster: the whole manifest against its operator's own
CRD schema (the files under bench/data/kubernetes/, kept as the operators publish them: README.md there says where
from), and every pod template against Kubernetes' core schema (the `kubernetes-validate` package's copy of the API
server's OpenAPI definitions).

The API server prunes fields a structural schema does not name instead of refusing them; a field bench misspelt
would vanish silently. So the check is strict, as `kubectl --validate=strict` is: where a schema lists an object's
properties and does not say it keeps unknown fields, no other field is allowed.
"""
from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from bench.core.errors import BenchInputError

# kind -> (CRD file, served version): the operators' versions bench renders for (docs/backends.md says which).
CRDS = {"MPIJob": ("kubeflow.org_mpijobs.yaml", "v2beta1"), "PyTorchJob": ("kubeflow.org_pytorchjobs.yaml", "v1")}
# The Kubernetes release whose core schema pod templates are checked against (kubernetes-validate ships one folder of
# definitions per release; the newest it has).
CORE_VERSION = "1.37.0"
POD_TEMPLATE = "io.k8s.api.core.v1.PodTemplateSpec"


def _needs(package: str):
    raise BenchInputError(f"checking Kubernetes manifests needs {package} (pip install -e '.[kubernetes]')")


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever it lists properties (see the module's docstring)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


@functools.cache
def crd_validator(kind: str):
    try:
        import jsonschema
        import yaml
    except ImportError:
        _needs("jsonschema")
    filename, version = CRDS[kind]
    text = resources.files("bench").joinpath(f"data/kubernetes/{filename}").read_text()
    crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    served = [v for v in crd["spec"]["versions"] if v["name"] == version]
    if not served:
        raise LookupError(f"{filename} serves no version {version}")
    schema = strict(served[0]["schema"]["openAPIV3Schema"])
    return jsonschema.Draft7Validator(schema)


@functools.cache
def core_validator():
    try:
        import jsonschema
        import kubernetes_validate
    except ImportError:
        _needs("kubernetes-validate")
    folder = resources.files(kubernetes_validate).joinpath(f"kubernetes-json-schema/v{CORE_VERSION}-local-strict")
    # One JSON Schema 2020-12 document of every definition (`$defs`), already strict (no unknown fields).
    definitions = json.loads(folder.joinpath("_definitions.json").read_text())
    schema = {**definitions, "$ref": f"#/$defs/{POD_TEMPLATE}"}
    return jsonschema.Draft202012Validator(schema)


def _where(error) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "(top)"


def problems(manifest: dict[str, Any]) -> list[str]:
    """Every way the manifest breaks its CRD's schema or a pod template breaks the core schema, one line each,
    with the path of the offending field."""
    kind = manifest.get("kind")
    if kind not in CRDS:
        return [f"kind {kind!r}: bench renders only {', '.join(CRDS)}"]
    found = [f"{kind} {_where(e)}: {e.message}" for e in crd_validator(kind).iter_errors(manifest)]
    replicas_key = "mpiReplicaSpecs" if kind == "MPIJob" else "pytorchReplicaSpecs"
    for role, replica in (manifest.get("spec", {}).get(replicas_key) or {}).items():
        template = replica.get("template", {})
        found += [f"{kind} {role} pod template {_where(e)}: {e.message}"
                  for e in core_validator().iter_errors(template)]
    return found


def check(manifest: dict[str, Any], what: str) -> None:
    """Refuse a manifest the schemas refuse, with one line naming the first problem (and how many there are)."""
    found = problems(manifest)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise BenchInputError(f"{what}: the rendered manifest is invalid: {found[0][:300]}{more}")
