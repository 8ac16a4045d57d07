"""Multi-rank tests (harness/multirank.py), the one set of checks that every test uses (harness/checks.py), the
removal of what killed MPI jobs leave in /dev/shm (harness/mpi_segments.py), and the marks that say where each test
runs (harness/marks.py)."""
import os

pytest_plugins = ["harness.multirank", "harness.checks", "harness.mpi_segments", "harness.marks"]

# make test-openmpi's venv holds no framework nor engine (HVDLITE_TEST_FRAMEWORKS=none): their folders are not
# collected there. Everywhere else they are, and a missing one is an import error, not a skip.
collect_ignore = (["torch", "tensorflow", "frameworks", "engines"]
                  if os.environ.get("HVDLITE_TEST_FRAMEWORKS") == "none" else [])
