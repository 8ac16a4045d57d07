"""``run_on_slots``: ``hvdlite.run(func, ...)`` on slots a cluster engine handed out (slots.py): one rank per slot,
started by hvdliterun through the agent of each machine's first slot. The engines' front ends (hvdlite.spark,
hvdlite.ray) get the slots, register them, call this, and release them."""
import os
import signal
import stat
import sys
import tempfile

from . import function_runner, torch_variables
from .protocol import FUNCTION_ADDRESS_VARIABLE, FUNCTION_SECRET_VARIABLE
from .slots import ALIAS, MAP_VARIABLE, SECRET_VARIABLE


# hvdlite.run's arguments that a job on slots leaves unset (function_runner._launcher_argv reads them all).
_NOT_GIVEN = ("min_num_proc", "max_num_proc", "hostfile", "ssh_port", "ssh_identity_file", "output_filename",
              "executable")


class SlotLost(RuntimeError):
    """A slot's process (its engine's task or actor) died while its rank ran."""


def _launcher_program(folder):
    """An executable that runs slot_client with this Python: mpiexec takes one program as its launcher."""
    path = os.path.join(folder, "slot-launcher")
    with open(path, "w") as stream:
        stream.write(f"#!/bin/sh\nexec {sys.executable} -m hvdlite.runner.slot_client \"$@\"\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def _master(registry, env):
    """torchrun's MASTER_ADDR and MASTER_PORT for the ranks (hvdliterun would name rank 0's host by its alias,
    which resolves nowhere): rank 0's host's address, loopback where every slot is on one host; unless the caller's
    env sets them."""
    if any(name in (env or {}) for name in torch_variables.MASTER_VARIABLES):
        return {}
    return torch_variables.master(registry.first_address(), is_local=len(registry.groups()) == 1)


def run_on_slots(func, args, kwargs, registry, caller_host, start_timeout=None, mpi_args=None, verbose=False,
                 env=None, stdout=None, stderr=None, network_interfaces=None, timestamps=False):
    """Runs ``func(*args, **kwargs)`` on every slot of ``registry`` (all registered) and returns the ranks' values
    in rank order. ``caller_host``: the name or address by which the slots reach this process; the other arguments
    are hvdliterun's flags of those names (``network_interfaces``: a list), ``stdout``/``stderr`` and ``timestamps``
    function_runner._launch's. Raises
    function_runner.RankFailed when a rank's function raised, SlotLost when a slot died (with the tracebacks of
    ranks that raised), RuntimeError when the job failed otherwise."""
    payload = function_runner._cloudpickle().dumps((func, tuple(args), dict(kwargs or {})))
    exchange = function_runner._Exchange(payload)
    launcher = {}

    def end_job(index, host):  # a slot died: the job cannot go on
        process = launcher.get("process")
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # hvdliterun ends the job its own way
    registry.on_lost = end_job
    try:
        with tempfile.TemporaryDirectory(prefix="hvdlite-slots-") as folder:
            registry.write_map(os.path.join(folder, "slots.json"))
            given = dict.fromkeys(_NOT_GIVEN, None)
            given.update(num_proc=registry.count, hosts=registry.hosts(), start_timeout=start_timeout,
                         mpi_args=mpi_args, verbose=verbose,
                         network_interface=",".join(network_interfaces) if network_interfaces else None)
            argv = function_runner._launcher_argv(given, folder, launcher_exec=_launcher_program(folder))
            job_env = dict(os.environ, **_master(registry, env), **(env or {}), **{
                FUNCTION_ADDRESS_VARIABLE: f"{caller_host}:{exchange.port}",
                FUNCTION_SECRET_VARIABLE: exchange.secret,
                MAP_VARIABLE: os.path.join(folder, "slots.json"), SECRET_VARIABLE: registry.secret})
            code = function_runner._launch(argv, job_env, started=lambda p: launcher.update(process=p),
                                           stdout=stdout, stderr=stderr, timestamps=timestamps)
    finally:
        registry.on_lost = None
        exchange.close()
    if registry.lost:
        said = []
        try:
            function_runner._results(exchange.results, code)
        except function_runner.RankFailed as failure:
            said = [str(failure)]
        except RuntimeError:
            pass
        lost = ", ".join(f"{ALIAS.format(index)} (host {host})" for index, host in registry.lost)
        raise SlotLost("\n".join([f"the job ended: lost {lost} while its rank ran"] + said))
    return function_runner._results(exchange.results, code)
