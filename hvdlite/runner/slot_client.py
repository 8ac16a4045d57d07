"""``python -m hvdlite.runner.slot_client [ssh options] HOST COMMAND...``: the launcher that mpiexec calls in ssh's
place for a job whose hosts are an engine's slots (slots.py). HOST is a slot's alias (``slot-3``); the command runs
in that slot's process, its output comes back here, and its exit code is this program's (255, as ssh's, when the
slot cannot be reached or goes away)."""
import json
import os
import socket
import struct
import sys

from .slots import EXIT, MAP_VARIABLE, SECRET_VARIABLE, STDERR, STDOUT, receive_frame, send_message

# ssh's options that take a value (hydra passes -x; hvdliterun's probe may pass -p PORT, -i FILE, -o OPTION).
_WITH_VALUE = set("bcDEeFIiJLlmOopQRSWw")


def split_arguments(argv):
    """(host, command) from ssh's command line."""
    index = 0
    while index < len(argv) and argv[index].startswith("-"):
        option = argv[index]
        index += 2 if option[-1] in _WITH_VALUE and len(option) == 2 else 1
    if index >= len(argv):
        raise ValueError("no host given")
    return argv[index], " ".join(argv[index + 1:])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        host, command = split_arguments(argv)
        with open(os.environ[MAP_VARIABLE]) as stream:
            address, port = json.load(stream)[host]
    except (KeyError, OSError, ValueError) as error:
        print(f"hvdlite slot client: cannot reach slot {argv!r}: {error!r}", file=sys.stderr, flush=True)
        return 255
    return run_in_slot((address, port), os.environ[SECRET_VARIABLE], command, host)


def run_in_slot(address, secret, command, name, stdout=None, stderr=None):
    """Runs ``command`` (a shell line) in the slot whose agent listens at ``address`` (host, port); its output goes
    to ``stdout``/``stderr`` (binary files; default: this process's). Returns its exit code, 255 when the slot
    (``name`` in messages) cannot be reached or goes away."""
    try:
        connection = socket.create_connection(address, timeout=30)
    except OSError as error:
        print(f"hvdlite slot client: cannot reach slot {name}: {error!r}", file=sys.stderr, flush=True)
        return 255
    connection.settimeout(None)
    with connection:
        send_message(connection, secret, {"command": command})
        stream = connection.makefile("rb")
        outputs = {STDOUT: stdout or sys.stdout.buffer, STDERR: stderr or sys.stderr.buffer}
        while True:
            kind, data = receive_frame(stream)
            if kind is None:
                print(f"hvdlite slot client: slot {name} went away", file=sys.stderr, flush=True)
                return 255
            if kind == EXIT:
                return struct.unpack("<i", data)[0]
            outputs[kind].write(data)
            outputs[kind].flush()


if __name__ == "__main__":
    sys.exit(main())
