"""Multi-rank tests (harness/multirank.py), the one set of checks that every test uses (harness/checks.py), and
the removal of what killed MPICH jobs leave in /dev/shm (harness/mpich_segments.py)."""
pytest_plugins = ["harness.multirank", "harness.checks", "harness.mpich_segments"]
