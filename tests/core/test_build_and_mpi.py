"""What the build recorded and what the installed package refuses: the MPI the core was built with (build_info.json),
the MPI wheel it depends on, and a rank started by another MPI's mpiexec or running another MPI's library.

Whole processes (a rank alone, MPI initialised by the core) with the MPI of this environment, MPICH or Open MPI:
make test-openmpi runs this file too."""
import importlib.metadata
import json
import os
import subprocess
import sys

import pytest

from harness.processes import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "buildsystem"))
import hvdlite_mpi  # noqa: E402  (the build's own rule for which MPI it uses)

from hvdlite import build_info  # noqa: E402

pytestmark = pytest.mark.openmpi

# Each launcher's variable for the job size, and a version text of each family (as MPI_Get_library_version says).
OTHER_LAUNCHER_VARIABLE = {"MPICH": "OMPI_COMM_WORLD_SIZE", "Open MPI": "PMI_SIZE"}
VERSION_TEXTS = {"MPICH": "MPICH Version:      5.0.2\nMPICH Release date: unreleased",
                 "Open MPI": "Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11"}


def python_says(code, env=None):
    """Runs code in a fresh Python of this environment (MPI starts and ends there, not in pytest)."""
    return run([sys.executable, "-c", code], timeout=120, env=env)


def runtime_version():
    code, output = python_says("from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0])")
    assert code == 0, output
    return output.strip().splitlines()[-1]


def test_the_build_recorded_the_mpi_that_this_environment_runs():
    info = build_info.read()
    assert info, f"no build_info.json in {build_info.native_dirs()}"
    recorded = build_info.mpi_family(info["mpi_library_version"])
    assert recorded and recorded == build_info.mpi_family(runtime_version()), (info, runtime_version())
    # The wrapper the build used, classified by the build's own rule, is the one recorded.
    assert info["mpi_wheel"] == (hvdlite_mpi.wheel_of(info["mpicxx"]) or ""), info


def test_the_installed_package_depends_on_the_mpi_wheel_it_was_built_with():
    info = build_info.read()
    requirements = [r.split(";")[0].strip() for r in importlib.metadata.requires("hvdlite") or ()
                    if "extra ==" not in r]
    assert {"numpy", "cffi", "mpi4py", "ml_dtypes"} <= set(requirements), requirements
    wheels = set(requirements) & set(hvdlite_mpi.MPI_WHEELS)
    assert wheels == ({info["mpi_wheel"]} if info["mpi_wheel"] else set()), (requirements, info)


def test_a_wrapper_outside_any_mpi_wheel_is_a_system_mpi():
    assert hvdlite_mpi.wheel_of("/bin/sh") is None
    assert hvdlite_mpi.wheel_of(None) is None


def test_a_rank_started_by_another_mpis_launcher_refuses_to_start():
    """What a rank sees when the other MPI's mpiexec starts it: that launcher's size variable, and a job of one."""
    family = build_info.mpi_family(build_info.read()["mpi_library_version"])
    variable = OTHER_LAUNCHER_VARIABLE["Open MPI" if family == "Open MPI" else "MPICH"]
    code, output = python_says("import hvdlite as hvd; hvd.init()", env={variable: "4"})
    assert code != 0, output
    other = "MPICH" if family == "Open MPI" else "Open MPI"
    assert f"started by {other}'s mpiexec as one of 4 ranks" in output, output
    assert "every rank would train alone" in output and "hvdliterun" in output, output


def test_a_job_of_one_without_a_launcher_starts():
    code, output = python_says("import hvdlite as hvd; hvd.init(); print('size', hvd.size()); hvd.shutdown()")
    assert code == 0 and "size 1" in output, output


@pytest.mark.parametrize("built, running", [("MPICH", "Open MPI"), ("Open MPI", "MPICH")])
def test_a_process_running_another_mpi_library_is_refused(built, running):
    """Checks our own logic on the version texts each MPI reports (loading two MPIs in one process is not safe
    to do for real)."""
    info = {"mpi_library_version": VERSION_TEXTS[built].splitlines()[0], "mpicxx": "/opt/mpi/bin/mpicxx"}
    with pytest.raises(ImportError) as error:
        build_info.check_same_mpi(VERSION_TEXTS[running], info)
    message = str(error.value)
    assert f"built with {built}" in message and f"this process runs {running}" in message, message
    assert "/opt/mpi/bin/mpicxx" in message and "cannot be mixed" in message, message
    build_info.check_same_mpi(VERSION_TEXTS[built], info)  # the same family passes
    build_info.check_same_mpi("Intel(R) MPI Library 2021.10", {**info, "mpi_library_version": VERSION_TEXTS["MPICH"]})


def test_the_launcher_uses_the_mpiexec_of_the_mpi_it_was_built_with():
    """An MPI from a wheel records no mpiexec (the environment's own is used); a system MPI's is kept."""
    code, output = run([sys.executable, "-m", "hvdlite.runner", "-np", "2", "--dry-run", "true"], timeout=60)
    assert code == 0, output
    info = build_info.read()
    expected = info["mpiexec"] or os.path.join(os.path.dirname(sys.executable), "mpiexec")
    assert output.split()[0] == expected, (output, info)
