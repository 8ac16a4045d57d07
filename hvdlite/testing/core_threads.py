"""hvdlite's background threads in this process (named hvdlite-core, as top -H and perf show them), read from /proc:
their CPU time and how often they were switched out, for tests and benchmarks that check what an idle or a busy core
costs the computation beside it."""
import os


def _files(name):
    """The text of /proc/self/task/TID/<name> of each thread named hvdlite-core."""
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() != "hvdlite-core":
                    continue
            with open(f"/proc/self/task/{task}/{name}") as f:
                yield f.read()
        except OSError:  # the thread ended meanwhile
            continue


def cpu_seconds():
    """CPU seconds those threads have used so far."""
    ticks = 0
    for stat in _files("stat"):
        fields = stat.rsplit(")", 1)[1].split()  # from the state on: utime and stime are 11 and 12
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def switches():
    """How many times those threads have been switched out so far (woken again each time)."""
    return sum(int(line.split()[1]) for status in _files("status") for line in status.splitlines()
               if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")))
