"""hvdliterun: command lines for hydra and Open MPI (pure), and real 2-rank jobs (mpi4py only, no native core)."""
import ast
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from harness.processes import read_until, with_hvdlite_importable

import hvdlite
import hvdlite.runner
from hvdlite.runner import binding
from hvdlite.runner.arguments import parse_args
from hvdlite.runner.command import abort_on_exception, build_command, mpiexec_variables
from hvdlite.runner.hosts import Host, parse_host_list, rank_placement, read_hostfile
from hvdlite.runner.job import processes_with_environment
from hvdlite.runner.mpiexec import HYDRA, OPENMPI, flavour_from_version_text
from hvdlite.runner.reachability import launcher_probe

PYTHON = sys.executable


# ---- command lines (pure) ----

def test_hydra_spells_hosts_env_and_count():
    argv = build_command(HYDRA, "/m/mpiexec", 4, ["prog", "x"], env={"HVDLITE_CYCLE_TIME": "2"},
                         hosts=[Host("a", 2), Host("b", 2)])
    assert argv == ["/m/mpiexec", "-n", "4", "-hosts", "a:2,b:2", "-genv", "HVDLITE_CYCLE_TIME", "2", "prog", "x"]


def test_openmpi_spells_hosts_env_mapping_by_slot_and_root():
    # By slot: hosts fill in turn (Open MPI's default, by core, put all ranks of -H a:1,b:1 on a), oversubscribing
    # allowed as hydra allows it (the placement itself: test_launcher_over_ssh.py under make test-openmpi).
    argv = build_command(OPENMPI, "mpirun", 4, ["prog"], env={"OMP_NUM_THREADS": "1"}, hosts=[Host("a", 2)],
                         forward_env=["HOROVOD_TIMELINE", "OMP_NUM_THREADS"], run_as_root=True)
    assert argv == ["mpirun", "-np", "4", "--map-by", "slot:OVERSUBSCRIBE", "--allow-run-as-root", "-H", "a:2",
                    "-x", "OMP_NUM_THREADS=1", "-x", "HOROVOD_TIMELINE", "prog"]


def test_a_launcher_program_is_spelled_for_hydra_and_open_mpi():
    hydra = build_command(HYDRA, "mpiexec", 2, ["prog"], hosts=[Host("a", 1), Host("b", 1)], launcher_exec="/x/rsh")
    assert hydra[3:9] == ["-launcher", "ssh", "-launcher-exec", "/x/rsh", "-hosts", "a:1,b:1"], hydra
    openmpi = build_command(OPENMPI, "mpirun", 2, ["prog"], hosts=[Host("a", 1)], launcher_exec="/x/rsh")
    assert openmpi[5:8] == ["--mca", "plm_rsh_agent", "/x/rsh"], openmpi


def test_network_interfaces_and_further_mpiexec_options_are_spelled_for_hydra_and_open_mpi():
    args = parse_args(["-np", "2", "-H", "a:1,b:1", "--network-interface", "eth1, ib0", "--mpi-args",
                       "-genv X 'one two'", "prog"])
    assert args.interfaces == ["eth1", "ib0"] and args.mpi_args == ["-genv", "X", "one two"]
    hydra = build_command(HYDRA, "mpiexec", 2, ["prog"], hosts=args.hosts, interfaces=args.interfaces,
                          mpi_args=args.mpi_args)
    assert hydra[:5] == ["mpiexec", "-n", "2", "-iface", "eth1"] and hydra[-4:] == ["-genv", "X", "one two", "prog"]
    for name, value in (("FI_TCP_IFACE", "eth1"), ("UCX_NET_DEVICES", "eth1,ib0"), ("NCCL_SOCKET_IFNAME", "eth1,ib0"),
                        ("HVDLITE_NETWORK_INTERFACES", "eth1,ib0")):
        assert hydra[hydra.index(name) - 1:hydra.index(name) + 2] == ["-genv", name, value], hydra
    openmpi = build_command(OPENMPI, "mpirun", 2, ["prog"], hosts=args.hosts, interfaces=args.interfaces,
                            mpi_args=["--mca", "btl", "self,tcp"])
    assert openmpi[5:11] == ["--mca", "btl_tcp_if_include", "eth1,ib0", "--prtemca", "prte_if_include",
                             "eth1,ib0"], openmpi
    assert "NCCL_SOCKET_IFNAME=eth1,ib0" in openmpi and "HVDLITE_NETWORK_INTERFACES=eth1,ib0" in openmpi
    assert openmpi[-4:] == ["--mca", "btl", "self,tcp", "prog"]
    with pytest.raises(SystemExit):
        parse_args(["-np", "2", "--mpi-args", "-genv 'unclosed", "prog"])


