"""Container images for cluster backends (`bench images render|list|build|check`; `python -m bench.images` is the same).

- recipes.py: the variants (framework set x MPI flavour x CUDA generation), the image that runs a cell, LEGACY_PINS,
  and rendering docker/Dockerfile.j2 into docker/rendered/Dockerfile.<variant>;
- engines.py: how podman and docker are called (build, run) on this kind of machine;
- pip_settings.py: the host's pip settings, handed to a build as secrets and read-only mounts;
- build.py: one variant built, then checked for what of those settings must not be in it;
- check.py: a built cpu image proved: `bench doctor` and a 2-worker cell inside it, as its unprivileged user;
- __main__.py: `python -m bench.images ...`, the one module here that may import bench.cli.

Nothing is imported here: importing a submodule runs this file first, and the backends and `bench ab` import
engines.py alone.
"""
