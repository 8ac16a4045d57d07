"""hvdliterun --output-filename DIR: every rank's stdout and stderr also go to DIR/rank.N/{stdout,stderr}, byte for
byte (partial lines too), while the console shows what it shows without the flag; the rank's exit code, a raising
rank's traceback and a restarted job's earlier output are kept; nothing is left running. Real 2-rank jobs through
the launcher (mpi4py only, no native core); across hosts: test_launcher_over_ssh.py."""
import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from harness.processes import with_hvdlite_importable
from hvdlite.runner.job import processes_with_environment
from hvdlite.runner.rank_output import padded_rank

pytestmark = pytest.mark.openmpi

PYTHON = sys.executable

# Writes in pieces: a line, a line in two writes with a pause between them (other ranks write meanwhile), stderr,
# and output with no newline at the end.
PIECES = """
import os, sys, time
from mpi4py import MPI
rank = MPI.COMM_WORLD.rank
def out(stream, text):
    stream.write(text)
    stream.flush()
out(sys.stdout, f"first line of rank {rank}\\n")
out(sys.stdout, f"rank {rank} half ")
time.sleep(0.2)
out(sys.stdout, "and the rest\\n")
out(sys.stderr, f"rank {rank} on stderr\\n")
out(sys.stdout, f"rank {rank} ends without a newline")
"""


def _expected_stdout(rank):
    return f"first line of rank {rank}\nrank {rank} half and the rest\nrank {rank} ends without a newline"


def _run(tmp_path, body, *flags, timeout=60):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    token = uuid.uuid4().hex
    env = with_hvdlite_importable(dict(os.environ, HVDLITE_TEST_TOKEN=token))
    result = subprocess.run([PYTHON, "-m", "hvdlite.runner", *flags, PYTHON, str(script)], env=env,
                            capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path))
    return result, token


def test_each_ranks_output_goes_to_its_files_and_to_the_console(tmp_path):
    result, token = _run(tmp_path, PIECES, "-np", "2", "--output-filename", "logs")  # relative to the launcher
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        folder = tmp_path / "logs" / f"rank.{rank}"
        assert sorted(os.listdir(folder)) == ["stderr", "stdout"]
        assert (folder / "stdout").read_text() == _expected_stdout(rank)
        assert (folder / "stderr").read_text() == f"rank {rank} on stderr\n"
        # The console, with both ranks' output interleaved, still has every piece.
        for piece in (f"first line of rank {rank}\n", f"rank {rank} half ", "and the rest\n",
                      f"rank {rank} ends without a newline"):
            assert piece in result.stdout, result.stdout
        assert f"rank {rank} on stderr\n" in result.stderr, result.stderr
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []


def test_a_second_run_into_the_same_folder_starts_the_files_afresh(tmp_path):
    for _ in range(2):
        result, _ = _run(tmp_path, PIECES, "-np", "2", "--output-filename", str(tmp_path / "logs"))
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "logs" / "rank.1" / "stdout").read_text() == _expected_stdout(1)


def test_a_failing_rank_keeps_its_traceback_and_exit_code(tmp_path):
    result, token = _run(tmp_path, """
        import sys
        from mpi4py import MPI
        print("before the failure", flush=True)
        if MPI.COMM_WORLD.rank == 1:
            raise ValueError("rank one gives up")
        MPI.COMM_WORLD.barrier()
    """, "-np", "2", "--output-filename", "logs", timeout=90)
    assert result.returncode != 0
    stderr = (tmp_path / "logs" / "rank.1" / "stderr").read_text()
    assert "Traceback" in stderr and "ValueError: rank one gives up" in stderr, stderr
    assert (tmp_path / "logs" / "rank.1" / "stdout").read_text() == "before the failure\n"
    assert "ValueError: rank one gives up" in result.stderr
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []


# Rank 1 stops its copier (the process that, besides itself, holds its stderr pipe), has a thread wake it a second
# later, and raises: the abort comes while the traceback still waits in the copier, as on a host too busy to run the
# copier in time. A daemon thread, so that only a rank that waits for its copier before it aborts lives to wake it.
LAGGING_COPIER = """
import os, signal, sys, threading
from mpi4py import MPI

def copier_of_stderr():
    pipe = f"pipe:[{os.fstat(2).st_ino}]"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) == os.getpid():
            continue
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == pipe for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:  # gone, or not ours to look at
            pass
    raise RuntimeError("no copier holds this rank's stderr")

print("before the failure", flush=True)
if MPI.COMM_WORLD.rank == 1:
    copier = copier_of_stderr()
    os.kill(copier, signal.SIGSTOP)
    waking = threading.Timer(1.0, os.kill, (copier, signal.SIGCONT))
    waking.daemon = True
    waking.start()
    raise ValueError("rank one gives up")
MPI.COMM_WORLD.barrier()
"""


