"""Container images for cluster backends (`bench images render|list|build|check|push`; `python -m bench.images` is the
same).

- recipes.py: the variants (framework set x MPI flavour x CUDA generation), the image that runs a cell, LEGACY_PINS,
  and rendering docker/Dockerfile.j2 into docker/rendered/Dockerfile.<variant>;
- mpijob.py: the MPIJob layer over each image (an sshd for Kubeflow MPI operator MPIJobs), rendering
  docker/Dockerfile.mpijob.j2 into docker/rendered/Dockerfile.<variant>-mpijob, and what a Kubernetes backend needs
  of it (SSH_PORT, SSH_AUTH_MOUNT_PATH, SSHD_CONFIG, IMAGE_UID, mpijob_image_for_cell, sshd_command);
- engines.py: how podman and docker are called (build, run) on this kind of machine;
- pip_settings.py: the host's pip settings, handed to a build as secrets and read-only mounts;
- build.py: one variant built, then checked for what of those settings must not be in it;
- check.py: a built cpu image proved: `bench doctor` and a 2-worker cell inside it, as its unprivileged user;
- push.py: built images pushed to a registry, each push's digest recorded in pushed.json (`pushed_reference`);
- __main__.py: `python -m bench.images ...`, the one module here that may import bench.cli.

Nothing is imported here: importing a submodule runs this file first, and the backends and `bench ab` import
engines.py alone.
"""
