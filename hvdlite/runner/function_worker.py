"""A rank of ``hvdlite.run(func, ...)`` (function_runner.py): fetches the function from the process that called
run(), calls it, and sends back what it returned, or its traceback before raising again (as a Python rank,
the raise ends the whole job, as a raising script does)."""
import os
import pickle
import socket
import sys
import traceback

import cloudpickle  # pickles the return value as the caller's cloudpickle pickled the function

from ..logging import launcher_rank
from .function_runner import _ACCEPTED, FETCH, RESULT, receive_block, request_line, send_block
from .protocol import FUNCTION_ADDRESS_VARIABLE, FUNCTION_SECRET_VARIABLE, RESTART_VARIABLE


def _connect():
    host, port = os.environ[FUNCTION_ADDRESS_VARIABLE].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=60)


def _request(verb, rank, start):
    connection = _connect()
    connection.sendall(request_line(os.environ[FUNCTION_SECRET_VARIABLE], verb, rank, start))
    return connection


def main():
    if FUNCTION_ADDRESS_VARIABLE not in os.environ or launcher_rank() is None:
        print("hvdlite.runner.function_worker is started by hvdlite.run(func, ...), not by hand", file=sys.stderr)
        return 2
    rank, start = launcher_rank(), os.environ.get(RESTART_VARIABLE, "0") or "0"
    with _request(FETCH, rank, start) as connection:
        func, args, kwargs = pickle.loads(receive_block(connection))
    try:
        outcome = ("value", func(*args, **kwargs))
        failure = None
    except BaseException as error:  # sent, then raised again
        outcome, failure = ("error", traceback.format_exc()), error
    try:
        body = cloudpickle.dumps(outcome)
    except Exception:  # noqa: BLE001 (an unpicklable return value is the rank's failure, said as such)
        outcome = ("error", f"rank {rank}'s return value cannot be pickled:\n{traceback.format_exc()}")
        body, failure = cloudpickle.dumps(outcome), RuntimeError("unpicklable return value")
    with _request(RESULT, rank, start) as connection:
        send_block(connection, body)
        if connection.recv(len(_ACCEPTED)) != _ACCEPTED:
            raise ConnectionError("hvdlite.run's caller did not take the result")
    if failure is not None:
        raise failure
    return 0


if __name__ == "__main__":
    sys.exit(main())
