"""The process manager's end of PMI-1's wire protocol (MPICH's "simple PMI"), so that processes another launcher
started become one MPI job. Each process connects inside MPI_Init (PMI_PORT=host:port, its rank in PMI_ID), and this
server answers what an MPI launcher's proxy would: the job's size, the process's rank, a key-value space in which
MPI's ranks exchange their addresses, and barriers.

Run by path (``python server.py --size N --timeout S``), never as hvdlite's module: importing hvdlite would start
MPI in this process. It writes its port as its first line of output. Nothing waits forever: a barrier fails,
naming the ranks that did not come, once it has waited the timeout; every barrier fails once a rank's process has
ended before finalizing MPI, or once the process that started this server (rank 0) has ended before starting MPI.
The server ends when every rank that connected has gone (after finalizing, or failed), or when rank 0 ended
before any rank connected.
"""
import argparse
import os
import secrets
import socket
import sys
import threading
import time


class Job:
    """What the ranks share: the key-value space, the barrier, who is connected, and the failure if any."""

    def __init__(self, size, timeout):
        self.size = size
        self.timeout = timeout
        self.changed = threading.Condition()
        self.values = {}
        self.connected = set()
        self.ever_connected = set()
        self.finalized = set()
        self.at_barrier = set()
        self.barriers_done = 0
        self.failure = None
        self.starter_gone = False
        # MPICH names its shared-memory segments after the key-value space: one name per job, as hydra gives.
        self.kvsname = f"hvdlite_{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(4)}"

    def fail(self, why):
        with self.changed:
            self._set_failure(why)

    def _set_failure(self, why):
        """The first failure is the job's; said on this server's standard error (rank 0's), since MPI's error
        names only the PMI call that failed."""
        if self.failure is None:
            self.failure = why
            print(f"hvdlite's PMI server: {why}", file=sys.stderr, flush=True)
        self.changed.notify_all()

    def connect(self, rank):
        with self.changed:
            if not 0 <= rank < self.size:
                return f"rank {rank} is not in a job of {self.size}"
            if rank in self.ever_connected:
                return f"rank {rank} connected twice"
            self.connected.add(rank)
            self.ever_connected.add(rank)
            return None

    def disconnect(self, rank):
        with self.changed:
            self.connected.discard(rank)
            if rank not in self.finalized:
                self._set_failure(f"rank {rank}'s process ended before it finalized MPI")
            self.changed.notify_all()

    def barrier(self, rank):
        """Waits until every rank has come (None), or the reason it never will."""
        with self.changed:
            if self.failure is not None:
                return self.failure
            generation = self.barriers_done
            self.at_barrier.add(rank)
            if len(self.at_barrier) == self.size:
                self.at_barrier = set()
                self.barriers_done += 1
                self.changed.notify_all()
                return None
            deadline = time.monotonic() + self.timeout
            while self.barriers_done == generation and self.failure is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(self.size)) - self.at_barrier)
                    absent = sorted(set(missing) - self.ever_connected)
                    self._set_failure(f"ranks {missing} did not reach the barrier within {self.timeout:g} s"
                                      + (f" (ranks {absent} never connected)" if absent else ""))
                    break
                self.changed.wait(left)
            return None if self.barriers_done != generation else self.failure

    def starter_ended(self):
        """Rank 0's process ended, or is ending: its own connection, once made, says whether before finalizing MPI
        (mpi4py finalizes MPI after Python has torn down the objects that hold this server's input open)."""
        with self.changed:
            self.starter_gone = True
            if 0 not in self.ever_connected:
                self._set_failure("rank 0's process, which runs this job's PMI server, ended before it started MPI")
            self.changed.notify_all()

    def wait_until_over(self):
        with self.changed:
            while True:
                everyone_came = len(self.ever_connected) == self.size or self.failure is not None
                if not self.connected and (everyone_came or (self.starter_gone and not self.ever_connected)):
                    return
                self.changed.wait()


