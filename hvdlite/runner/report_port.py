"""The launcher's report port: the TCP port on which the ranks of one start of a job tell hvdliterun what only they
know (protocol.py says what they send). Nothing but those ranks can end the job or change what it does: a line
counts only when it starts with the start's secret, compared in constant time before anything else is read, and
what comes without it, or names no known report, is logged and ignored. The port listens on the loopback address
for ranks on this host and, for a job across hosts, where the other hosts reach this one (report_addresses).
"""
import fcntl
import hmac
import selectors
import socket
import struct
import threading

from .protocol import COMMITTED, PEER_UNREACHABLE, STARTED, STARTING, report_line
from .reachability import is_this_host, this_host_names

# The first word of each report the port acts on, and what the launcher sends its own port at the end.
KNOWN_REPORTS = {PEER_UNREACHABLE.split(" ")[0], COMMITTED, STARTING, STARTED}
_END_OF_REPORTS = "end"
LOOPBACK = "127.0.0.1"
REPORT_SECONDS = 2.0  # what a connection may take to send its report


def listen_for_ranks(on_report, secret, addresses=(LOOPBACK,), log=None):
    """A TCP port on which ranks report (protocol.py, a line each, ``secret`` first); calls on_report(line) for
    each, and logs and ignores what comes without the secret. Listens on ``addresses`` (the first may be "": every
    address), all on one port. Returns (port, close): close() returns once every report that reached the port
    before it was called has been handled (a rank may report just before it exits, as the job ends)."""
    servers = [socket.create_server((addresses[0], 0))]
    port = servers[0].getsockname()[1]
    try:
        servers += [socket.create_server((address, port)) for address in addresses[1:]]
    except OSError:
        for server in servers:
            server.close()
        raise
    selector = selectors.DefaultSelector()
    for server in servers:
        selector.register(server, selectors.EVENT_READ)

    def serve():
        while True:
            for key, _ in selector.select():
                try:
                    connection, (peer, *_) = key.fileobj.accept()
                except OSError:
                    continue
                with connection:
                    connection.settimeout(REPORT_SECONDS)
                    report = _read_report(connection, secret)
                if report is None:
                    if log:
                        log(f"ignored a connection to the report port from {peer}: it did not give the job's secret")
                elif report == _END_OF_REPORTS:
                    return
                elif report.split(" ")[0] in KNOWN_REPORTS:
                    on_report(report)
                elif log:
                    log(f"ignored an unknown report from {peer}: {report[:40]!r}")
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def close():
        # Connections are accepted in the order they came: the last one, this, comes after every report sent.
        try:
            with socket.create_connection((LOOPBACK, port), timeout=2.0) as connection:
                connection.sendall(report_line(secret, _END_OF_REPORTS))
            thread.join(timeout=10.0)
        except OSError:
            pass
        selector.close()
        for server in servers:
            server.close()
    return port, close


def _read_report(connection, secret):
    """The report a connection sends, or None when it does not start with the secret (compared in constant time,
    before anything else is read)."""
    expected = f"{secret} ".encode()
    said = b""
    try:
        while len(said) < len(expected):
            chunk = connection.recv(len(expected) - len(said))
            if not chunk:
                break
            said += chunk
        if not hmac.compare_digest(said, expected):
            return None
        line = b""
        while b"\n" not in line and len(line) < 64:
            chunk = connection.recv(64 - len(line))
            if not chunk:
                break
            line += chunk
    except OSError:
        return None
    return line.split(b"\n")[0].decode(errors="replace")


def report_addresses(host_names, interfaces=()):
    """Where the report port listens for a job on ``host_names`` (none: this host): the loopback address (ranks on
    this host), and for a job with ranks on other hosts, the addresses of the network interfaces the job was given,
    or every address where none was (by which of this host's addresses other hosts reach its name cannot be known
    from here)."""
    local = this_host_names()
    if all(is_this_host(name, local) for name in host_names or ()):
        return (LOOPBACK,)
    given = [interface_address(name) for name in interfaces]
    if not given or None in given:  # none named, or named for the other hosts only (a login node's differ)
        return ("",)
    return (LOOPBACK, *dict.fromkeys(given))


def ipv4_addresses():
    """This host's IPv4 addresses other than loopback, in the order of its interfaces."""
    found = (interface_address(name) for _, name in socket.if_nameindex() if name != "lo")
    return [address for address in dict.fromkeys(found) if address]


def interface_address(name):
    """The IPv4 address of a network interface of this host (SIOCGIFADDR), None where it has none."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            answer = fcntl.ioctl(probe.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(answer[20:24])