def test_version_and_check_build_need_no_job():
    version = subprocess.run([PYTHON, "-m", "hvdlite.runner", "--version"], capture_output=True, text=True,
                             timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"hvdliterun {hvdlite.__version__}", version
    done = subprocess.run([PYTHON, "-m", "hvdlite.runner", "--check-build"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [line.strip() for line in done.stdout.splitlines()]
    from importlib.util import find_spec
    for name, module in (("TensorFlow", "tensorflow"), ("PyTorch", "torch")):
        mark = "[X]" if find_spec(module) else "[ ]"
        assert any(line.startswith(f"{mark} {name}") for line in lines), (name, done.stdout)
    # In a process of its own: asking loads the core and starts MPI.
    ask = "from hvdlite.gpu import gpu_status; print(gpu_status()['nccl_collectives'])"
    asked = subprocess.run([PYTHON, "-c", ask], capture_output=True, text=True, timeout=60)
    nccl = "[X] NCCL" if asked.stdout.strip() == "True" else "[ ] NCCL"
    assert any(line.startswith(nccl) for line in lines), done.stdout
    assert lines.count("[X] MPI") == 1 and any(line.startswith("[X] MPI (") for line in lines), done.stdout
    assert lines.count("[ ] Gloo") == 2, done.stdout


@pytest.mark.parametrize("hosts,num_proc,expected", [
    ([Host("a", 2), Host("b", 2)], 4, {"a": [0, 1], "b": [2, 3]}),
    ([Host("a", 1), Host("b", 1)], 4, {"a": [0, 2], "b": [1, 3]}),        # around again: round-robin
    ([Host("a", 2), Host("b")], 5, {"a": [0, 1, 3, 4], "b": [2]}),
    ([Host("a", 3), Host("b", 3)], 2, {"a": [0, 1], "b": []}),
])
def test_rank_placement_fills_each_hosts_slots_in_turn(hosts, num_proc, expected):
    assert rank_placement(hosts, num_proc) == expected


@pytest.mark.parametrize("hosts,num_proc,expected", [  # as Open MPI 5 placed them (test_launcher_over_ssh checks it)
    ([Host("a", 2), Host("b", 2)], 3, {"a": [0, 1], "b": [2]}),
    ([Host("a", 1), Host("b", 1)], 3, {"a": [0, 1], "b": [2]}),
    ([Host("a", 2), Host("b", 1)], 5, {"a": [0, 1, 2], "b": [3, 4]}),
    ([Host("a", 1), Host("b", 2)], 7, {"a": [0, 1, 2], "b": [3, 4, 5, 6]}),
])
def test_open_mpi_spreads_the_ranks_beyond_the_slots_evenly(hosts, num_proc, expected):
    assert rank_placement(hosts, num_proc, spread_extra=True) == expected


def test_openmpi_without_root_has_no_root_flag():
    assert "--allow-run-as-root" not in build_command(OPENMPI, "mpirun", 2, ["prog"])


@pytest.mark.parametrize("lines,flavour,expected", [
    ("a:2\nb:2\n", HYDRA, ["-f", "HOSTFILE"]),
    ("a slots=2\nb slots=2\n", OPENMPI, ["--hostfile", "HOSTFILE"]),
    ("a\nb\n", HYDRA, ["-f", "HOSTFILE"]),
    ("a slots=2\n# comment\nb slots=3\n", HYDRA, ["-hosts", "a:2,b:3"]),  # Horovod's style, inlined for hydra
    ("a:2\nb\n", OPENMPI, ["-H", "a:2,b"]),
])
def test_hostfile_passed_through_when_its_style_suits_else_inlined(tmp_path, lines, flavour, expected):
    path = tmp_path / "hosts"
    path.write_text(lines)
    argv = build_command(flavour, "mpiexec", 2, ["prog"], hostfile=read_hostfile(str(path)))
    expected = [str(path) if word == "HOSTFILE" else word for word in expected]
    start = argv.index(expected[0])
    assert argv[start:start + 2] == expected


def test_host_list_parsing_and_errors(tmp_path):
    assert parse_host_list("a:2, b") == [Host("a", 2), Host("b")]
    with pytest.raises(ValueError):
        parse_host_list("a:0")
    bad = tmp_path / "hosts"
    bad.write_text("a slots=two\n")
    with pytest.raises(ValueError, match="hosts:1"):
        read_hostfile(str(bad))


RANK = ["-m", "hvdlite.runner.python_rank"]


@pytest.mark.parametrize("command,expected", [
    (["python", "train.py", "--lr", "1"], ["python", *RANK, "train.py", "--lr", "1"]),
    (["/usr/bin/python3.11", "-u", "t.py"], ["/usr/bin/python3.11", "-u", *RANK, "t.py"]),
    (["python", "-W", "ignore", "-m", "pkg.train"], ["python", "-W", "ignore", *RANK, "-m", "pkg.train"]),
    (["python3", "-c", "print(1)"], ["python3", *RANK, "-c", "print(1)"]),
    (["python", "-m", "mpi4py", "t.py"], ["python", "-m", "mpi4py", "t.py"]),
    (["python", *RANK, "t.py"], ["python", *RANK, "t.py"]),
    (["python", "-um", "pkg"], ["python", "-um", "pkg"]),   # combined flags: not guessed at
    (["python"], ["python"]),
    (["./train.sh", "x"], ["./train.sh", "x"]),
])
def test_python_programs_run_as_python_ranks_so_an_exception_aborts_the_job(command, expected):
    assert abort_on_exception(command) == expected


def test_flavour_is_read_from_the_version_text():
    assert flavour_from_version_text("HYDRA build details:\n    Version: 4.2.0") == HYDRA
    assert flavour_from_version_text("mpiexec (OpenRTE) 4.1.4\n") == OPENMPI
    assert flavour_from_version_text("mpirun (Open MPI) 5.0.3") == OPENMPI
    with pytest.raises(RuntimeError):
        flavour_from_version_text("something else")


@pytest.mark.parametrize("mode,num_proc,hosts,cpus,expected_sets,expected_share", [
    ("auto", 2, None, [0, 1], [[0], [1]], 1),
    ("auto", 2, None, list(range(8)), [[0, 1, 2, 3], [4, 5, 6, 7]], 4),
    ("auto", 3, None, list(range(8)), [[0, 1], [2, 3], [4, 5]], 2),
    ("auto", 2, None, [4, 6, 9], [[4], [6]], 1),                     # only the CPUs this process may use
    ("auto", 3, None, [0, 1], None, 0),                              # more ranks than CPUs: the scheduler's
    ("cpus", 3, None, [0, 1], [[0], [1], [0]], 1),                   # asked for: ranks share CPUs in turn
    ("none", 2, None, [0, 1], None, 0),
    ("auto", 4, [Host("a", 2), Host("b", 2)], [0, 1], None, 0),      # other hosts' CPUs are unknown here
    ("cpus", 4, [Host("a", 2), Host("b", 2)], list(range(8)), None, 4),
    ("cpus", 4, [Host("a"), Host("b")], list(range(8)), None, 4),    # no slots: 2 ranks a host
])
def test_binding_plan_shares_the_allowed_cpus(mode, num_proc, hosts, cpus, expected_sets, expected_share):
    placement = binding.plan(mode, num_proc, hosts, cpus)
    assert (placement.cpu_sets, placement.per_rank) == (expected_sets, expected_share)


def test_hardware_threads_of_a_core_stay_together_in_a_share():
    siblings = {cpu: (0, cpu % 4) for cpu in range(8)}  # 4 cores, threads numbered i and i + 4 (Linux's usual)
    cpus = binding.ordered_by_core(range(8), siblings.get)
    assert cpus == [0, 4, 1, 5, 2, 6, 3, 7]
    assert binding.plan("auto", 2, None, cpus).cpu_sets == [[0, 4, 1, 5], [2, 6, 3, 7]]
    assert binding.ordered_by_core([3, 1, 2], lambda cpu: None) == [1, 2, 3]  # no topology: by number
    assert binding.allowed_cpus() and set(binding.allowed_cpus()) == set(os.sched_getaffinity(0))


def test_binding_is_spelled_for_hydra_and_open_mpi():
    local = binding.plan("auto", 2, None, [0, 1, 2, 3])
    assert binding.binding_arguments(HYDRA, local) == ["-bind-to", "user:0+1,2+3"]
    assert binding.binding_arguments(OPENMPI, local) == []  # Open MPI binds by itself
    remote = binding.plan("cpus", 4, [Host("a", 2), Host("b", 2)], [0, 1, 2, 3])
    assert binding.binding_arguments(HYDRA, remote) == ["-bind-to", "hwthread:2"]
    assert binding.binding_arguments(OPENMPI, remote) == ["--use-hwthread-cpus", "--map-by", "slot:PE=2",
                                                          "--bind-to", "hwthread"]
    argv = build_command(OPENMPI, "mpirun", 4, ["prog"], binding=binding.binding_arguments(OPENMPI, remote))
    assert argv[3:8] == ["--use-hwthread-cpus", "--map-by", "slot:PE=2:OVERSUBSCRIBE", "--bind-to", "hwthread"]
    off = binding.plan("none", 2, None, [0, 1])
    assert binding.binding_arguments(HYDRA, off) == []
    assert binding.binding_arguments(OPENMPI, off) == ["--bind-to", "none"]
    argv = build_command(HYDRA, "mpiexec", 2, ["prog"], binding=binding.binding_arguments(HYDRA, local))
    assert argv == ["mpiexec", "-n", "2", "-bind-to", "user:0+1,2+3", "prog"]


def test_ssh_port_and_key_reach_each_mpis_ssh_and_the_host_check(tmp_path):
    key = tmp_path / "id_test"
    key.write_text("not read here")
    args = parse_args(["-np", "2", "-H", "a:1,b:1", "-p", "2222", "-i", str(key), "prog"])
    assert args.ssh_args == ["-p", "2222", "-i", str(key)]
    assert mpiexec_variables(HYDRA, args.ssh_args) == {"HYDRA_LAUNCHER_EXTRA_ARGS": f"-p 2222 -i {key}"}
    assert mpiexec_variables(OPENMPI, args.ssh_args) == {} and mpiexec_variables(HYDRA, []) == {}
    argv = build_command(OPENMPI, "mpirun", 2, ["prog"], ssh_args=args.ssh_args)
    assert argv[argv.index("plm_ssh_args") - 1:argv.index("plm_ssh_args") + 2] == [
        "--prtemca", "plm_ssh_args", f"-p 2222 -i {key}"]
    assert "-p" not in build_command(HYDRA, "mpiexec", 2, ["prog"], ssh_args=args.ssh_args)  # hydra: environment
    assert launcher_probe(None, "a", args.ssh_args)[-6:] == ["-p", "2222", "-i", str(key), "a", "true"]
    assert launcher_probe("/bin/rsh-like", "a", args.ssh_args) == ["/bin/rsh-like", "-p", "2222", "-i", str(key),
                                                                   "a", "true"]


@pytest.mark.parametrize("flags, message", [
    (["-p", "0"], "--ssh-port 0: not a port number"), (["-p", "70000"], "--ssh-port 70000: not a port number"),
    (["-i", "/no/such/key"], "--ssh-identity-file /no/such/key: no such file")])
def test_bad_ssh_port_or_key_is_a_usage_error(capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["-np", "2", *flags, "prog"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_bind_to_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["-np", "2", "--bind-to", "socket", "python", "t.py"])
    assert exit_info.value.code == 2
    assert "--bind-to" in capsys.readouterr().err


def test_tuning_flags_become_hvdlite_variables():
    args = parse_args(["-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5", "--autotune",
                       "--log-level", "debug", "--timeline-filename", "/tmp/t.json", "python", "t.py", "--autotune"])
    assert args.tuning_env == {"HVDLITE_FUSION_THRESHOLD": str(32 << 20), "HVDLITE_CYCLE_TIME": "2.5",
                               "HVDLITE_AUTOTUNE": "1", "HVDLITE_LOG_LEVEL": "debug",
                               "HVDLITE_TIMELINE": "/tmp/t.json"}
    assert args.command == ["python", "t.py", "--autotune"]  # the program's own flags stay the program's


def test_horovodruns_hierarchical_allreduce_flag_picks_that_algorithm():
    assert parse_args(["-np", "2", "--hierarchical-allreduce", "prog"]).tuning_env == {
        "HVDLITE_ALLREDUCE_ALGORITHM": "hierarchical"}


def test_bad_tuning_value_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["-np", "2", "--cycle-time-ms", "soon", "python", "t.py"])
    assert exit_info.value.code == 2
    assert "--cycle-time-ms" in capsys.readouterr().err


# ---- real jobs through the launcher ----

def _job_env(token, **extra):
    env = dict(os.environ, HVDLITE_TEST_TOKEN=token, **extra)
    env.pop("PYTHONUNBUFFERED", None)  # unbuffered ranks write a line in pieces, which hydra interleaves
    env = with_hvdlite_importable(env)
    env.pop("OMP_NUM_THREADS", None)
    return env


def _processes_with_token(token):
    """Live processes (not zombies) whose environment carries the test's token: ranks, proxies, mpiexec."""
    return processes_with_environment("HVDLITE_TEST_TOKEN", token)


def _write_script(tmp_path, body):
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


def _launch(tmp_path, body, *flags, timeout=60):
    token = uuid.uuid4().hex
    command = [PYTHON, "-m", "hvdlite.runner", "-np", "2", *flags, PYTHON, _write_script(tmp_path, body)]
    started = time.monotonic()
    result = subprocess.run(command, env=_job_env(token), capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - started, token


def test_two_ranks_run_and_receive_tuning_flags_as_environment(tmp_path):
    result, _, token = _launch(tmp_path, """
        import os
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        print("RANK", comm.rank, comm.size, os.environ["HVDLITE_CYCLE_TIME"], os.environ["HVDLITE_FUSION_THRESHOLD"],
              os.environ["OMP_NUM_THREADS"], flush=True)
    """, "--cycle-time-ms", "2.5", "--fusion-threshold-mb", "8")
    assert result.returncode == 0, result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("RANK"))
    assert lines == [f"RANK {rank} 2 2.5 {8 << 20} 1" for rank in (0, 1)]
    assert _processes_with_token(token) == []


def test_further_mpiexec_options_reach_mpiexec(tmp_path):
    """--mpi-args, as a user passes an option hvdliterun has no flag for: here one setting a variable on the ranks,
    spelled for the MPI at hand."""
    from hvdlite.runner.mpiexec import detect_flavour, find_mpiexec
    flavour = detect_flavour(find_mpiexec(None))
    option = "-genv MY_FLAG 'seven eight'" if flavour == HYDRA else "-x 'MY_FLAG=seven eight'"
    result, _, _ = _launch(tmp_path, """
        import os
        from mpi4py import MPI
        print("RANK", MPI.COMM_WORLD.rank, os.environ.get("MY_FLAG"), flush=True)
    """, "--mpi-args", option)
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("RANK")) == [
        "RANK 0 seven eight", "RANK 1 seven eight"], result.stdout


def test_a_rank_slow_to_start_mpi_holds_the_job_up_but_is_not_ended(tmp_path):
    """--start-timeout runs from when the last rank begins MPI's start-up: a rank that takes longer than it to get
    there (loading data, importing a framework) is waited for, and the job runs to its end."""
    result, _, _ = _launch(tmp_path, """
        import os, time
        if (os.environ.get("PMI_RANK") or os.environ.get("OMPI_COMM_WORLD_RANK")) == "1":
            time.sleep(6)
        import hvdlite as hvd
        hvd.init()
        print("UP", hvd.rank(), flush=True)
    """, "--start-timeout", "2")
    assert result.returncode == 0, result.stderr
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("UP")) == ["UP 0", "UP 1"]
    assert "start-up" not in result.stderr, result.stderr


_PRINT_AFFINITY = """
    import os
    from mpi4py import MPI
    sets = MPI.COMM_WORLD.gather(sorted(os.sched_getaffinity(0)))
    if sets:
        print("AFFINITY", sets, flush=True)
"""


def _rank_affinities(tmp_path, *flags):
    result, _, _ = _launch(tmp_path, _PRINT_AFFINITY, *flags)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("AFFINITY"))
    return ast.literal_eval(line[len("AFFINITY"):].strip())


