"""What every backend shares, one job per module: the cell's launch (cell_launch), a process tree and its log pump
(process), the watchdog (guard), a launcher job's start and end (launcher_job), reading what a job left (records),
the one `Outcome` ladder (outcome), the container wrapping (container) and whether a data set is reachable
(data_reach). No module here imports a backend."""
