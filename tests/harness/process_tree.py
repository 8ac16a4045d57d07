"""What a rank can say about the processes above it: the command lines of its ancestors (in a rank started
through a cluster engine: MPI's proxy, then the engine's task or actor). The engine tests send these functions to
the ranks by value (cloudpickle.register_pickle_by_value): the ranks cannot import the tests' modules."""
import os


def parent_of(pid):
    with open(f"/proc/{pid}/stat") as stream:
        return int(stream.read().rsplit(")", 1)[1].split()[1])


def command_line(pid):
    with open(f"/proc/{pid}/cmdline", "rb") as stream:
        return stream.read().replace(b"\0", b" ").decode(errors="replace")


def ancestors():
    """The command lines of this process's ancestors, nearest first."""
    lines, pid = [], os.getppid()
    while pid > 1:
        lines.append(command_line(pid))
        pid = parent_of(pid)
    return lines


def ancestor_with(word):
    """The pid of this process's nearest ancestor whose command line has ``word`` (the engine's task or actor a
    rank runs in)."""
    pid = parent_of(os.getpid())
    while pid > 1:
        if word in command_line(pid):
            return pid
        pid = parent_of(pid)
    raise RuntimeError(f"this process does not descend from one with {word!r} in its command line")
