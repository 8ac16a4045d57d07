"""The launcher side: hvdliterun (``python -m hvdlite.runner``), the agents it starts, and horovod.run's function,
``hvdlite.run(func, args=(), num_proc=2, ...)`` or ``from hvdlite.runner import run`` as from horovod.runner: it runs
``func`` on every rank and returns their return values by rank (function_runner.py). What the launcher and its
ranks both speak is protocol.py.
"""


def run(func, *args, **kwargs):
    """Runs ``func`` on every rank of a job and returns their return values by rank: function_runner.run."""
    from .function_runner import run as run_function
    return run_function(func, *args, **kwargs)
