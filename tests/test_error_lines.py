"""A failed cell's reason is the most telling line of its log."""
from bench.backends.shared.outcome import last_error as _last_error

HOROVODRUN = """[0]<stderr>:Traceback (most recent call last):
[0]<stderr>:  File "x.py", line 3, in <module>
[0]<stderr>:ValueError: bad shape
[0]<stderr>:bench worker: error: no JPEG files under /data/train
Traceback (most recent call last):
RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the job
"""
MPIRUN = """[vm:1] *** An error occurred in MPI_Init_thread
[vm:1] *** reported by process [1,0]
mpirun detected that one or more processes exited with non-zero status, thus causing
"""


def test_the_workers_own_words_win_over_the_launchers():
    assert _last_error(HOROVODRUN) == "bench worker: error: no JPEG files under /data/train"
    assert _last_error(HOROVODRUN.replace("[0]<stderr>:bench worker: error: no JPEG files under /data/train\n", "")) \
        == "ValueError: bad shape"
    assert _last_error(MPIRUN) == "[vm:1] *** An error occurred in MPI_Init_thread"
    assert _last_error("nothing useful here\n") is None
