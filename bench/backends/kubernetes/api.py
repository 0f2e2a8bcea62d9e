"""The Kubernetes API calls the kubernetes backend makes, through the official client (imported inside functions
only, so bench runs without it until a kubernetes run starts): create, read and delete a training job, list its
pods, read a pod's log. Objects come back as plain dicts (camelCase, as the API server writes them) for
`follow.py` to read; every client error comes back as one line (ClusterError)."""
from __future__ import annotations

import json
import os

from bench.core.errors import BenchInputError

NO_CLIENT = "the kubernetes backend needs the kubernetes client (pip install kubernetes)"
# (group, version, plural) of each job kind: mpi-operator v0.8.0 serves MPIJob as kubeflow.org/v2beta1, the
# training-operator (kubeflow/trainer v1.9) serves PyTorchJob as kubeflow.org/v1.
KINDS = {"MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"), "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs")}
OPERATORS = {"MPIJob": "mpi-operator", "PyTorchJob": "training-operator"}
JOB_NAME_LABEL = "training.kubeflow.org/job-name"  # both operators label every pod of a job with its name
# (connect, read) seconds for one call: an API server that stops answering must not hang the run.
REQUEST_TIMEOUT_S = (10, 60)
LOG_CHUNK = 64 * 1024


class ClusterError(Exception):
    """An API call that failed, as one line; `status` is the HTTP status (0 when no answer came)."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(" ".join(message.split()))
        self.status = status


def require_client() -> None:
    """BenchInputError, with what to install, where the kubernetes client is missing: said before anything runs."""
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        raise BenchInputError(NO_CLIENT) from None


def resource_of(kind: str) -> tuple[str, str, str]:
    """(group, version, plural) of a job kind."""
    try:
        return KINDS[kind]
    except KeyError:
        raise BenchInputError(f"unknown job kind {kind!r} (expected one of {', '.join(KINDS)})") from None


def error_line(e: BaseException) -> str:
    """One line for a client error: "404 Not Found: <the Status message the API server sent>" for an HTTP error,
    what went wrong on the way for a connection error (urllib3, OSError)."""
    if not isinstance(e, _api_exception()):  # the connection failed on the way
        return _squeeze(f"cannot reach the Kubernetes API server: {type(e).__name__}: {e}")
    reason = _squeeze(str(e.reason or ""))
    if not e.status:  # the client's own: an SSL error (its reason spans lines), a body it cannot read
        return f"no answer from the Kubernetes API server: {reason or 'unknown error'}"
    said = _body_message(e.body)
    head = f"{e.status} {reason}".strip()
    return f"{head}: {said}" if said else head


def _api_exception() -> type | tuple:
    try:
        from kubernetes.client.exceptions import ApiException
    except ImportError:
        return ()
    return ApiException


def _client_errors() -> tuple[type, ...]:
    """What a call can raise on the way to the API server and back, besides ApiException."""
    from urllib3.exceptions import HTTPError
    return HTTPError, OSError


def _body_message(body) -> str | None:
    """The message of the Status object an API server sends with an error; the body's start if it is not one."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if not body or not str(body).strip():
        return None
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):  # a proxy's HTML page, a JSON list...
        return _squeeze(str(body))[:300]
    return _squeeze(message) if message else None


def _squeeze(text: str) -> str:
    return " ".join(str(text).split())


def keep_end(chunks, tail_bytes: int | None) -> bytes:
    """The last `tail_bytes` of a stream of byte chunks (all of it with None), holding at most about twice that."""
    kept = bytearray()
    for chunk in chunks:
        kept += chunk
        if tail_bytes is not None and len(kept) > 2 * tail_bytes + LOG_CHUNK:
            del kept[:len(kept) - tail_bytes]
    if tail_bytes is not None:
        del kept[:max(0, len(kept) - tail_bytes)]
    return bytes(kept)


