"""What each rank of a RayExecutor runs: it connects to its own actor (on its host, by loopback) and runs the
calls the actor hands it, one at a time, until told to stop. A call that raises is answered with its traceback,
then ends the job (a raising Python rank aborts every rank), since the other ranks may be
waiting for this one in a collective; the executor must be started again."""
import socket
import traceback

STOP = b"stop"


def serve(ports, secret, executable=None):
    """The rank's loop; ``ports[rank]`` is its actor's call port. ``executable``: (class, args, kwargs) to make
    the object that ``execute`` calls receive."""
    import cloudpickle

    from hvdlite.logging import launcher_rank
    from hvdlite.runner.function_runner import receive_block, send_block
    rank = int(launcher_rank())
    with socket.create_connection(("127.0.0.1", ports[rank]), timeout=60) as connection:
        connection.settimeout(None)
        send_block(connection, secret.encode())
        instance = None
        if executable is not None:
            cls, args, kwargs = executable
            instance = cls(*(args or ()), **(kwargs or {}))
        while True:
            call = receive_block(connection)
            if call == STOP:
                return None
            mode, fn, args, kwargs = cloudpickle.loads(call)
            try:
                value = fn(instance) if mode == "execute" else fn(*args, **kwargs)
                send_block(connection, cloudpickle.dumps(("value", value)))
            except BaseException:
                send_block(connection, cloudpickle.dumps(("error", f"rank {rank}:\n{traceback.format_exc()}")))
                raise
