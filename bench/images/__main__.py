"""`python -m bench.images ...` is `bench images ...` (the rendered Dockerfiles and the docs name it)."""
import sys

if __name__ == "__main__":
    from bench.cli import main

    sys.exit(main(["images", *sys.argv[1:]]))
