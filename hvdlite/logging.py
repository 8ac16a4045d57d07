"""The Python side's logger: every line says which rank wrote it, at the level HVDLITE_LOG_LEVEL asks for."""
import logging as _logging
import os
import sys

from . import config

TRACE = 5  # below DEBUG, as the native core's "trace"
_logging.addLevelName(TRACE, "TRACE")

_LEVELS = {"trace": TRACE, "debug": _logging.DEBUG, "info": _logging.INFO, "warning": _logging.WARNING,
           "error": _logging.ERROR, "fatal": _logging.CRITICAL}

# Rank and size variables that launchers export before MPI is even initialised.
_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE")
# A rank's place on its host, and the number of ranks there.
_LOCAL_RANK_VARIABLES = ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "PMIX_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK")
_LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMIX_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE")

_rank_after_init = None


def set_rank(rank):
    """Called by basics after init (and with None after shutdown) so lines show the rank the core reports."""
    global _rank_after_init
    _rank_after_init = rank


def launcher_rank(environ=None):
    """The rank the launcher gave this process in its environment (a string), or None when none did."""
    return _launcher_number(_RANK_VARIABLES, environ)


def launcher_size(environ=None):
    """The job's size as the launcher gave it in this process's environment (a string), or None."""
    return _launcher_number(_SIZE_VARIABLES, environ)


def launcher_local_rank(environ=None):
    """This process's place among the ranks of its host, as the launcher gave it (a string), or None."""
    return _launcher_number(_LOCAL_RANK_VARIABLES, environ)


def launcher_local_size(environ=None):
    """The number of ranks on this process's host, as the launcher gave it (a string), or None."""
    return _launcher_number(_LOCAL_SIZE_VARIABLES, environ)


def _launcher_number(variables, environ):
    environ = os.environ if environ is None else environ
    for variable in variables:
        if environ.get(variable, "").strip().isdigit():
            return environ[variable].strip()
    return None


def current_rank(environ=None):
    """The rank to print: the core's after init, else the launcher's environment, else '?'."""
    if _rank_after_init is not None:
        return str(_rank_after_init)
    return launcher_rank(environ) or "?"


class _RankFilter(_logging.Filter):
    """Stamps each record with the rank at the time it is written (the rank is known only after init)."""

    def filter(self, record):
        record.hvdlite_rank = current_rank()
        return True


class _CurrentStderrHandler(_logging.StreamHandler):
    """Writes to whatever sys.stderr is at the time (tests and notebooks replace it after import)."""

    def __init__(self):
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def get_logger():
    """The 'hvdlite' logger, writing '[hvdlite rank N] LEVEL: message' to stderr."""
    logger = _logging.getLogger("hvdlite")
    if not getattr(logger, "_hvdlite_configured", False):
        handler = _CurrentStderrHandler()
        handler.addFilter(_RankFilter())
        handler.setFormatter(_logging.Formatter("[hvdlite rank %(hvdlite_rank)s] %(levelname)s: %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False  # one line per message even when the application configures the root logger
        logger._hvdlite_configured = True
    logger.setLevel(_LEVELS[config.SETTINGS_BY_NAME["log_level"].read()])
    return logger
