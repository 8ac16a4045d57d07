"""The surface of hvdlite.torch: Horovod's names, argument names and defaults, errors before init, and a
one-rank job (where every collective is the identity and DistributedOptimizer is the plain optimizer)."""
import inspect

import pytest
import torch
import torch.nn as nn

import hvdlite.torch as hvd

# One rank: every collective is the identity and DistributedOptimizer is the plain optimizer. The tests run in
# file order in one process: the surface and the errors before init() come first.
pytestmark = pytest.mark.ranks(1)

NAMES = """init shutdown is_initialized size rank local_size local_rank cross_size cross_rank is_homogeneous
mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built ddl_built ccl_built cuda_built rocm_built
start_timeline stop_timeline ProcessSet global_process_set add_process_set remove_process_set
HorovodInternalError Average Sum Min Max Product Adasum allreduce allreduce_async allreduce_ allreduce_async_
sparse_allreduce_async
grouped_allreduce grouped_allreduce_async grouped_allreduce_ grouped_allreduce_async_ allgather allgather_async
grouped_allgather grouped_allgather_async broadcast broadcast_async broadcast_ broadcast_async_ alltoall
alltoall_async reducescatter reducescatter_async grouped_reducescatter grouped_reducescatter_async poll
synchronize join barrier broadcast_object allgather_object broadcast_parameters broadcast_optimizer_state
Compression DistributedOptimizer SyncBatchNorm""".split()

# Horovod's signatures: (parameter, default) in order; inspect.Parameter.empty for required ones.
REQ = inspect.Parameter.empty
SIGNATURES = {
    "allreduce": [("tensor", REQ), ("average", None), ("name", None), ("compression", "Compression.none"),
                  ("op", None), ("prescale_factor", 1.0), ("postscale_factor", 1.0),
                  ("process_set", "global_process_set")],
    "allreduce_async": [("tensor", REQ), ("average", None), ("name", None), ("op", None),
                        ("prescale_factor", 1.0), ("postscale_factor", 1.0), ("process_set", "global_process_set")],
    "allreduce_": [("tensor", REQ), ("average", None), ("name", None), ("op", None), ("prescale_factor", 1.0),
                   ("postscale_factor", 1.0), ("process_set", "global_process_set")],
    "grouped_allreduce": [("tensors", REQ), ("average", None), ("name", None), ("compression", "Compression.none"),
                          ("op", None), ("prescale_factor", 1.0), ("postscale_factor", 1.0),
                          ("process_set", "global_process_set")],
    "allgather": [("tensor", REQ), ("name", None), ("process_set", "global_process_set")],
    "broadcast": [("tensor", REQ), ("root_rank", REQ), ("name", None), ("process_set", "global_process_set")],
    "broadcast_async_": [("tensor", REQ), ("root_rank", REQ), ("name", None), ("process_set", "global_process_set")],
    "alltoall": [("tensor", REQ), ("splits", None), ("name", None), ("process_set", "global_process_set")],
    "reducescatter": [("tensor", REQ), ("name", None), ("compression", "Compression.none"), ("op", "Average"),
                      ("process_set", "global_process_set"), ("prescale_factor", 1.0), ("postscale_factor", 1.0)],
    "broadcast_object": [("obj", REQ), ("root_rank", 0), ("name", None), ("process_set", "global_process_set")],
    "allgather_object": [("obj", REQ), ("name", None), ("process_set", "global_process_set")],
    "broadcast_parameters": [("params", REQ), ("root_rank", REQ)],
    "broadcast_optimizer_state": [("optimizer", REQ), ("root_rank", REQ)],
    "DistributedOptimizer": [("optimizer", REQ), ("named_parameters", None), ("compression", "Compression.none"),
                             ("backward_passes_per_step", 1), ("op", "Average"), ("gradient_predivide_factor", 1.0),
                             ("num_groups", 0), ("groups", None), ("sparse_as_dense", False),
                             ("process_set", "global_process_set")],
    "join": [("device", -1)],
    "init": [("comm", None), ("process_sets", None)],
}


def resolve(default):
    if isinstance(default, str) and default in ("Compression.none", "global_process_set", "Average"):
        return {"Compression.none": hvd.Compression.none, "global_process_set": hvd.global_process_set,
                "Average": hvd.Average}[default]
    return default


def test_horovod_names_signatures_and_defaults(checks):
    for name in NAMES:
        checks.true(f"hvdlite.torch.{name} exists", hasattr(hvd, name))
    for function, expected in SIGNATURES.items():
        params = list(inspect.signature(getattr(hvd, function)).parameters.values())
        got = [(p.name, p.default) for p in params[:len(expected)]]
        want = [(n, resolve(d)) for n, d in expected]
        checks.true(f"signature of {function}", got == want, f"{got} != {want}")
    checks.true("HorovodInternalError is a RuntimeError", issubclass(hvd.HorovodInternalError, RuntimeError))
    checks.true("reduce ops are Horovod's numbers", (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product)
            == (0, 1, 2, 3, 4, 5))
    x = torch.tensor([1.5, -2.0], dtype=torch.float64)
    for comp, dtype in ((hvd.Compression.fp16, torch.float16), (hvd.Compression.bf16, torch.bfloat16)):
        wire, ctx = comp.compress(x)
        checks.true(f"{comp.__name__} sends {dtype}", wire.dtype == dtype)
        checks.true(f"{comp.__name__} restores float64", torch.equal(comp.decompress(wire, ctx), x))
        ints = torch.tensor([3])
        checks.true(f"{comp.__name__} leaves ints", comp.compress(ints)[0] is ints)


def test_calls_before_init_raise_value_error(checks):
    checks.raises("rank() before init raises ValueError", ValueError, hvd.rank)
    checks.true("is_initialized() is False before init", hvd.is_initialized() is False)
    checks.raises("allreduce before init raises", (ValueError, RuntimeError), hvd.allreduce, torch.ones(2))


def test_a_one_rank_job_is_the_identity(checks):
    hvd.init()
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    checks.true("allreduce on one rank", torch.equal(hvd.allreduce(x), x))
    checks.true("allgather on one rank", torch.equal(hvd.allgather(x), x))
    checks.true("broadcast on one rank", torch.equal(hvd.broadcast(x, 0), x))
    checks.true("alltoall on one rank", torch.equal(hvd.alltoall(x), x))
    checks.true("reducescatter on one rank", torch.equal(hvd.reducescatter(x, op=hvd.Sum), x))
    torch.manual_seed(0)
    model = nn.Linear(3, 2).double()
    ref = nn.Linear(3, 2).double()
    ref.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    data = torch.randn(8, 3, dtype=torch.float64)
    for m, o in ((model, opt), (ref, ref_opt)):
        for _ in range(3):
            o.zero_grad()
            m(data).pow(2).mean().backward()
            o.step()
    checks.true("DistributedOptimizer on one rank equals the plain optimizer", all(torch.equal(a, b) for a, b in zip(model.parameters(), ref.parameters())))
    checks.true("no CUDA initialised by the adapter", not torch.cuda.is_initialized())
