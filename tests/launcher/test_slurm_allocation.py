"""Reading a Slurm allocation's hosts and slots from the variables Slurm sets in a job: our parsing of Slurm's
compressed host lists and task counts, on no Slurm (a logic test: the expected lists are what `scontrol show
hostnames` of Slurm 22.05 prints for the same strings). Jobs under a real Slurm are tested elsewhere."""
import pytest

from hvdlite.runner.hosts import Host
from hvdlite.runner.slurm import allocation_hosts, expand_counts, expand_host_list


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
