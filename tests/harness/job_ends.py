"""A job started on simulated hosts until every rank says it runs, then watched as a test ends it (a rank killed, a
host killed or cut off): it must end on every host within a bound, fail, and leave no process behind."""
import re
import subprocess
import time


def start_until_every_rank_says(hosts, command, ranks, word, env, cwd, within_s):
    """Starts command in h1 and reads its output until each of ranks ranks printed ``WORD <rank>`` (counted anywhere
    in the output: mpiexec may splice two ranks' lines into one); returns (process, lines read)."""
    process = hosts.popen("h1", command, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, start_new_session=True)
    lines = []
    deadline = time.monotonic() + within_s
    while len(set(re.findall(rf"{word} (\d+)", "".join(lines)))) < ranks:
        line = process.stdout.readline()
        if not line or time.monotonic() > deadline:
            hosts.kill_processes()
            raise AssertionError("the job did not start:\n" + "".join(lines)[-6000:])
        lines.append(line)
    return process, lines


def wait_for_the_end(hosts, process, lines, started, within_s):
    """Waits for the job to end within within_s of started; checks that it failed and left no process on any host.
    Returns (seconds it took, its whole output)."""
    try:
        rest, _ = process.communicate(timeout=max(0.0, started + within_s - time.monotonic()))
    except subprocess.TimeoutExpired:
        hosts.kill_processes()
        rest, _ = process.communicate()
        raise AssertionError(f"the job still ran {within_s} s later:\n" + ("".join(lines) + rest)[-6000:])
    took = time.monotonic() - started
    output = "".join(lines) + rest
    assert process.returncode != 0, output[-6000:]
    time.sleep(1)  # processes just killed may still be leaving
    left = {host: pids for host in hosts.names if (pids := hosts.pids(host))}
    assert not left, f"processes left behind: {left}\n{output[-3000:]}"
    return took, output
