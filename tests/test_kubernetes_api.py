"""The Kubernetes API wrapper (bench/backends/kubernetes/api.py), as far as it can be checked without an API server:
client errors as one line (on the client's own exception objects, from a real urllib3 response where the client
builds them from one), the job kinds' resources, the kubeconfig and its failures, the client missing, and a call to
an address where nothing listens."""
from __future__ import annotations

import json
import socket
import sys

import pytest

from bench.backends.kubernetes.api import (KINDS, LOG_CHUNK, NO_CLIENT, ClusterApi, ClusterError, error_line, keep_end,
                                           require_client, resource_of)
from bench.core.errors import BenchInputError

NEED_CLIENT = "checks the kubernetes client's own exceptions and config loading (pip install kubernetes)"


def client_module(name: str = "kubernetes"):
    return pytest.importorskip(name, reason=NEED_CLIENT)


def status_body(message: str, reason: str, code: int) -> str:
    # The metav1.Status an API server sends with every error.
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                       "reason": reason, "code": code})


def from_response(status: int, reason: str, body: bytes):
    """The exception the client raises for an HTTP error, built by the client from a real urllib3 response."""
    urllib3 = client_module("urllib3")
    rest = client_module("kubernetes.client.rest")
    exceptions = client_module("kubernetes.client.exceptions")
    response = rest.RESTResponse(urllib3.HTTPResponse(body=body, status=status, reason=reason, preload_content=False,
                                                      headers={"Content-Type": "application/json"}))
    response.read()
    with pytest.raises(exceptions.ApiException) as raised:
        exceptions.ApiException.from_response(http_resp=response, body=None, data=None)
    return raised.value


def write_kubeconfig(tmp_path, server: str = "https://127.0.0.1:6443"):
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: lab
  cluster:
    server: {server}
    insecure-skip-tls-verify: true
users:
- name: bench
  user:
    token: not-a-real-token
contexts:
- name: lab
  context:
    cluster: lab
    user: bench
    namespace: default
