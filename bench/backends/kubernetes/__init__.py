"""The `kubernetes` backend: a Kubeflow MPIJob or PyTorchJob per cell (backend.py); the manifests (manifests.py),
their validation against the vendored CRDs (schema.py), the API calls (api.py) and following a job (follow.py)."""
