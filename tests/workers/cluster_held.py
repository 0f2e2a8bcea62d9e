"""Run by tests/test_cluster_teardown.py as a pytest session of its own: holds an emulated cluster in a fixture and
waits, to be stopped by SIGTERM from outside."""
import time

import pytest


@pytest.fixture
def cluster():
    from tests import cluster as emulated

    c = emulated.start(2)
    try:
        yield c
    finally:
        c.down()


def test_hold(cluster):
    print("CLUSTER UP", flush=True)
    time.sleep(120)
