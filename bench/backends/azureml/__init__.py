"""The `azureml` backend: an azure-ai-ml command job per cell (backend.py) and the workspace it reaches
(workspace.py)."""
