"""Multi-rank tests (harness/multirank.py) and the one set of checks that every test uses (harness/checks.py)."""
pytest_plugins = ["harness.multirank", "harness.checks"]