def parse(line):
    """'cmd=put kvsname=k key=a value=b' -> {'cmd': 'put', ...}."""
    fields = {}
    for word in line.split():
        key, _, value = word.partition("=")
        fields[key] = value
    return fields


def wire_text(text):
    """A message as one PMI value (the wire protocol separates fields by spaces)."""
    return text.replace(" ", "_").replace("=", ":")


def answer(job, state, fields):
    """The reply to one command (lines without their final newline), or None for none."""
    command = fields.get("cmd") or fields.get("mcmd")
    if command == "initack":
        try:
            rank = int(fields.get("pmiid", ""))
        except ValueError:
            return f"cmd=initack rc=-1 msg={wire_text('PMI_ID is not a number')}"
        refused = job.connect(rank)
        if refused:
            return f"cmd=initack rc=-1 msg={wire_text(refused)}"
        state["rank"] = rank
        return f"cmd=initack rc=0\ncmd=set size={job.size}\ncmd=set rank={rank}\ncmd=set debug=0"
    if state.get("rank") is None:
        return f"cmd={command} rc=-1 msg={wire_text('a process must give its rank (PMI_ID) first')}"
    if command == "init":
        return "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1"
    if command == "get_maxes":
        return "cmd=maxes rc=0 kvsname_max=256 keylen_max=256 vallen_max=1024"
    if command == "get_appnum":
        return "cmd=appnum rc=0 appnum=0"
    if command == "get_universe_size":
        return f"cmd=universe_size rc=0 size={job.size}"
    if command == "get_my_kvsname":
        return f"cmd=my_kvsname rc=0 kvsname={job.kvsname}"
    if command == "put":
        with job.changed:
            job.values[fields.get("key", "")] = fields.get("value", "")
        return "cmd=put_result rc=0"
    if command == "get":
        with job.changed:
            value = job.values.get(fields.get("key", ""))
        if value is None:
            return "cmd=get_result rc=-1 msg=key_not_found"
        return f"cmd=get_result rc=0 value={value}"
    if command == "barrier_in":
        failure = job.barrier(state["rank"])
        return "cmd=barrier_out rc=0" if failure is None else f"cmd=barrier_out rc=-1 msg={wire_text(failure)}"
    if command == "finalize":
        with job.changed:
            job.finalized.add(state["rank"])
        return "cmd=finalize_ack rc=0"
    if command == "abort":
        job.fail(f"rank {state['rank']} aborted MPI")
        return None
    # Dynamic processes (spawn, publish/lookup names) need a launcher that can start processes: not this one.
    return f"cmd={command}_result rc=-1 msg={wire_text(f'{command} is not served by hvdlite PMI server')}"


def serve(connection, job):
    state = {"rank": None}
    try:
        with connection, connection.makefile("r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                reply = answer(job, state, parse(line))
                if reply is not None:
                    connection.sendall((reply + "\n").encode())
    except OSError:
        pass
    finally:
        if state["rank"] is not None:
            job.disconnect(state["rank"])


def accept_forever(listener, job):
    while True:
        connection, _ = listener.accept()
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve, args=(connection, job), daemon=True).start()


def watch_starter(job):
    """Rank 0 holds this server's standard input open: its end (EOF) means rank 0's process has ended."""
    while os.read(0, 4096):  # unbuffered: a buffered reader's lock would stop the interpreter's exit
        pass
    job.starter_ended()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--timeout", type=float, required=True)
    args = parser.parse_args(argv)
    job = Job(args.size, args.timeout)
    listener = socket.create_server(("", 0), backlog=max(args.size, 128))
    print(listener.getsockname()[1], flush=True)
    threading.Thread(target=accept_forever, args=(listener, job), daemon=True).start()
    threading.Thread(target=watch_starter, args=(job,), daemon=True).start()
    job.wait_until_over()


if __name__ == "__main__":
    main()
