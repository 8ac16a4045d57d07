"""Ranks inside the slots a cluster engine hands out (Spark barrier tasks, Ray actors), started by MPI's own
launcher as it starts them on other hosts, with the slot in ssh's place.

Each slot runs a SlotAgent: a TCP server in the slot's process that runs a command it is given (MPI's proxy, which
starts the rank) as its child, streams the command's output back and kills it when the connection goes. The slot
tells the caller's SlotRegistry where its agent listens and keeps that connection open while it lives. The caller
then starts an ordinary hvdliterun job, one host per machine the slots are on, named after its first slot
(``slot-0``, ``slot-3``, ...), with as many ranks as that machine has slots, and with
``python -m hvdlite.runner.slot_client`` as the launcher: mpiexec calls it as it would call ssh, and it asks that
slot's agent to run the machine's proxy, which starts its ranks. So the ranks' wire-up and all-reduce are those of
any job (a machine's ranks share its memory, and hvdlite's local ranks are right), and every rank is a process of
a slot on its machine: killed with it, and inside the resources the engine handed out there.

Every connection starts with the job's secret: nothing else can make an agent run a command. A slot whose
registration connection drops (its task or actor died) is reported to the caller at once (``on_lost``), which ends
the job.
"""
import hmac
import json
import os
import secrets
import signal
import socket
import struct
import subprocess
import threading

ALIAS = "slot-{}"  # the host name of slot i in the job's host list
MAP_VARIABLE = "HVDLITE_SLOT_MAP"        # path of the JSON {alias: [address, port]} the client reads
SECRET_VARIABLE = "HVDLITE_SLOT_SECRET"  # the secret every connection to an agent or the registry starts with
STDOUT, STDERR, EXIT = 1, 2, 3  # the frames an agent sends back: output of either stream, the exit code
_FRAME = struct.Struct("<BI")
_DONE = b"done\n"


def send_frame(connection, kind, data=b""):
    connection.sendall(_FRAME.pack(kind, len(data)) + data)


def receive_frame(stream):
    """(kind, data) from a binary file made of a socket, or (None, b"") at its end."""
    head = stream.read(_FRAME.size)
    if len(head) < _FRAME.size:
        return None, b""
    kind, length = _FRAME.unpack(head)
    data = stream.read(length)
    if len(data) < length:
        return None, b""
    return kind, data


def send_message(connection, secret, message):
    """The secret, then one JSON line."""
    connection.sendall(f"{secret}\n{json.dumps(message)}\n".encode())


def receive_message(stream, secret):
    """The JSON line after the secret, or None when the secret is wrong or the stream ends."""
    given = stream.readline(200).rstrip(b"\n").decode(errors="replace")
    if not hmac.compare_digest(given, secret):
        return None
    line = stream.readline()
    return json.loads(line) if line.endswith(b"\n") else None


def serve_connections(server, handle, name):
    """A thread that takes connections to ``server`` until it is closed, each handled by ``handle(connection,
    peer address)`` in a thread of its own."""
    def accept():
        while True:
            try:
                connection, peer = server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=handle, args=(connection, peer[0]), daemon=True).start()
    threading.Thread(target=accept, name=name, daemon=True).start()


