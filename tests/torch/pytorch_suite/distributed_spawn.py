"""PyTorch's own generic distributed suite, run as a third-party backend runs it.

`torch.testing._internal.distributed.distributed_test` ships with every torch wheel; PyTorch's
`test/distributed/test_distributed_spawn.py` runs its `DistributedTest._DistTestBase` for gloo, NCCL and UCC. This
module does the same for the backend named by `BACKEND` ("hvdlite", or "gloo" for the comparison on the same
machine): the suite's own tests, decorators and fixtures, unchanged. Run one pytest process per world size:

    BACKEND=hvdlite WORLD_SIZE=2 python -m pytest tests/torch/pytorch_suite/distributed_spawn.py

hvdlite declares what it supports the way a backend does, by joining `DistTestCases.backend_feature`'s sets before
the suite is imported. With `HVDLITE_ADMIT_GLOO_GATES=1` the tests that torch gates to gloo alone (they call public
functions: coalesced all-reduce, `scatter_object_list`, `batch_isend_irecv`, sparse tensors, timeouts, `get_future`)
run too; their bodies are torch's, untouched.
"""
import os
import types

import torch
from torch.testing._internal.common_distributed import DistTestCases

BACKEND = os.environ.setdefault("BACKEND", "hvdlite")
SUPPORTED_FEATURES = ("ddp", "subgroup", "plugin", "gpu", "cuda")
START_METHOD = os.environ.get("HVDLITE_SUITE_START", "spawn")

if BACKEND == "hvdlite":
    import hvdlite.torch  # noqa: F401  (registers the backend, in every spawned rank too: they import this module)
    for feature in SUPPORTED_FEATURES:
        DistTestCases.backend_feature[feature].add(BACKEND)

# Imported only now: the suite reads the feature sets while its class body is evaluated.
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402

torch.backends.cuda.matmul.allow_tf32 = False


def is_gloo_gate(test):
    """Whether torch skips this test only because the backend is not gloo (its reason names gloo)."""
    return getattr(test, "__unittest_skip__", False) and "gloo" in test.__unittest_skip_why__.lower()


def without_skip(test):
    """The same test function, without the skip flag that torch's decorator set on it."""
    copy = types.FunctionType(test.__code__, test.__globals__, test.__name__, test.__defaults__, test.__closure__)
    copy.__qualname__ = test.__qualname__
    copy.__kwdefaults__ = test.__kwdefaults__
    copy.__wrapped__ = getattr(test, "__wrapped__", test)
    return copy


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        if START_METHOD == "spawn":
            self._spawn_processes()
        else:
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if os.environ.get("HVDLITE_ADMIT_GLOO_GATES") == "1":
    for name in dir(DistributedTest._DistTestBase):
        gated = getattr(DistributedTest._DistTestBase, name)
        if name.startswith("test_") and is_gloo_gate(gated):
            setattr(TestDistBackendWithSpawn, name, without_skip(gated))
    del name, gated  # module globals named test* would be collected by pytest

# The spawned ranks find the class by its qualified name in this module.
TestDistBackendWithSpawn.__name__ = TestDistBackendWithSpawn.__qualname__ = f"TestDistBackendWithSpawn{BACKEND.upper()}"
globals()[TestDistBackendWithSpawn.__name__] = TestDistBackendWithSpawn
del TestDistBackendWithSpawn

if __name__ == "__main__":
    run_tests()