current-context: lab
""", encoding="utf-8")
    return path


# --- errors as one line --------------------------------------------------------------------------------------------
def test_an_http_error_is_status_reason_and_the_api_servers_message():
    e = from_response(404, "Not Found", status_body('mpijobs.kubeflow.org "bench-x" not found', "NotFound",
                                                    404).encode())
    assert type(e).__name__ == "NotFoundException"
    assert error_line(e) == '404 Not Found: mpijobs.kubeflow.org "bench-x" not found'
    denied = ('pytorchjobs.kubeflow.org is forbidden: User "system:serviceaccount:ci:bench" cannot create resource '
              '"pytorchjobs" in API group "kubeflow.org" in the namespace "ml"')
    assert error_line(from_response(403, "Forbidden", status_body(denied, "Forbidden", 403).encode())) == \
        f"403 Forbidden: {denied}"


def test_an_error_built_without_a_response_or_with_a_body_of_its_own_is_one_line():
    exceptions = client_module("kubernetes.client.exceptions")
    assert error_line(exceptions.ApiException(status=403, reason="Forbidden", http_resp=None)) == "403 Forbidden"
    invalid = ('admission webhook "vmpijob.kb.io" denied the request: spec.mpiReplicaSpecs[Worker].replicas: '
               'Invalid value: -1:\nmust be greater than or equal to 0')
    e = exceptions.ApiException(status=422, reason="Unprocessable Entity", body=status_body(invalid, "Invalid", 422))
    line = error_line(e)
    assert "\n" not in line and line.startswith("422 Unprocessable Entity: admission webhook") and \
        line.endswith("must be greater than or equal to 0")
    # A proxy in the way answers with HTML: its start, on one line.
    e = exceptions.ApiException(status=502, reason="Bad Gateway", body="<html>\n<body>502 Bad Gateway</body></html>")
    assert error_line(e) == "502 Bad Gateway: <html> <body>502 Bad Gateway</body></html>"


def test_an_error_with_no_http_status_says_no_answer_came():
    exceptions = client_module("kubernetes.client.exceptions")
    # The client's own for an SSL failure: status 0, a reason over two lines (kubernetes/client/rest.py).
    e = exceptions.ApiException(status=0, reason="SSLError\n[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify "
                                                 "failed: self-signed certificate in certificate chain")
    assert error_line(e) == ("no answer from the Kubernetes API server: SSLError [SSL: CERTIFICATE_VERIFY_FAILED] "
                             "certificate verify failed: self-signed certificate in certificate chain")


def test_a_connection_error_says_the_api_server_cannot_be_reached():
    urllib3 = client_module("urllib3")
    e = urllib3.exceptions.MaxRetryError(None, "/apis/kubeflow.org/v2beta1/namespaces/default/mpijobs",
                                         urllib3.exceptions.NewConnectionError(None, "Failed to establish a new "
                                                                                     "connection: [Errno 111]"))
    line = error_line(e)
    assert line.startswith("cannot reach the Kubernetes API server: MaxRetryError:") and "[Errno 111]" in line
    assert error_line(ConnectionRefusedError(111, "Connection refused")) == \
        "cannot reach the Kubernetes API server: ConnectionRefusedError: [Errno 111] Connection refused"


# --- kinds ---------------------------------------------------------------------------------------------------------
def test_each_job_kind_has_its_operators_group_version_and_plural():
    assert resource_of("MPIJob")[2] == "mpijobs" and resource_of("PyTorchJob")[2] == "pytorchjobs"
    assert resource_of("MPIJob") == ("kubeflow.org", "v2beta1", "mpijobs")
    assert resource_of("PyTorchJob") == ("kubeflow.org", "v1", "pytorchjobs")
    assert set(KINDS) == {"MPIJob", "PyTorchJob"}
    with pytest.raises(BenchInputError, match="unknown job kind 'TFJob'"):
        resource_of("TFJob")


# --- a log's end ---------------------------------------------------------------------------------------------------
def test_a_logs_end_is_its_last_bytes_however_it_was_chunked():
    log = b"".join(b"line %d\n" % i for i in range(100_000))
    chunks = [log[i:i + LOG_CHUNK] for i in range(0, len(log), LOG_CHUNK)]
    assert keep_end(iter(chunks), None) == log
    assert keep_end(iter(chunks), 1000) == log[-1000:]
    assert keep_end(iter([b"short"]), 1000) == b"short"
    assert keep_end(iter([]), 10) == b""


# --- the kubeconfig --------------------------------------------------------------------------------------------------
def test_a_context_the_kubeconfig_does_not_have_fails_with_one_line(tmp_path, monkeypatch):
    client_module()
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path)))
    with pytest.raises(BenchInputError) as raised:
        ClusterApi("default", context="prod-gpu")
    message = str(raised.value)
    assert "\n" not in message and "prod-gpu" in message and "kubeconfig" in message


def test_no_kubeconfig_and_not_in_a_pod_fails_with_one_line_naming_both(tmp_path, monkeypatch):
    client_module()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(BenchInputError) as raised:
        ClusterApi("default")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith(f"no Kubernetes cluster to use: kubeconfig {tmp_path / 'missing'}: ")
    assert "not in a pod either" in message


def test_a_call_where_no_api_server_listens_fails_with_one_line(tmp_path, monkeypatch):
    client_module()
    with socket.socket() as s:  # a port nothing listens on: connection refused at once
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path, f"https://127.0.0.1:{port}")))
    api = ClusterApi("default", context="lab")
    for call in (lambda: api.get("MPIJob", "bench-x"), lambda: api.pods("bench-x"), lambda: api.log("bench-x-0"),
                 lambda: api.delete("PyTorchJob", "bench-x")):
        with pytest.raises(ClusterError) as raised:
            call()
        assert raised.value.status == 0
        assert str(raised.value).startswith("cannot reach the Kubernetes API server: ") and \
            "\n" not in str(raised.value)


def test_a_manifest_whose_api_version_is_not_its_operators_is_refused_before_any_call(tmp_path, monkeypatch):
    client_module()
    monkeypatch.setenv("KUBECONFIG", str(write_kubeconfig(tmp_path)))
    api = ClusterApi("default")
    with pytest.raises(BenchInputError, match="apiVersion kubeflow.org/v2beta1, not 'kubeflow.org/v1'"):
        api.create({"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "bench-x"}})


def test_without_the_client_the_backend_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # `import kubernetes` now raises ImportError
    for needs_it in (require_client, lambda: ClusterApi("default")):
        with pytest.raises(BenchInputError) as raised:
            needs_it()
        assert str(raised.value) == NO_CLIENT