def test_ranks_are_bound_to_disjoint_shares_of_the_cpus_by_default(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    sets = _rank_affinities(tmp_path)
    if len(allowed) >= 2:  # a CPU or more for each of the 2 ranks: bound, each to its own half
        assert all(len(cpus) == len(allowed) // 2 and set(cpus) <= set(allowed) for cpus in sets), sets
        assert not set(sets[0]) & set(sets[1]), sets
    else:  # one CPU: auto leaves placement to the scheduler
        assert sets == [allowed, allowed]
    assert _rank_affinities(tmp_path, "--bind-to", "none") == [allowed, allowed]


def test_exit_code_of_the_job_is_forwarded(tmp_path):
    result, _, _ = _launch(tmp_path, """
        import sys
        from mpi4py import MPI
        MPI.COMM_WORLD.Barrier()
        sys.exit(7)
    """)
    assert result.returncode == 7, result.stderr


def test_verbose_prints_the_exact_mpiexec_command(tmp_path):
    result, _, _ = _launch(tmp_path, "print('hello', flush=True)\n", "--verbose", "--log-level", "info")
    assert result.returncode == 0
    assert "-m hvdlite.runner.python_rank" in result.stderr and "HVDLITE_LOG_LEVEL" in result.stderr


def test_dry_run_prints_the_command_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    result, _, _ = _launch(tmp_path, f"open({str(marker)!r}, 'w').close()\n", "--dry-run")
    assert result.returncode == 0
    assert "mpiexec" in result.stdout and "job.py" in result.stdout
    assert not marker.exists()


_PEER_WAITS_FOREVER = """
    import os, sys, time
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    comm.Barrier()
    if comm.rank == 1:
        time.sleep(0.5)
        {failure}
    comm.recv(source=1)   # rank 0 would wait for rank 1 forever
"""


@pytest.mark.parametrize("failure", [
    "raise RuntimeError('rank 1 fails')",
    "os.kill(os.getpid(), 9)",
])
def test_a_dying_rank_ends_the_whole_job_quickly_and_leaves_no_process(tmp_path, failure):
    result, elapsed, token = _launch(tmp_path, _PEER_WAITS_FOREVER.format(failure=failure), timeout=60)
    assert result.returncode != 0
    assert elapsed < 30, f"took {elapsed:.1f} s"
    time.sleep(0.5)
    assert _processes_with_token(token) == []


_SLEEPS = """
    import time
    from mpi4py import MPI
    print("UP", MPI.COMM_WORLD.rank, flush=True)
    time.sleep(300)
"""


def _wait_until_both_ranks_are_up(launcher):
    read_until(launcher, "UP", 2, "both ranks were up")


def test_sigterm_to_the_launcher_ends_the_job_and_is_reported_in_the_exit_code(tmp_path):
    token = uuid.uuid4().hex
    script = _write_script(tmp_path, _SLEEPS)
    launcher = subprocess.Popen([PYTHON, "-m", "hvdlite.runner", "-np", "2", PYTHON, script], env=_job_env(token),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _wait_until_both_ranks_are_up(launcher)
    started = time.monotonic()
    launcher.send_signal(signal.SIGTERM)
    returncode = launcher.wait(timeout=30)
    assert returncode != 0
    assert time.monotonic() - started < 30
    time.sleep(0.5)
    assert _processes_with_token(token) == []


def test_processes_a_rank_leaves_behind_are_killed(tmp_path):
    # A rank starts a daemon in a session of its own; mpiexec knows nothing of it, the launcher still does.
    # (The daemon lets go of stdout/stderr as daemons do: hydra waits for every holder of a rank's output.)
    result, _, token = _launch(tmp_path, """
        import subprocess, sys
        from mpi4py import MPI
        if MPI.COMM_WORLD.rank == 0:
            subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    """)
    assert result.returncode == 0, result.stderr
    time.sleep(0.5)
    assert _processes_with_token(token) == []


def test_killing_the_launcher_outright_still_ends_the_job(tmp_path):
    token = uuid.uuid4().hex
    script = _write_script(tmp_path, _SLEEPS)
    launcher = subprocess.Popen([PYTHON, "-m", "hvdlite.runner", "-np", "2", PYTHON, script], env=_job_env(token),
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    _wait_until_both_ranks_are_up(launcher)
    launcher.kill()  # SIGKILL: no handler runs; mpiexec learns of it through PR_SET_PDEATHSIG
    launcher.wait()
    deadline = time.monotonic() + 30
    while _processes_with_token(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _processes_with_token(token) == []


def test_a_job_past_its_time_limit_is_ended_and_leaves_no_process():
    """run_job's time limit (the launcher's own short jobs, such as removing a given-up job's commits on its
    hosts): mpiexec and its ranks are killed, and the exit code is timeout(1)'s."""
    from hvdlite.runner.job import processes_of_job, run_job
    job = uuid.uuid4().hex
    started = time.monotonic()
    outcome = run_job([os.path.join(os.path.dirname(PYTHON), "mpiexec"), "-n", "2", "sleep", "60"],
                      dict(os.environ), job, timeout=2)
    assert outcome.code == 124 and not outcome.interrupted and time.monotonic() - started < 15, outcome
    assert processes_of_job(job) == []


def test_every_report_sent_before_the_job_ends_is_heard():
    """Ranks report to the launcher over TCP, the last ones maybe just before they exit: when the launcher stops
    listening (the job has ended), every report that reached its port has been handed over, in order. 41 ranks'
    reports arrive at once, and it stops listening right after."""
    from hvdlite.runner.report_port import listen_for_ranks
    from hvdlite.runner.protocol import COMMITTED, LAUNCHER_VARIABLE, SECRET_VARIABLE, tell_launcher
    heard = []
    port, close = listen_for_ranks(heard.append, "s3cret")
    environ = {LAUNCHER_VARIABLE: f"{socket.gethostname()}:1:1:{port}", SECRET_VARIABLE: "s3cret"}
    assert all(tell_launcher(COMMITTED, environ) for _ in range(40))
    assert tell_launcher("starting 7", environ)
    close()
    assert heard == [COMMITTED] * 40 + ["starting 7"]
    assert not tell_launcher(COMMITTED, environ), "the port still answers after close"
    assert not tell_launcher(COMMITTED, {}), "told a launcher that does not exist"


# ---- horovodrun's command lines (parsing only: our own mapping) ----

# Every flag of horovodrun (horovod/runner/launch.py), each with a value where it takes one, but -v (horovodrun's
# --version; hvdliterun's -v is --verbose), -cb and --check-build (which end the parse), and --gloo and --jsrun
# (refused, below).
HOROVODRUN_FLAGS = [
    ["--disable-cache"], ["--start-timeout", "30"], ["--network-interfaces", "eth0,eth1"],
    ["--network-interface", "eth0"], ["--output-filename", "logs"], ["--verbose"], ["--config-file", "{config}"],
    ["-p", "2222"], ["--ssh-port", "2222"], ["-i", "{key}"], ["--ssh-identity-file", "{key}"],
    ["--fusion-threshold-mb", "32"], ["--cycle-time-ms", "2"], ["--cache-capacity", "512"],
    ["--hierarchical-allreduce"], ["--hierarchical-allgather"], ["--no-hierarchical-allgather"], ["--autotune"],
    ["--no-autotune"], ["--autotune-log-file", "tune.csv"], ["--autotune-warmup-samples", "3"],
    ["--autotune-steps-per-sample", "10"], ["--autotune-bayes-opt-max-samples", "20"],
    ["--autotune-gaussian-process-noise", "0.8"], ["--min-np", "2"], ["--min-num-proc", "2"], ["--max-np", "4"],
    ["--max-num-proc", "4"], ["--slots-per-host", "2"], ["--elastic-timeout", "600"], ["--reset-limit", "3"],
    ["--blacklist-cooldown-range", "10", "100"], ["--timeline-filename", "t.json"], ["--timeline-mark-cycles"],
    ["--no-timeline-mark-cycles"], ["--no-stall-check"], ["--stall-check"],
    ["--stall-check-warning-time-seconds", "60"], ["--stall-check-shutdown-time-seconds", "120"],
    ["--mpi-threads-disable"], ["--no-mpi-threads-disable"], ["--mpi-args", "-genv X 1"], ["--tcp"],
    ["--binding-args", "-bind-to core"], ["--num-nccl-streams", "2"], ["--thread-affinity", "1"],
    ["--gloo-timeout-seconds", "30"], ["--log-level", "INFO"], ["--log-with-timestamp"], ["--log-without-timestamp"],
    ["-prefix-timestamp"], ["--prefix-output-with-timestamp"], ["--log-hide-timestamp"], ["--no-log-hide-timestamp"],
    ["-H", "a:2"], ["-hostfile", "{hostfile}"], ["--hostfile", "{hostfile}"], ["--mpi"],
]


@pytest.mark.parametrize("flag", HOROVODRUN_FLAGS, ids=lambda flag: flag[0])
def test_every_horovodrun_flag_is_taken(tmp_path, flag):
    files = {"config": tmp_path / "c.yaml", "key": tmp_path / "id_key", "hostfile": tmp_path / "hosts"}
    files["config"].write_text("params:\n  cycle_time_ms: 3\n")
    files["key"].write_text("")
    files["hostfile"].write_text("a slots=2\n")
    given = [word.format(**files) for word in flag]
    args = parse_args(["-np", "2", *given, "python", "train.py"])
    assert args.command == ["python", "train.py"]


def test_horovodruns_names_set_hvdlites_settings():
    args = parse_args(["-np", "2", "--stall-check-warning-time-seconds", "9", "--stall-check-shutdown-time-seconds",
                       "30", "--no-autotune", "--stall-check", "--no-timeline-mark-cycles", "--min-num-proc", "2",
                       "--max-num-proc", "4", "--host-discovery-script", "./discover.sh", "--network-interfaces",
                       "eth0,eth1", "--network-interface", "ib0", "--network-interface", "eth0", "python", "t.py"])
    assert args.tuning_env == {"HVDLITE_STALL_CHECK_TIME_SECONDS": "9", "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30",
                               "HVDLITE_AUTOTUNE": "0", "HVDLITE_STALL_CHECK_DISABLE": "0",
                               "HVDLITE_TIMELINE_MARK_CYCLES": "0"}
    assert (args.min_np, args.max_np) == (2, 4)
    assert args.interfaces == ["eth0", "eth1", "ib0"]
    assert args.warnings == []


def test_horovodrun_flags_hvdlite_has_no_use_for_are_reported_with_the_reason():
    args = parse_args(["-np", "2", "--num-nccl-streams", "2", "--hierarchical-allgather", "-prefix-timestamp",
                       "--num-nccl-streams", "4", "--mpi", "--disable-cache", "python", "t.py"])
    assert [warning.split(" ignored: ")[0] for warning in args.warnings] == [
        "--num-nccl-streams", "--hierarchical-allgather", "-prefix-timestamp"]
    assert all(warning.split(" ignored: ")[1] for warning in args.warnings)
    assert args.tuning_env == {}


@pytest.mark.parametrize("flag, message", [("--gloo", "hvdlite runs on MPI only"),
                                           ("--jsrun", "start the job with jsrun itself")])
def test_horovodrun_controllers_hvdlite_cannot_use_are_refused(capsys, flag, message):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["-np", "2", flag, "python", "t.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_binding_args_replace_hvdlites_binding(capsys):
    args = parse_args(["-np", "2", "--binding-args", "-bind-to core -map-by socket", "python", "t.py"])
    assert args.bind_to == binding.NONE and args.mpi_args == ["-bind-to", "core", "-map-by", "socket"]
    with pytest.raises(SystemExit):
        parse_args(["-np", "2", "--bind-to", "cpus", "--binding-args", "-bind-to core", "python", "t.py"])
    assert "either --bind-to or --binding-args" in capsys.readouterr().err


def test_tcp_asks_the_ranks_for_tcp_unless_the_user_chose(monkeypatch):
    from hvdlite.runner.__main__ import job_environment
    args = parse_args(["-np", "2", "--tcp", "python", "t.py"])
    env = job_environment(args, {"UCX_TLS": "self,tcp"})
    assert {name: env.pop(name) for name in ("MASTER_ADDR", "MASTER_PORT")}["MASTER_ADDR"] == "127.0.0.1"
    assert env == {"OMP_NUM_THREADS": "1", "FI_PROVIDER": "tcp", "NCCL_IB_DISABLE": "1"}
    argv = build_command(OPENMPI, "mpirun", 2, ["prog"], tcp_only=True)
    assert argv[argv.index("pml"):argv.index("pml") + 4] == ["pml", "ob1", "--mca", "btl"]
    assert argv[argv.index("btl") + 1] == "self,sm,tcp"
