"""What the native parts were built with (build_info.json, written by the build beside them), where those files
are, and the check that a process runs under the MPI they were built with.

The files are looked up along the package's path, not beside this module: an editable install keeps the Python
sources in the source tree and the built files in site-packages. HVDLITE_NATIVE_DIR points at another build's
folder instead (a sanitizer build under build/, for its tests).
"""
import glob
import importlib.util
import json
import os
import sys

NATIVE_DIR_VARIABLE = "HVDLITE_NATIVE_DIR"
BUILD_INFO_NAME = "build_info.json"


def native_dirs():
    """Folders to search for the core library, the extension and build_info.json, in order."""
    explicit = os.environ.get(NATIVE_DIR_VARIABLE)
    if explicit:
        return [os.path.abspath(explicit)]
    return [os.path.abspath(path) for path in sys.modules[__package__].__path__]  # the package, imported first


def native_file(name):
    """The path of the first file called name in native_dirs(), or None."""
    for folder in native_dirs():
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    return None


class _NativeDirFinder:
    """Imports hvdlite._tensor_calls from HVDLITE_NATIVE_DIR, ahead of any other finder (an editable install's
    included), so that it links the core of that build whichever module imports it first."""

    name = "hvdlite._tensor_calls"

    def __init__(self, folder):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        found = glob.glob(os.path.join(self.folder, "_tensor_calls*.so"))
        if not found:
            raise ImportError(f"{NATIVE_DIR_VARIABLE}={self.folder} holds no _tensor_calls*.so")
        return importlib.util.spec_from_file_location(fullname, found[0])


def redirect_native_imports():
    """With HVDLITE_NATIVE_DIR set, the extension comes from there (the core follows: the extension links it)."""
    explicit = os.environ.get(NATIVE_DIR_VARIABLE)
    if explicit and not any(isinstance(finder, _NativeDirFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _NativeDirFinder(os.path.abspath(explicit)))


def read():
    """build_info.json as a dict ({} where the native parts are not built)."""
    path = native_file(BUILD_INFO_NAME)
    if path is None:
        return {}
    try:
        with open(path) as stream:
            return json.load(stream)
    except (OSError, ValueError):
        return {}


def mpi_family(version_text):
    """'MPICH', 'Open MPI', 'Intel MPI', ... from an MPI library's version text ('' when unknown). MPICH and its
    derivatives share one ABI (libmpi.so.12); Open MPI has another."""
    lowered = (version_text or "").lower()
    for marker, family in (("open mpi", "Open MPI"), ("intel(r) mpi", "Intel MPI"), ("mvapich", "MVAPICH"),
                           ("mpich", "MPICH")):
        if marker in lowered:
            return family
    return ""


def _abi(family):
    """Families whose libraries and launchers can stand in for each other: MPICH's ABI, or Open MPI's."""
    return "Open MPI" if family == "Open MPI" else "MPICH"


# Environment variables that each launcher sets in the ranks it starts: (ABI, variable holding the job size).
_LAUNCHER_SIZE_VARIABLES = (("Open MPI", "OMPI_COMM_WORLD_SIZE"), ("MPICH", "PMI_SIZE"))


def _name_and_version(text):
    """'MPICH Version: 5.0.2', 'Open MPI v5.0.11': the version text's first line, up to its first comma."""
    lines = (text or "").strip().splitlines()
    return " ".join(lines[0].split(",")[0].split()) if lines else "an unknown MPI"


def check_same_mpi(runtime_version, info=None):
    """Raises ImportError, saying what to do, when this process's MPI (the one mpi4py loaded) is not of the kind
    the core was built with: the core would call into a library it was not compiled for."""
    info = read() if info is None else info
    built_with = info.get("mpi_library_version", "")
    built_family, runtime_family = mpi_family(built_with), mpi_family(runtime_version)
    if built_family and runtime_family and _abi(built_family) != _abi(runtime_family):
        raise ImportError(
            f"hvdlite was built with {_name_and_version(built_with)} ({info.get('mpicxx')}), but this process runs "
            f"{_name_and_version(runtime_version)} (the MPI that mpi4py loaded): the two cannot be mixed in one "
            f"process. Fix: install hvdlite and mpi4py against the same MPI (see the README's install section)")


def check_launcher(runtime_version, world_size, info=None, environ=None):
    """Returns why this process must not go on (or None): a different MPI's mpiexec, or srun without a PMI that
    MPI takes, started it as one of many ranks, but its own MPI sees a job of one, so every rank would train
    alone."""
    if world_size != 1:
        return None
    info = read() if info is None else info
    environ = os.environ if environ is None else environ
    runtime_family = mpi_family(runtime_version)
    srun_tasks = environ.get("SLURM_STEP_NUM_TASKS", "1")
    if srun_tasks.isdigit() and int(srun_tasks) > 1 and \
            not any(variable in environ for _, variable in _LAUNCHER_SIZE_VARIABLES):
        pmi = "pmix" if _abi(runtime_family) == "Open MPI" else "pmi2"
        return (f"this process is task {environ.get('SLURM_PROCID', '?')} of {srun_tasks} that srun started, but "
                f"{_name_and_version(runtime_version)} sees a job of one: srun gave it no process manager interface "
                f"it takes (srun --mpi=none, or the cluster's MpiDefault), so every task would train alone. Fix: "
                f"srun --mpi={pmi} ... (`srun --mpi=list` lists what this Slurm has), or hvdliterun in the "
                f"allocation's batch script, which starts the ranks through srun itself")
    for launcher, variable in _LAUNCHER_SIZE_VARIABLES:
        try:
            launched = int(environ.get(variable, "1"))
        except ValueError:
            continue
        if launched > 1 and runtime_family and launcher != _abi(runtime_family):
            mpiexec = info.get("mpiexec") or os.path.join(sys.prefix, "bin", "mpiexec")
            return (f"this process was started by {launcher}'s mpiexec as one of {launched} ranks, but hvdlite runs "
                    f"on {_name_and_version(runtime_version)}, which sees a job of one: every rank would train alone. "
                    f"Fix: start the job with hvdliterun, or with the mpiexec of the MPI hvdlite was built with "
                    f"({mpiexec})")
    return None
