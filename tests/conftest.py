"""Multi-rank tests (harness/multirank.py), the one set of checks that every test uses (harness/checks.py), the
removal of what killed MPI jobs leave in /dev/shm (harness/mpi_segments.py), and the marks that say where each test
runs (harness/marks.py)."""
pytest_plugins = ["harness.multirank", "harness.checks", "harness.mpi_segments", "harness.marks"]
