"""Paired A/B runs (`bench ab`): the same matrix under two environments, interleaved on one machine.

spec.py parses a side (`--a`/`--b`: which Python, git ref or image, extra environment variables, a CPU quota),
cpuquota.py puts a side's process tree under a cgroup CPU quota, sides.py makes a side runnable (a git ref's
worktree) and runs it once as a real `bench run` into a scratch store, image_side.py runs that `bench run` in a
container of a built image, session.py interleaves the pairs and labels what they recorded in the main store. The
verdicts are bench/analysis/paired.py's, on Student's t from bench/analysis/stats/mean_tests.py.
"""
