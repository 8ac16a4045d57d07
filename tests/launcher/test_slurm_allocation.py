"""hvdliterun's reading of the Slurm job it runs in, on no Slurm (logic tests of our own code, from the variables
Slurm sets; the expected host lists are what `scontrol show hostnames` of Slurm 22.05 prints for the same strings):
the allocation's hosts and slots, how the ranks are started there (through srun, or on this host inside a job step)
and how that is spelled for hydra and Open MPI; the check that stops tasks srun started without a PMI; when the
ranks pick MPICH's libfabric layer. Jobs under a real Slurm: tests/hosts/test_slurm.py."""
import pytest

from hvdlite.build_info import check_launcher
from hvdlite.mpi_start import SLURM_PMI_NETWORK_LAYER, started_by_slurms_pmi
from hvdlite.runner.arguments import parse_args
from hvdlite.runner.command import build_command, mpiexec_variables
from hvdlite.runner.hosts import Host
from hvdlite.runner.mpiexec import FORK, HYDRA, OPENMPI, SLURM
from hvdlite.runner.slurm import allocation_hosts, expand_counts, expand_host_list

MPICH = "MPICH Version:      5.0.2\nMPICH Release date: ..."
ALLOCATION = {"SLURM_JOB_ID": "12", "SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2(x2)"}


@pytest.mark.parametrize("text,hosts", [
    ("node[01-03,07],gpu-a1", ["node01", "node02", "node03", "node07", "gpu-a1"]),
    ("rack[1-2]-node[1-2]", ["rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("login", ["login"]),
])
def test_host_lists_expand_as_scontrol_expands_them(text, hosts):
    assert expand_host_list(text) == hosts


@pytest.mark.parametrize("text", ["node[3-1]", "node[01-03", "node]", "node[a-b]", "node[1,,2]", ""])
def test_bad_host_lists_are_errors_naming_them(text):
    with pytest.raises(ValueError, match="Slurm host list"):
        expand_host_list(text)


def test_task_counts_expand_their_repeats():
    assert expand_counts("2(x3),1") == [2, 2, 2, 1]
    assert expand_counts("4") == [4]
    with pytest.raises(ValueError, match="bad item"):
        expand_counts("2(3)")


def test_the_allocation_gives_each_host_its_tasks():
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "h[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}
    assert allocation_hosts(env) == [Host("h1", 2), Host("h2", 2), Host("h3", 1)]
    # CPUs where no task count is given (an allocation made without --ntasks)
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "h[1-2]", "SLURM_JOB_CPUS_PER_NODE": "8(x2)"}
    assert allocation_hosts(env) == [Host("h1", 8), Host("h2", 8)]
    assert allocation_hosts({"SLURM_JOB_NODELIST": "h1"}) is None  # no job: not in an allocation
    with pytest.raises(ValueError, match="2 hosts"):
        allocation_hosts({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "h[1-2]", "SLURM_TASKS_PER_NODE": "2(x3)"})


def _args(monkeypatch, environ, *flags):
    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NODELIST", "SLURM_TASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return parse_args([*flags, "-np", "4", "python", "train.py"])


def test_in_an_allocation_the_ranks_go_to_its_hosts_through_srun(monkeypatch):
    args = _args(monkeypatch, ALLOCATION)
    assert args.launcher == SLURM and args.hosts == [Host("n1", 2), Host("n2", 2)]
    assert build_command(HYDRA, "mpiexec", 4, ["p"], hosts=args.hosts, launcher=SLURM) == \
        ["mpiexec", "-n", "4", "-launcher", "slurm", "-hosts", "n1:2,n2:2", "p"]
    argv = build_command(OPENMPI, "mpirun", 4, ["p"], hosts=args.hosts, launcher=SLURM)
    assert argv[argv.index("plm") - 1:] == ["--prtemca", "plm", "slurm", "-H", "n1:2,n2:2", "p"]
    # srun is told not to bind the one process per host that starts the host's ranks
    assert mpiexec_variables(HYDRA, [], SLURM) == {"HYDRA_LAUNCHER_EXTRA_ARGS": "--cpu-bind=none"}
    assert mpiexec_variables(OPENMPI, [], SLURM) == {"SLURM_CPU_BIND": "none"}


def test_inside_a_job_step_the_ranks_start_on_this_host_without_srun(monkeypatch):
    args = _args(monkeypatch, dict(ALLOCATION, SLURM_STEP_ID="0"))
    assert args.launcher == FORK and args.hosts is None
    assert build_command(HYDRA, "mpiexec", 4, ["p"], launcher=FORK) == \
        ["mpiexec", "-n", "4", "-launcher", "fork", "-rmk", "user", "p"]


def test_hosts_or_a_launcher_program_given_are_used_as_given_in_an_allocation(monkeypatch):
    args = _args(monkeypatch, ALLOCATION, "-H", "a:2,b:2")
    assert args.launcher is None and args.hosts == [Host("a", 2), Host("b", 2)]
    args = _args(monkeypatch, ALLOCATION, "--launcher-exec", "/bin/rsh-like")
    assert args.launcher is None and args.hosts is None
    assert _args(monkeypatch, {}).launcher is None  # no Slurm


def test_tasks_that_srun_started_without_a_pmi_are_stopped_saying_what_srun_needs():
    srun_none = {"SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3"}
    why = check_launcher(MPICH, 1, info={}, environ=srun_none)
    assert "task 3 of 4 that srun started" in why and "srun --mpi=pmi2" in why
    assert check_launcher(MPICH, 4, info={}, environ=srun_none) is None  # MPI saw the others
    assert check_launcher(MPICH, 1, info={}, environ=dict(srun_none, PMI_SIZE="1")) is None  # a PMI started it
    assert check_launcher(MPICH, 1, info={}, environ={"SLURM_STEP_NUM_TASKS": "1"}) is None  # a step of one


def test_mpich_takes_libfabrics_layer_under_slurms_own_pmi_only():
    assert started_by_slurms_pmi({"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "3", "PMI_JOBID": "12.3"})
    # hydra's PMI inside a step (hvdliterun in a batch script), and no Slurm at all
    assert not started_by_slurms_pmi({"SLURM_JOB_ID": "12", "SLURM_STEP_ID": "3", "PMI_JOBID": "kvs_77_0"})
    assert not started_by_slurms_pmi({"PMI_JOBID": "12.3"})
    assert SLURM_PMI_NETWORK_LAYER == {"MPIR_CVAR_CH4_NETMOD": "ofi"}
