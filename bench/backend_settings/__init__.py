"""What the matrix's `backend` section says, as data: the backend names (registry.py), the settings every backend
shares and one section per backend (section.py), each backend's own schema (slurm.py, hosts.py, azureml.py) and the
`container:` setting (container.py). A foundation of the layer table (docs/architecture.md): the matrix schema reads
it without loading the backends that act on it (bench/backends/)."""