def test_an_aborting_ranks_traceback_reaches_the_console_though_its_copier_lags(tmp_path):
    try:
        result, token = _run(tmp_path, LAGGING_COPIER, "-np", "2", "--output-filename", "logs", timeout=90)
    finally:  # a copier left stopped (the rank aborted without waiting for it) is woken to end
        subprocess.run(["pkill", "-CONT", "-f", "hvdlite.runner.rank_output " + str(tmp_path)], check=False)
    assert result.returncode != 0
    assert "ValueError: rank one gives up" in result.stderr, result.stderr
    assert result.stdout.count("before the failure") == 2, result.stdout  # print's two writes may interleave
    assert "ValueError: rank one gives up" in (tmp_path / "logs" / "rank.1" / "stderr").read_text()
    assert processes_with_environment("HVDLITE_TEST_TOKEN", token) == []


def test_a_flush_returns_once_the_console_has_read_what_the_program_wrote(tmp_path):
    """Our copier's side of a flush, without MPI: the console is this test's pipe, which it reads only a second after
    the program has written, and then marks that it reads. The program's flush must not return before that."""
    program = textwrap.dedent("""
        import os, sys
        from hvdlite.runner import python_rank
        channel = python_rank.copier_channel()
        sys.stdout.write("x" * 20000)
        python_rank.flush_through_copier(channel)
        with open("answered", "w") as answered:
            answered.write("after reading" if os.path.exists("reading") else "before reading")
    """)
    env = with_hvdlite_importable(dict(os.environ, PMI_RANK="0", PMI_SIZE="1"))
    copier = subprocess.Popen([PYTHON, "-m", "hvdlite.runner.rank_output", "logs", PYTHON, "-c", program], env=env,
                              cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    (tmp_path / "reading").touch()
    console = copier.stdout.read()  # to the end: the program and its copier have both ended
    assert copier.wait(timeout=30) == 0
    assert console == b"x" * 20000
    assert (tmp_path / "logs" / "rank.0" / "stdout").read_text() == "x" * 20000
    assert (tmp_path / "answered").read_text() == "after reading"


def test_the_jobs_exit_code_is_the_ranks_as_without_the_flag(tmp_path):
    body = """
        import sys
        from mpi4py import MPI
        sys.exit(3 if MPI.COMM_WORLD.rank == 1 else 0)
    """
    codes = [_run(tmp_path, body, "-np", "2", *flags)[0].returncode for flags in ((), ("--output-filename", "logs"))]
    assert codes == [3, 3]


def test_a_program_that_does_not_exist_is_reported_in_its_files(tmp_path):
    token = uuid.uuid4().hex
    env = with_hvdlite_importable(dict(os.environ, HVDLITE_TEST_TOKEN=token))
    result = subprocess.run([PYTHON, "-m", "hvdlite.runner", "-np", "2", "--output-filename", "logs",
                             "no-such-program-here"], env=env, capture_output=True, text=True, timeout=60,
                            cwd=str(tmp_path))
    assert result.returncode != 0
    for rank in (0, 1):
        assert "cannot run no-such-program-here" in (tmp_path / "logs" / f"rank.{rank}" / "stderr").read_text()


@pytest.mark.timeout(120)
def test_a_restarted_job_adds_to_the_files_of_its_first_start(tmp_path):
    result, _ = _run(tmp_path, """
        import os, sys
        from mpi4py import MPI
        start = os.environ["HVDLITE_ELASTIC_RESTART"]
        print(f"start {start} rank {MPI.COMM_WORLD.rank}", flush=True)
        MPI.COMM_WORLD.barrier()
        if start == "0":
            sys.exit(3)
    """, "-np", "2", "--max-restarts", "1", "--output-filename", "logs", timeout=100)
    assert result.returncode == 0, result.stderr
    for rank in (0, 1):
        assert (tmp_path / "logs" / f"rank.{rank}" / "stdout").read_text() == \
            f"start 0 rank {rank}\nstart 1 rank {rank}\n"


def test_ranks_are_padded_as_horovodrun_pads_them():
    """Our own spelling rule (no job): the width of the largest rank."""
    assert [padded_rank(r, 1) for r in (0,)] == ["0"]
    assert [padded_rank(r, 10) for r in (0, 9)] == ["0", "9"]
    assert [padded_rank(r, 11) for r in (0, 3, 10)] == ["00", "03", "10"]
    assert padded_rank(7, 1000) == "007"
