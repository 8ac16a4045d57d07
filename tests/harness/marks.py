"""Where each test runs, said once, by marks on the test or its module (``pytestmark``); the Makefile and
tests/sanitizers/run.sh select by them with ``-m``.

``make test`` (the quick verdict, no root) runs every test that is none of ``simulated_hosts``, ``root``,
``extra_ranks``, ``long``, ``check_long``, ``mpijob_image`` and ``many_ranks``;
``make check`` (CI) runs the rest too but ``check_long``, and reruns the tests marked below where they say;
``make check-long`` runs the ``check_long`` ones (run before an issue is called done).
"""
TIER_MARKS = {
    "extra_ranks": "a multi-rank test's rank counts after its first (set by harness/multirank.py; make check)",
    "simulated_hosts": "makes hosts of network namespaces on this machine (needs root; make check)",
    "root": "needs root for something else (a mount; make check)",
    "long": "a whole program that takes long, beside quick tests of the same parts (make check)",
    "check_long": "too long for make check's budget (minutes of compiling, say), beside quicker tests of the same "
                  "parts (make check-long)",
    "many_ranks": "a job of a test marked at_scale at 16, 32 or 64 ranks (set by harness/multirank.py): 16 by make "
                  "test-at-scale (make check), 32 and 64 by make test-many-ranks (make check-long)",
    "mpijob_image": "needs the MPIJob image (make image-mpijob) and simulated hosts: make test-image-mpijob",
    "across_hosts": "rerun by make test-across-hosts on simulated hosts: 4-rank tests on 2x2, 2-rank tests on 2x1",
    "openmpi": "rerun by make test-openmpi with Open MPI",
    "sanitize(address, thread)": "multi-rank tests rerun at their own rank count under AddressSanitizer+UBSan "
                                 "(address=True) and ThreadSanitizer (thread=True): tests/sanitizers/run.sh",
}


def pytest_configure(config):
    for mark, meaning in TIER_MARKS.items():
        config.addinivalue_line("markers", f"{mark}: {meaning}")
