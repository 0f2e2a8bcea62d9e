"""Launchers: each flavour renders one abstract launch into its own documented options; fabric settings per layer;
matrix values reach the launcher only as whole argv elements."""
import pytest

from bench.launch import LAUNCHERS, LaunchSpec
from bench.launch.fabric import nccl_env

PROGRAM = ("python", "w.py", "--flag", "x")


def spec(**kw):
    base = dict(workers=8, hosts=(("node-a", 4), ("node-b", 4)), program=PROGRAM, env={"OMP_NUM_THREADS": "4"})
    return LaunchSpec(**{**base, **kw})


def after(argv, flag):
    return argv[argv.index(flag) + 1]


def pairs(argv, flag):
    return [tuple(argv[i + 1:i + 3]) for i, a in enumerate(argv) if a == flag]


def test_openmpi_tcp_uses_ob1_with_tcp_and_forwards_env_by_name():
    r = LAUNCHERS["openmpi"].render(spec(iface="eth0"), "mpirun")
    a = list(r.argv)
    assert a[:5] == ["mpirun", "-np", "8", "-H", "node-a:4,node-b:4"]
    assert after(a, "--bind-to") == "none" and after(a, "--map-by") == "slot"
    mca = [tuple(a[i + 1:i + 3]) for i, x in enumerate(a) if x == "--mca"]
    assert ("pml", "ob1") in mca and ("btl", "self,vader,tcp") in mca and ("btl_tcp_if_include", "eth0") in mca
    assert "OMP_NUM_THREADS" in [a[i + 1] for i, x in enumerate(a) if x == "-x"]
    assert "--allow-run-as-root" not in a
    assert a[-len(PROGRAM):] == list(PROGRAM)


def test_openmpi_ib_uses_ucx_with_rc_verbs_and_root_flag_only_as_root():
    r = LAUNCHERS["openmpi"].render(spec(ib=True, as_root=True), "mpirun")
    a = list(r.argv)
    assert ("pml", "ucx") in pairs(a, "--mca") and "--allow-run-as-root" in a
    assert r.env["UCX_TLS"] == "rc,sm,self"
    assert "UCX_TLS" in [a[i + 1] for i, x in enumerate(a) if x == "-x"]


@pytest.mark.parametrize("flavour,tool", [("intelmpi", "mpiexec.hydra"), ("mpich", "mpiexec.hydra")])
def test_hydra_flavours_use_n_ppn_hosts_and_genv(flavour, tool):
    r = LAUNCHERS[flavour].render(spec(), tool)
    a = list(r.argv)
    assert a[0] == tool and after(a, "-n") == "8" and after(a, "-ppn") == "4" and after(a, "-hosts") == "node-a,node-b"
    assert ("OMP_NUM_THREADS", "4") in pairs(a, "-genv")
    assert "-x" not in a and "--mca" not in a  # Open MPI's options mean nothing to Hydra


@pytest.mark.parametrize("ib,provider", [(True, "mlx"), (False, "tcp")])
def test_intelmpi_fabric_goes_through_libfabric(ib, provider):
    r = LAUNCHERS["intelmpi"].render(spec(ib=ib), "mpiexec.hydra")
    assert r.env["I_MPI_FABRICS"] == "shm:ofi" and r.env["FI_PROVIDER"] == provider
    assert ("FI_PROVIDER", provider) in pairs(list(r.argv), "-genv")


def test_intelmpi_on_rdma_skus_without_sriov_uses_dapl():
    r = LAUNCHERS["intelmpi"].render(spec(ib=True, sriov=False), "mpiexec.hydra")
    assert r.env["I_MPI_FABRICS"] == "shm:dapl" and "FI_PROVIDER" not in r.env


@pytest.mark.parametrize("ib,tls", [(True, "rc,sm,self"), (False, "tcp,sm,self")])
def test_mpich_fabric_goes_through_ucx_and_iface_selects_the_interface(ib, tls):
    r = LAUNCHERS["mpich"].render(spec(ib=ib, iface="eth0"), "mpiexec.hydra")
    assert r.env["UCX_TLS"] == tls and r.env["MPIR_CVAR_CH4_NETMOD"] == "ucx"
    assert after(list(r.argv), "-iface") == "eth0"


def test_gloo_runs_horovodrun_on_loopback_for_one_machine():
    r = LAUNCHERS["gloo"].render(spec(hosts=(("localhost", 2),), workers=2), "horovodrun")
    a = list(r.argv)
    assert a[:2] == ["horovodrun", "--gloo"] and after(a, "--network-interface") == "lo"


@pytest.mark.parametrize("ib", [True, False])
def test_nccl_layer_follows_the_ib_axis_whatever_the_mpi(ib):
    env = nccl_env(spec(ib=ib, iface="eth0"))
    assert env["NCCL_IB_DISABLE"] == ("0" if ib else "1") and env["NCCL_SOCKET_IFNAME"] == "eth0"


HOSTILE = ["; rm -rf /", "$(touch /tmp/pwned)", "`id`", "a b", "line\nbreak", "x' y \"z"]


@pytest.mark.parametrize("flavour", sorted(LAUNCHERS))
@pytest.mark.parametrize("value", HOSTILE)
def test_hostile_values_stay_single_argv_elements(flavour, value):
    s = spec(hosts=(("localhost", 2),), workers=2, program=("python", "w.py", "--data-dir", value),
             env={"BENCH_X": value})
    r = LAUNCHERS[flavour].render(s, "launcher")
    assert value in r.argv  # whole, as one element, never split or joined into a shell string
    assert all(value not in a or a == value for a in r.argv)
    assert r.env["BENCH_X"] == value
