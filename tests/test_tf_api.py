"""hvdlite.tensorflow / hvdlite.tensorflow.keras / hvdlite.keras in one process (tests/tf_workers/api.py):
Horovod's names and arguments, errors before init and for bad arguments, and size-1 behaviour."""
import os
import sys

import pytest

from tf_workers.launch import WORKERS, assert_all_ranks_ok, run


@pytest.mark.timeout(150)
def test_api_surface_errors_and_single_process_behaviour():
    returncode, output = run([sys.executable, os.path.join(WORKERS, "api.py")], timeout=140)
    assert_all_ranks_ok(returncode, output, 1)
