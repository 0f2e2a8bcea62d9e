"""A flavour that lives in a test package: Open MPI's launcher under another name, with facts of its own that no
registered flavour has, so a test can see each one arrive where it is used (tests/test_flavour_facts.py)."""
from bench.launch.flavour import ImageRecipe
from bench.launch.openmpi import OpenMPI


class FakeMPI(OpenMPI):
    name = "fakempi"
    title = "Fake MPI"
    progress_threads = "Fake MPI's progress threads"
    stand_in_rank = -1  # preferred over every registered flavour as a stand-in
    mpi_operator_implementation = "MPICH"  # not what Open MPI's launcher would say: only its own fact gives this
    srun_starts_ranks = False
    image = ImageRecipe(runs_on="openmpi")


FLAVOUR = FakeMPI()