def _die_with_parent():
    """In the command's process: dies when the slot's process does (a task killed without a chance to clean up)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class SlotAgent:
    """In a slot's process: runs the commands the job's launcher sends (``python -m hvdlite.runner.slot_client``)."""

    def __init__(self, secret):
        self.secret = secret
        self._server = socket.create_server(("", 0))
        self.port = self._server.getsockname()[1]
        self._children = set()
        self._lock = threading.Lock()
        self._stopped = False
        serve_connections(self._server, lambda connection, _: self._run_command(connection), "hvdlite-slot-agent")

    def _run_command(self, connection):
        with connection:
            stream = connection.makefile("rb")
            try:
                message = receive_message(stream, self.secret)
            except (OSError, ValueError):
                return
            if not message:
                return
            with self._lock:
                if self._stopped:
                    return
                child = subprocess.Popen(["/bin/sh", "-c", message["command"]], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                         preexec_fn=_die_with_parent)
                self._children.add(child)
            sending = threading.Lock()
            relays = [threading.Thread(target=self._relay, args=(pipe, kind, connection, sending), daemon=True)
                      for pipe, kind in ((child.stdout, STDOUT), (child.stderr, STDERR))]
            for relay in relays:
                relay.start()
            # The launcher's end of the connection closing (mpiexec ended the job) ends the command.
            threading.Thread(target=self._kill_when_closed, args=(stream, child), daemon=True).start()
            code = child.wait()
            for relay in relays:
                relay.join()
            with self._lock:
                self._children.discard(child)
            try:
                with sending:
                    send_frame(connection, EXIT, struct.pack("<i", code))
            except OSError:
                pass

    @staticmethod
    def _relay(pipe, kind, connection, sending):
        for chunk in iter(lambda: pipe.read1(1 << 16), b""):
            try:
                with sending:
                    send_frame(connection, kind, chunk)
            except OSError:
                pass  # the launcher is gone: the command is being killed
        pipe.close()

    @staticmethod
    def _kill_when_closed(stream, child):
        try:
            stream.read()  # nothing is sent after the command: this returns when the other end closes
        except OSError:
            pass
        _kill_group(child)

    def stop(self):
        """Kills every command still running (and what it started) and stops listening."""
        with self._lock:
            self._stopped = True
            children = list(self._children)
        for child in children:
            _kill_group(child)
        self._server.close()


def _kill_group(child):
    if child.poll() is None:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except OSError:
            pass


def register_and_wait(address, secret, index, agent, extra=None):
    """In a slot: tells the registry at ``address`` (host, port) that slot ``index`` listens on ``agent.port``, then
    waits until the registry releases it (the job ended) or goes away (the caller died); stops the agent then."""
    with socket.create_connection(address, timeout=60) as connection:
        connection.settimeout(None)
        send_message(connection, secret, {"index": index, "port": agent.port, "host": socket.gethostname(),
                                          **(extra or {})})
        stream = connection.makefile("rb")
        try:
            stream.readline()  # _DONE, or nothing when the caller is gone
        except OSError:
            pass
    agent.stop()


class SlotRegistry:
    """The caller's side: where slots register their agents; says when all are there and when one is lost."""

    def __init__(self, count, secret=None):
        self.count = count
        self.secret = secret or secrets.token_hex(16)
        self.slots = {}  # index -> {"address", "port", "host", ...}
        self.lost = []   # (index, host) of slots whose connection dropped before release
        self.on_lost = None  # called with (index, host) from a registry thread
        self._connections = {}
        self._condition = threading.Condition()
        self._released = False
        self._failure = None
        self._server = socket.create_server(("", 0))
        self.port = self._server.getsockname()[1]
        serve_connections(self._server, self._take, "hvdlite-slot-registry")

    def _take(self, connection, address):
        stream = connection.makefile("rb")
        try:
            message = receive_message(stream, self.secret)
        except (OSError, ValueError):
            message = None
        if not message or not 0 <= message.get("index", -1) < self.count:
            connection.close()
            return
        index = message["index"]
        with self._condition:
            self.slots[index] = dict(message, address=address)
            self._connections[index] = connection
            self._condition.notify_all()
        try:
            stream.read()  # returns when the slot's end closes: its process is gone, or it was released
        except OSError:
            pass
        with self._condition:
            lost = not self._released
            if lost:
                self.lost.append((index, message.get("host")))
            self._condition.notify_all()
            on_lost = self.on_lost
        if lost and on_lost is not None:
            on_lost(index, message.get("host"))

    def wait_for_all(self, timeout):
        """Until every slot registered; raises TimeoutError after ``timeout`` seconds, what ``fail`` was given (the
        engine gave up on the slots) as soon as it is, or RuntimeError for a slot lost meanwhile."""
        with self._condition:
            done = self._condition.wait_for(
                lambda: len(self.slots) == self.count or self._failure is not None or self.lost, timeout=timeout)
            if self._failure is not None:
                raise self._failure
            if self.lost:
                index, host = self.lost[0]
                raise RuntimeError(f"slot {index} on host {host} was lost before the job started")
            if not done:
                raise TimeoutError(f"{len(self.slots)} of {self.count} slots registered within {timeout:g} s")

    def fail(self, error):
        """The engine gave up on the slots: ``wait_for_all`` raises ``error``."""
        with self._condition:
            self._failure = error
            self._condition.notify_all()

    def groups(self):
        """[(alias, slot indices)]: the slots of each host together, hosts in the order of their first slot. A
        host's ranks are started by one proxy, through its first slot's agent, so that MPI (and hvdlite's local
        ranks, and its choice of GPU) see them as one host's; ranks are numbered in this order."""
        by_host = {}
        for index in range(self.count):
            by_host.setdefault(self.slots[index]["host"], []).append(index)
        return [(ALIAS.format(indices[0]), indices) for indices in by_host.values()]

    def rank_order(self):
        """The slot index of each rank, by rank."""
        return [index for _, indices in self.groups() for index in indices]

    def write_map(self, path):
        """The JSON {alias: [address, port]} that slot_client reads: each host's first slot's agent."""
        with open(path, "w") as stream:
            json.dump({alias: [self.slots[indices[0]]["address"], self.slots[indices[0]]["port"]]
                       for alias, indices in self.groups()}, stream)

    def first_address(self):
        """The address rank 0's host registered from (its first slot's), which the other slots' hosts reach as the
        driver did: the slots' aliases name no host."""
        return self.slots[self.groups()[0][1][0]]["address"]

    def hosts(self):
        """hvdliterun's -H value: a host per group, as many ranks as it has slots."""
        return ",".join(f"{alias}:{len(indices)}" for alias, indices in self.groups())

    def release(self):
        """Tells every slot that the job is over (each stops its agent and returns) and stops listening."""
        with self._condition:
            self._released = True
            connections = list(self._connections.values())
        for connection in connections:
            try:
                connection.sendall(_DONE)
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            connection.close()
        self._server.close()
