"""Which mpiexec to use (the one of the MPI the core was built with) and which kind it is (hydra or Open MPI)."""
import os
import shutil
import subprocess
import sys

HYDRA = "hydra"      # MPICH, Intel MPI, MVAPICH
OPENMPI = "openmpi"

# How mpiexec starts processes when not through ssh (or a program called as ssh is):
SLURM = "slurm"  # through srun, on the hosts of the Slurm allocation the launcher runs in
FORK = "fork"    # on this host alone, without srun, inside a Slurm job step (which holds the CPUs srun would want)

from .. import build_info


def _built_with_mpiexec():
    """The mpiexec of the system MPI that built the core (build_info.json records it), if any. An MPI from a pip
    wheel records none: its mpiexec is in this environment's bin/, found next."""
    path = build_info.read().get("mpiexec")
    return path if path and os.access(path, os.X_OK) else None


def find_mpiexec(explicit=None):
    """--mpiexec, else $HVDLITE_MPIEXEC, else the build's, else <sys.prefix>/bin/mpiexec (mpich wheel), else PATH."""
    for candidate in (explicit, os.environ.get("HVDLITE_MPIEXEC")):
        if candidate:
            found = shutil.which(candidate)
            if not found:
                raise FileNotFoundError(f"mpiexec {candidate!r} not found or not executable")
            return found
    candidates = [_built_with_mpiexec(), os.path.join(sys.prefix, "bin", "mpiexec"),
                  os.path.join(os.path.dirname(sys.executable), "mpiexec"), shutil.which("mpiexec")]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("no mpiexec found: install an MPI (`pip install mpich mpi4py` or "
                            "`apt-get install openmpi-bin libopenmpi-dev`) or pass --mpiexec PATH")


def detect_flavour(mpiexec):
    """HYDRA or OPENMPI, from `mpiexec --version`."""
    try:
        result = subprocess.run([mpiexec, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, timeout=60)
        text = result.stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        raise RuntimeError(f"cannot run {mpiexec} --version: {error}") from None
    return flavour_from_version_text(text, mpiexec)


def flavour_from_version_text(text, mpiexec="mpiexec"):
    lowered = text.lower()
    if "hydra" in lowered:
        return HYDRA
    if "open mpi" in lowered or "openrte" in lowered or "open-mpi" in lowered:
        return OPENMPI
    raise RuntimeError(f"{mpiexec} is neither MPICH's hydra nor Open MPI's; `{mpiexec} --version` said: "
                       f"{text.strip()[:200]!r}")
