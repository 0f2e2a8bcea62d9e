"""Launchers: each flavour renders one abstract launch into its own documented options; fabric settings per layer;
matrix values reach the launcher only as whole argv elements."""
import pytest

from bench.launch import LAUNCHERS, TORCHRUN, LaunchSpec, Ssh
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


# --- several hosts: host list, the inter-node interface in every layer, ssh settings -----------------------------

SSH = Ssh(config_file="/etc/bench/ssh_config", port=2222, identity_file="/keys/id_ed25519", user="bench")
TWO = dict(workers=4, hosts=(("node1", 2), ("node2", 2)), iface="eth1")


def test_openmpi_across_two_hosts_bounds_mpi_and_runtime_traffic_to_the_interface_and_uses_the_ssh_settings():
    r = LAUNCHERS["openmpi"].render(spec(**TWO, ssh=SSH), "mpirun")
    a = list(r.argv)
    assert after(a, "-np") == "4" and after(a, "-H") == "node1:2,node2:2"
    mca = dict(pairs(a, "--mca"))
    assert mca["btl_tcp_if_include"] == "eth1" and mca["oob_tcp_if_include"] == "eth1"
    assert mca["plm_rsh_args"] == "-F /etc/bench/ssh_config -p 2222 -i /keys/id_ed25519 -l bench"
    # the native engine's Gloo sockets (DDP under mpirun) on the same interface, forwarded to every rank
    assert r.env["GLOO_SOCKET_IFNAME"] == "eth1" and "GLOO_SOCKET_IFNAME" in [a[i + 1] for i, x in enumerate(a)
                                                                               if x == "-x"]


def test_openmpi_takes_a_cidr_for_the_interface():
    mca = dict(pairs(list(LAUNCHERS["openmpi"].render(spec(**{**TWO, "iface": "198.18.0.0/24"}), "mpirun").argv),
                     "--mca"))
    assert mca["btl_tcp_if_include"] == mca["oob_tcp_if_include"] == "198.18.0.0/24"


def test_openmpi_over_infiniband_still_keeps_its_runtime_on_the_interface():
    mca = dict(pairs(list(LAUNCHERS["openmpi"].render(spec(**TWO, ib=True), "mpirun").argv), "--mca"))
    assert mca["pml"] == "ucx" and mca["oob_tcp_if_include"] == "eth1" and "btl_tcp_if_include" not in mca


def test_mpich_across_two_hosts_gives_hydra_ucx_and_ssh_the_interface_and_settings():
    r = LAUNCHERS["mpich"].render(spec(**TWO, ssh=SSH), "mpiexec.hydra")
    a = list(r.argv)
    assert after(a, "-iface") == "eth1" and after(a, "-hosts") == "node1,node2" and after(a, "-ppn") == "2"
    assert after(a, "-launcher") == "ssh"
    assert ("UCX_NET_DEVICES", "eth1") in pairs(a, "-genv") and r.env["UCX_TLS"] == "tcp,sm,self"
    # Hydra reads the ssh arguments from its own environment; the workers do not need them
    assert r.env["HYDRA_LAUNCHER_EXTRA_ARGS"] == "-F /etc/bench/ssh_config -p 2222 -i /keys/id_ed25519 -l bench"
    assert "HYDRA_LAUNCHER_EXTRA_ARGS" not in [n for n, _ in pairs(a, "-genv")]


def test_intelmpi_across_two_hosts_gives_hydra_and_libfabric_the_interface_and_ssh_its_arguments():
    r = LAUNCHERS["intelmpi"].render(spec(**TWO, ssh=SSH), "mpiexec.hydra")
    a = list(r.argv)
    assert after(a, "-iface") == "eth1" and after(a, "-hosts") == "node1,node2" and after(a, "-ppn") == "2"
    assert after(a, "-launcher") == "ssh"
    assert after(a, "-bootstrap-exec-args") == "-F /etc/bench/ssh_config -p 2222 -i /keys/id_ed25519 -l bench"
    assert ("FI_TCP_IFACE", "eth1") in pairs(a, "-genv") and r.env["FI_PROVIDER"] == "tcp"


