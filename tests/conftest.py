"""Multi-rank tests (harness/multirank.py), the one set of checks that every test uses (harness/checks.py), and
the removal of what killed MPI jobs leave in /dev/shm (harness/mpi_segments.py)."""
pytest_plugins = ["harness.multirank", "harness.checks", "harness.mpi_segments"]