class ClusterApi:
    """One namespace of one cluster, as the kubeconfig (or, inside a pod, the service account) reaches it."""

    def __init__(self, namespace: str, context: str | None = None):
        require_client()
        from kubernetes import client

        self.namespace = namespace
        api = client.ApiClient(_configuration(client, context))
        self._core = client.CoreV1Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._serialize = api.sanitize_for_serialization

    def create(self, manifest: dict) -> str:
        """Create the job `manifest` describes in this namespace; its name (the API server's, if it generated one)."""
        kind = manifest.get("kind", "")
        group, version, plural = resource_of(kind)
        if manifest.get("apiVersion") != f"{group}/{version}":
            raise BenchInputError(f"a {kind} manifest must have apiVersion {group}/{version}, "
                                  f"not {manifest.get('apiVersion')!r}")
        try:
            made = self._call(self._custom.create_namespaced_custom_object, group, version, self.namespace, plural,
                              manifest)
        except ClusterError as e:
            if e.status == 404:  # no such resource: the CRD (so the operator) is not installed
                raise ClusterError(f"{e} (is the {OPERATORS[kind]} installed? this cluster does not serve "
                                   f"{plural}.{group}/{version})", e.status) from None
            raise
        return made["metadata"]["name"]

    def get(self, kind: str, name: str) -> dict:
        group, version, plural = resource_of(kind)
        return self._call(self._custom.get_namespaced_custom_object, group, version, self.namespace, plural, name)

    def pods(self, job_name: str) -> list[dict]:
        """Every pod of the job (launcher/master and workers, retried ones too), as dicts."""
        found = self._call(self._core.list_namespaced_pod, self.namespace,
                           label_selector=f"{JOB_NAME_LABEL}={job_name}")
        return self._serialize(found.items or [])

    def log(self, pod_name: str, container: str | None = None, tail_bytes: int | None = None) -> str:
        """A pod's log; with `tail_bytes`, only its last bytes. The API can only cut a log's start (limitBytes) or
        its last lines, so the log is streamed and only its end kept: memory stays bounded however much it holds.
        Streamed raw, too: a preloaded log that reads as JSON is turned into a Python repr by the client."""
        response = self._call(self._core.read_namespaced_pod_log, pod_name, self.namespace, container=container,
                              _preload_content=False)
        try:
            return keep_end(response.stream(LOG_CHUNK), tail_bytes).decode("utf-8", errors="replace")
        except _client_errors() as e:  # the connection broke while the log streamed
            raise ClusterError(f"reading the log of pod {pod_name}: {error_line(e)}") from None
        finally:
            response.release_conn()

    def delete(self, kind: str, name: str) -> None:
        """Delete a job and (Foreground) its pods before it; a job already gone is fine."""
        group, version, plural = resource_of(kind)
        try:
            self._call(self._custom.delete_namespaced_custom_object, group, version, self.namespace, plural, name,
                       propagation_policy="Foreground")
        except ClusterError as e:
            if e.status != 404:
                raise

    def _call(self, method, *args, **kwargs):
        """One API call, bounded in time; a client error becomes a ClusterError with one line."""
        try:
            return method(*args, _request_timeout=REQUEST_TIMEOUT_S, **kwargs)
        except _api_exception() as e:
            raise ClusterError(error_line(e), e.status or 0) from None
        except _client_errors() as e:
            raise ClusterError(error_line(e)) from None


def _configuration(client, context: str | None):
    """The client configuration from the kubeconfig, else (no context named) the pod's service account; neither
    -> BenchInputError. A configuration of our own: the client's process-wide default is left alone."""
    from kubernetes import config

    # The client reads $KUBECONFIG once, at import: read it now, as kubectl would.
    path = os.environ.get("KUBECONFIG") or "~/.kube/config"
    configuration = client.Configuration()
    try:
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration,
                                persist_config=False)
        return configuration
    except Exception as e:  # ConfigException, a YAML error, an exec plugin that fails: this config cannot be used
        from_file = f"kubeconfig {path}{f' context {context}' if context else ''}: {_squeeze(str(e)).rstrip('.')}"
    if context:  # a context was named: only the kubeconfig can have it
        raise BenchInputError(f"cannot use {from_file}")
    try:
        config.load_incluster_config(client_configuration=configuration)
        return configuration
    except Exception as e:  # not in a pod (no service host, no token)
        raise BenchInputError(f"no Kubernetes cluster to use: {from_file}; not in a pod either "
                              f"({_squeeze(str(e)).rstrip('.')})") from None