def test_gloo_across_two_hosts_uses_the_interface_never_loopback_and_horovodruns_ssh_options():
    ssh = Ssh(port=2222, identity_file="/keys/id_ed25519")
    r = LAUNCHERS["gloo"].render(spec(**TWO, ssh=ssh), "horovodrun")
    a = list(r.argv)
    assert after(a, "-H") == "node1:2,node2:2" and after(a, "--network-interface") == "eth1"
    assert r.env["HOROVOD_GLOO_IFACE"] == "eth1"
    assert after(a, "--ssh-port") == "2222" and after(a, "--ssh-identity-file") == "/keys/id_ed25519"


def test_gloo_refuses_ssh_settings_horovodrun_cannot_take():
    assert "ssh config file" in LAUNCHERS["gloo"].ssh_problem(SSH)
    assert LAUNCHERS["gloo"].ssh_problem(Ssh(port=22)) is None
    with pytest.raises(ValueError, match="ssh config file"):
        LAUNCHERS["gloo"].render(spec(**TWO, ssh=SSH), "horovodrun")


def test_gloo_on_one_remote_host_does_not_use_loopback():
    a = list(LAUNCHERS["gloo"].render(spec(workers=2, hosts=(("node1", 2),)), "horovodrun").argv)
    assert "lo" not in a


@pytest.mark.parametrize("flavour", sorted(LAUNCHERS))
def test_no_flavour_defaults_to_loopback_across_hosts(flavour):
    r = LAUNCHERS[flavour].render(spec(workers=4, hosts=(("node1", 2), ("node2", 2))), "launcher")
    assert "lo" not in r.argv and "lo" not in r.env.values()
    assert all(host in " ".join(r.argv) for host in ("node1", "node2"))


@pytest.mark.parametrize("flavour", ["mpich", "intelmpi", "gloo"])
def test_layers_that_need_an_interface_name_refuse_a_cidr(flavour):
    with pytest.raises(ValueError, match="needs an interface name"):
        LAUNCHERS[flavour].render(spec(**{**TWO, "iface": "198.18.0.0/24"}), "launcher")


def test_ssh_settings_refuse_values_a_launcher_would_split():
    with pytest.raises(ValueError, match="no whitespace"):
        Ssh(config_file="/my configs/ssh_config")
    with pytest.raises(ValueError, match="port"):
        Ssh(port=0)


def test_torchrun_across_two_hosts_is_one_launch_per_node_meeting_at_the_first():
    launches = TORCHRUN.render_nodes(spec(**TWO), "/venv/bin/python", port=29411, rdzv_id="job-7")
    assert [n.host for n in launches] == ["node1", "node2"]
    a = list(launches[0].rendered.argv)
    assert launches[1].rendered.argv == launches[0].rendered.argv  # c10d numbers the nodes itself
    assert a[:3] == ["/venv/bin/python", "-m", "torch.distributed.run"] and "--standalone" not in a
    assert after(a, "--nnodes") == "2" and after(a, "--nproc-per-node") == "2"
    assert after(a, "--rdzv-backend") == "c10d" and after(a, "--rdzv-endpoint") == "node1:29411"
    assert after(a, "--rdzv-id") == "job-7"
    assert a[-3:] == list(PROGRAM[1:])  # the script and its flags; torchrun brings the interpreter
    assert all(n.rendered.env["GLOO_SOCKET_IFNAME"] == "eth1" for n in launches)
    assert launches[0].rendered.env["OMP_NUM_THREADS"] == "4"


def test_torchrun_single_node_render_stays_standalone_and_refuses_several_hosts():
    a = list(TORCHRUN.render(spec(workers=2, hosts=(("localhost", 2),)), "python").argv)
    assert "--standalone" in a and after(a, "--nnodes") == "1"
    with pytest.raises(ValueError, match="render_nodes"):
        TORCHRUN.render(spec(**TWO), "python")
    with pytest.raises(ValueError, match="same number of workers"):
        TORCHRUN.render_nodes(spec(workers=3, hosts=(("node1", 2), ("node2", 1))))
