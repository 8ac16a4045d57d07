"""The GPU data path's own logic, on a machine without a GPU, through TEST DOUBLES of the CUDA driver and of
NCCL (tests/gpu/doubles: host memory stands for device memory; streams are deferred, so work runs only as far as
the events a stream waits on allow; collectives go over MPI). They check what hvdlite does: that the core's stream
waits for the work enqueued on the caller's stream before the submission and the caller's stream for the
collective, how each request maps to an NCCL reduction (average, scale factors as a pre-multiplied sum), fusion
through the GPU fusion buffer, joined ranks, the NCCL unique id over MPI, version and device agreement across
ranks, and that an asynchronous NCCL error ends the process. They are no evidence that anything works on a GPU
or with NCCL: tests/gpu/run.sh, on a GPU machine, is.
"""
import os
import sys

import numpy as np
import pytest

import hvdlite as hvd
from harness.multirank import job_size
from harness.gpu_doubles import ENV, build as build_doubles, doubles
from harness.processes import run, venv_tool
from harness.reference import check_close, rank_input, reduce_reference
from hvdlite import gpu
from hvdlite.requests import Collective, Request, address, dtype_name, submit, submit_group

OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}

if job_size() is None:
    build_doubles()

pytestmark = [pytest.mark.ranks(2), pytest.mark.hvd_env(**ENV),
              pytest.mark.sanitize(address=True, thread=True)]


@pytest.fixture(scope="module", autouse=True)
def started():
    hvd.init()
    status = gpu.gpu_status()
    assert status["nccl_collectives"] and status["nccl_path"].endswith("libnccl.so.2"), status
    yield


def gpu_request(collective, name, array, output, stream, op=hvd.Sum, prescale=1.0, postscale=1.0, root=0,
                splits=None, process_set=hvd.global_process_set):
    return Request(collective, name, dtype_name(array.dtype), array.shape, address(array), address(output), op,
                   prescale, postscale, root, splits, process_set=process_set, keepalive=(array, output),
                   gpu=(0, stream))


def finished(handles):
    """Waits for the handles, then on the host for their GPU work; returns nothing, raises their errors."""
    for handle in handles:
        handle.wait()
    gpu.host_wait(handles)
    for handle in handles:
        handle.release()


def test_every_reduction_nccl_has_against_float64_references():
    rank, size = hvd.rank(), hvd.size()
    stream = doubles().stream()
    cases = 0
    for dtype in ["uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]:
        for op_name, op in OPS.items():
            for scales in ((1.0, 1.0), (0.5, 3.0)):
                name = f"gpu.{dtype}.{op_name}.{scales[0]}"
                if not gpu.serves("allreduce", dtype, op, *scales):
                    # What the adapters stage through host memory: integer averages and scaled integer sums,
                    # scaled min/max/product.
                    assert not dtype.startswith("float") and dtype != "bfloat16" or op_name in ("min", "max", "product")
                    continue
                x = rank_input(dtype, (37,), rank, op_name, name)
                out = np.zeros_like(x)
                finished([submit(gpu_request(Collective.ALLREDUCE, name, x, out, stream, op, *scales))])
                inputs = [rank_input(dtype, (37,), r, op_name, name) for r in range(size)]
                check_close(name, out, reduce_reference(inputs, op_name, *scales), dtype, "GPU all-reduce")
                cases += 1
    assert cases == 8 * 3 + 4 * 2 * 2 + 4, cases  # every op unscaled; float sum and average scaled too


def test_the_collective_runs_after_the_work_enqueued_before_it():
    """A "kernel" enqueued on the caller's stream writes the input just before the submission, and nothing waits
    for it on the host: the collective must still see what it wrote (the double runs, on the host's wait for the
    collective, only what the core's stream waits for)."""
    rank, size = hvd.rank(), hvd.size()
    d = doubles()
    stream = d.stream()
    x = np.zeros(1000)
    out = np.full(1000, -1.0)
    d.cuda.fake_cuda_fill_f64(stream, x.ctypes.data, float(rank + 1.5), x.size)  # deferred
    handle = submit(gpu_request(Collective.ALLREDUCE, "after", x, out, stream))
    handle.wait()  # enqueued on the core's stream, not run
    assert (out == -1).all() and (x == 0).all(), "the double ran work nobody waited for"
    finished([handle])
    assert (out == sum(r + 1.5 for r in range(size))).all(), out[:4]


def test_the_callers_next_work_runs_after_the_collective():
    """After synchronize's stream wait, work the caller enqueues on its stream reads the reduced values."""
    rank, size = hvd.rank(), hvd.size()
    d = doubles()
    stream = d.stream()
    x = np.full(1000, float(rank + 1))
    out = np.full(1000, -1.0)
    handle = submit(gpu_request(Collective.ALLREDUCE, "before", x, out, stream))
    handle.wait()
    gpu.stream_wait([handle], stream)
    readback = np.zeros(1000)
    d.cuda.fake_cuda_copy(stream, readback.ctypes.data, out.ctypes.data, out.nbytes)  # deferred
    assert d.cuda.cuStreamSynchronize(stream) == 0
    assert (readback == sum(r + 1 for r in range(size))).all(), readback[:4]
    handle.release()


def test_256_small_tensors_are_fused_into_one_nccl_call():
    rank, size = hvd.rank(), hvd.size()
    d = doubles()
    stream = d.stream()
    arrays = [rank_input("float32", (i % 7 + 1,), rank, "sum", i) for i in range(256)]
    outs = [np.zeros_like(a) for a in arrays]
    before = d.nccl.fake_nccl_allreduce_calls()
    handles = submit_group([gpu_request(Collective.ALLREDUCE, f"small.{i}", a, o, stream)
                            for i, (a, o) in enumerate(zip(arrays, outs))])
    finished(handles)
    assert d.nccl.fake_nccl_allreduce_calls() - before == 1
    for i, out in enumerate(outs):
        inputs = [rank_input("float32", (i % 7 + 1,), r, "sum", i) for r in range(size)]
        check_close(f"small.{i}", out, reduce_reference(inputs, "sum"), "float32", "fused GPU all-reduce")


def test_broadcast_from_rank_1():
    rank = hvd.rank()
    stream = doubles().stream()
    x = np.arange(10, dtype=np.int64) * (rank + 1)
    out = np.zeros_like(x)
    finished([submit(gpu_request(Collective.BROADCAST, "gpu.broadcast", x, out, stream, root=1))])
    assert np.array_equal(out, np.arange(10) * 2), out


@pytest.mark.ranks(2, 3)
def test_process_sets_of_some_ranks_have_their_own_nccl_communicators():
    """Each set's members make its communicator alone; the other ranks go on meanwhile."""
    rank, size = hvd.rank(), hvd.size()
    stream = doubles().stream()
    sets = {"all but the first": list(range(1, size)), "all but the last": list(range(size - 1))}
    made = {name: hvd.add_process_set(ranks) for name, ranks in sets.items()}
    try:
        for name, ranks in sets.items():
            if rank not in ranks:
                continue
            x = np.full(8, float(rank + 1))
            out = np.zeros_like(x)
            finished([submit(gpu_request(Collective.ALLREDUCE, f"gpu.set.{name}", x, out, stream,
                                         process_set=made[name]))])
            assert (out == sum(r + 1 for r in ranks)).all(), (name, out)
    finally:
        for process_set in made.values():
            hvd.remove_process_set(process_set)


@pytest.mark.parametrize("equal", [True, False], ids=["equal rows", "rows differ by rank"])
def test_allgather_into_the_callers_output(equal):
    rank, size = hvd.rank(), hvd.size()
    stream = doubles().stream()
    rows = [3 if equal else r + 1 for r in range(size)]
    every = [rank_input("float32", (rows[r], 4), r, "sum", ("ag", equal)) for r in range(size)]
    out = np.zeros((sum(rows), 4), np.float32)
    handle = submit(gpu_request(Collective.ALLGATHER, f"gpu.allgather.{equal}", every[rank], out, stream))
    handle.wait()
    assert tuple(handle.output_shape()) == out.shape
    finished([handle])
    assert np.array_equal(out, np.concatenate(every)), out[:, 0]


def test_alltoall_with_splits_into_the_callers_output():
    rank, size = hvd.rank(), hvd.size()
    stream = doubles().stream()
    splits = [[(s + r) % 3 + 1 for r in range(size)] for s in range(size)]  # splits[sender][receiver]
    every = [rank_input("int64", (sum(splits[s]), 2), s, "sum", "a2a") for s in range(size)]
    received = [splits[s][rank] for s in range(size)]
    out = np.zeros((sum(received), 2), np.int64)
    handle = submit(gpu_request(Collective.ALLTOALL, "gpu.alltoall", every[rank], out, stream, splits=splits[rank]))
    handle.wait()
    assert list(handle.received_splits()) == received and tuple(handle.output_shape()) == out.shape
    finished([handle])
    expected = [every[s][sum(splits[s][:rank]):sum(splits[s][:rank + 1])] for s in range(size)]
    assert np.array_equal(out, np.concatenate(expected)), out[:, 0]


@pytest.mark.parametrize("rows_per_rank", [2, 2.5], ids=["even", "uneven"])
@pytest.mark.parametrize("op_name,scales", [("sum", (1.0, 1.0)), ("average", (0.5, 3.0)), ("max", (1.0, 1.0))])
def test_reducescatter_into_the_callers_output(rows_per_rank, op_name, scales):
    rank, size = hvd.rank(), hvd.size()
    stream = doubles().stream()
    rows = int(rows_per_rank * size)
    name = f"gpu.rs.{rows}.{op_name}"
    every = [rank_input("float64", (rows, 3), r, op_name, name) for r in range(size)]
    mine = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
    out = np.zeros((mine[rank], 3))
    finished([submit(gpu_request(Collective.REDUCESCATTER, name, every[rank], out, stream, OPS[op_name], *scales))])
    start = sum(mine[:rank])
    expected = reduce_reference(every, op_name, *scales)[start:start + mine[rank]]
    check_close(name, out, expected, "float64", "GPU reducescatter")


def test_a_joined_rank_contributes_zeros():
    rank = hvd.rank()
    stream = doubles().stream()
    if rank == 1:
        assert hvd.join() == 0  # rank 0 joins last; this rank's stream is run by its watch thread meanwhile
        return
    x = np.full(5, 3.0, dtype=np.float32)
    out = np.zeros_like(x)
    finished([submit(gpu_request(Collective.ALLREDUCE, "gpu.joined", x, out, stream))])
    assert np.array_equal(out, x), out
    assert hvd.join() == 0


def test_a_tensor_on_the_gpu_on_one_rank_and_on_the_cpu_on_another_is_an_error_on_both():
    rank = hvd.rank()
    x = np.ones(4, dtype=np.float32)
    out = np.zeros_like(x)
    if rank == 0:
        handle = submit(gpu_request(Collective.ALLREDUCE, "where", x, out, doubles().stream()))
    else:
        handle = submit(Request(Collective.ALLREDUCE, "where", "float32", x.shape, address(x), address(out),
                                hvd.Sum, keepalive=(x, out)))
    with pytest.raises(hvd.HorovodInternalError) as error:
        handle.wait()
        handle.raise_error()
    message = str(error.value)
    assert "Mismatched devices" in message and "'where'" in message, message
    assert "rank 0 sent a GPU tensor, rank 1 sent a CPU tensor" in message, message
    handle.release()


VERSIONS = """
import sys, numpy as np, hvdlite as hvd
from hvdlite import gpu
from hvdlite.requests import Collective, Request, address, submit
hvd.init()
assert gpu.gpu_status()["nccl_collectives"]
x = np.ones(3, np.float32)
handle = submit(Request(Collective.ALLREDUCE, "versions", "float32", x.shape, address(x), address(x), hvd.Sum,
                        keepalive=(x,), gpu=(0, 0)))
try:
    handle.wait()
except hvd.HorovodInternalError as error:
    open(f"{sys.argv[1]}/error-{hvd.rank()}.txt", "w").write(str(error))
handle.release()
hvd.shutdown()
"""

ASYNC_ERROR = """
import numpy as np, hvdlite as hvd
from hvdlite import gpu
from hvdlite.requests import Collective, Request, address, submit
hvd.init()
assert gpu.collectives_available()
x = np.ones(3, np.float32)
handle = submit(Request(Collective.ALLREDUCE, "doomed", "float32", x.shape, address(x), address(x), hvd.Sum,
                        keepalive=(x,), gpu=(0, 0)))
handle.wait()
gpu.host_wait([handle])
print(f"REDUCED {hvd.rank()} {x}", flush=True)  # one write: the ranks share the output
import time
time.sleep(30)  # the watch ends the process before this returns
print("STILL ALIVE", flush=True)
"""


@pytest.mark.ranks(1)
def test_ranks_with_different_nccl_versions_refuse_to_mix_them(tmp_path):
    script = tmp_path / "versions.py"
    script.write_text(VERSIONS)
    env = dict(ENV, OMP_NUM_THREADS="1")
    args = [venv_tool("mpiexec")]
    for version in ("22703", "22106"):  # hydra's MPMD form: one rank of each
        args += ["-n", "1", "-env", "FAKE_NCCL_VERSION", version, sys.executable, str(script), str(tmp_path), ":"]
    code, output = run(args[:-1], timeout=120, env=env)
    assert code == 0, output
    for rank in (0, 1):
        error = (tmp_path / f"error-{rank}.txt").read_text()
        assert "different NCCL versions (rank 0 has 2.27.3, rank 1 has 2.21.6)" in error, error


@pytest.mark.ranks(1)
def test_a_rank_that_cannot_set_up_its_gpu_fails_every_rank_instead_of_hanging(tmp_path):
    script = tmp_path / "versions.py"
    script.write_text(VERSIONS)  # the same job: one all-reduce of a GPU tensor, errors written per rank
    args = [venv_tool("mpiexec"), "-n", "1", sys.executable, str(script), str(tmp_path), ":",
            "-n", "1", "-env", "FAKE_CUDA_FAIL_STREAM_CREATE", "1", sys.executable, str(script), str(tmp_path)]
    code, output = run(args, timeout=120, env=dict(ENV, OMP_NUM_THREADS="1"))
    assert code == 0, output
    here = (tmp_path / "error-1.txt").read_text()
    assert "cuStreamCreate" in here, here
    other = (tmp_path / "error-0.txt").read_text()
    assert "another rank of process set 0 could not set up its GPU for NCCL" in other, other


@pytest.mark.ranks(1)
def test_an_asynchronous_nccl_error_ends_the_process_and_says_which_tensor(tmp_path):
    script = tmp_path / "async_error.py"
    script.write_text(ASYNC_ERROR)
    env = dict(ENV, OMP_NUM_THREADS="1")
    # Only rank 1's NCCL fails (hydra's MPMD form): with both failing, whichever rank aborted first ended the
    # other before it could print its own line. Rank 0 must then be ended by the job's end, not live on.
    args = [venv_tool("mpiexec"), "-n", "1", sys.executable, str(script), ":",
            "-n", "1", "-env", "FAKE_NCCL_ASYNC_ERROR_AFTER", "1", sys.executable, str(script)]
    code, output = run(args, timeout=120, env=env)
    assert code != 0 and "STILL ALIVE" not in output, output
    assert "REDUCED 1 [2. 2. 2.]" in output, output  # reduced before the error
    assert "[hvdlite rank 1] NCCL collective failed (allreduce of 'doomed'): fake: remote process exited" \
        in output, output


@pytest.fixture
def torch_on_doubles(monkeypatch):
    """hvdlite.torch's GPU path (frameworks/torch/gpu_path.py) on CPU tensors: with the doubles, host memory is
    "device memory", so only which tensors count as on a GPU, their stream and the final wait are replaced (a
    TEST DOUBLE of torch's CUDA side; the adapter's own logic runs as it is)."""
    import hvdlite.torch as hvd_torch
    from hvdlite.torch import gpu_path as module
    stream = doubles().stream()
    monkeypatch.setattr(module, "on_one_gpu", lambda tensors: bool(tensors))
    monkeypatch.setattr(module, "placement", lambda tensor: (0, stream))
    monkeypatch.setattr(module, "order_after", lambda core_handles, device: gpu.host_wait(core_handles))
    return hvd_torch


def test_hvdlite_torch_puts_every_collective_of_gpu_tensors_on_the_nccl_path(torch_on_doubles):
    import torch
    t = torch_on_doubles
    rank, size = hvd.rank(), hvd.size()
    total = sum(r + 1 for r in range(size))
    calls = doubles().nccl.fake_nccl_calls()
    x = torch.arange(6, dtype=torch.float32) * (rank + 1)
    assert torch.equal(t.allreduce(x, op=t.Sum, name="t.ar"), torch.arange(6.0) * total)
    assert torch.equal(x, torch.arange(6, dtype=torch.float32) * (rank + 1)), "the input changed"
    strided = (torch.arange(12.0).reshape(3, 4) * (rank + 1)).t()  # not contiguous: reduced in a copy, written back
    t.allreduce_(strided, op=t.Average, name="t.ar_")
    assert torch.allclose(strided, torch.arange(12.0).reshape(3, 4).t() * total / size)
    grouped = t.grouped_allreduce([torch.ones(3) * rank, torch.ones(2, dtype=torch.float64)], op=t.Sum, name="t.g")
    assert torch.equal(grouped[0], torch.ones(3) * sum(range(size))) and torch.equal(grouped[1], torch.ones(2) * size)
    assert torch.equal(t.broadcast(torch.full((4,), float(rank)), root_rank=size - 1, name="t.b"),
                       torch.full((4,), float(size - 1)))
    mine = torch.full((rank + 1, 2), rank, dtype=torch.int32)
    gathered = t.allgather(mine, name="t.ag")
    assert torch.equal(gathered, torch.cat([torch.full((r + 1, 2), r, dtype=torch.int32) for r in range(size)]))
    splits = [r + 1 for r in range(size)]  # rank r gets r + 1 rows from every rank
    sent = torch.arange(sum(splits) * 2, dtype=torch.int64).reshape(-1, 2) + 100 * rank
    received, received_splits = t.alltoall(sent, splits=splits, name="t.a2a")
    assert received_splits.tolist() == [rank + 1] * size
    assert torch.equal(received, torch.cat([(torch.arange(sum(splits) * 2).reshape(-1, 2) + 100 * s)
                                            [sum(splits[:rank]):sum(splits[:rank + 1])] for s in range(size)]))
    rows = 2 * size + 1
    scattered = t.reducescatter(torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3) * (rank + 1),
                                op=t.Sum, name="t.rs")
    start = sum(rows // size + (r < rows % size) for r in range(rank))
    count = rows // size + (rank < rows % size)
    assert torch.equal(scattered, (torch.arange(rows * 3, dtype=torch.float64).reshape(rows, 3) * total)[start:start + count])
    # Every collective above went through NCCL (the double), none through host memory: one call for each
    # all-reduce (the grouped one fused) and the broadcast; a broadcast per rank for the allgather of unequal
    # rows, a send and a receive per rank for the alltoall, a reduce per rank for the uneven reducescatter. The
    # host exchanges of first dimensions and splits are not NCCL's.
    assert doubles().nccl.fake_nccl_calls() - calls == 4 + size + 2 * size + size


def test_distributed_optimizer_reduces_gpu_gradients_through_prepared_nccl_requests(torch_on_doubles):
    """DistributedOptimizer's per-gradient fast path on the GPU: each gradient's request is filled once and
    resubmitted every step, reduced in place by NCCL, and the step reads the averaged gradients."""
    import copy

    import torch

    from hvdlite.torch import gpu_path
    t = torch_on_doubles
    rank, size = hvd.rank(), hvd.size()
    torch.manual_seed(0)  # the same model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).double()
    optimizer = t.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())

    def batch(r, step):
        return torch.from_numpy(rank_input("float64", (3, 5), r, "sum", ("optimizer", step)))

    allreduce_calls = doubles().nccl.fake_nccl_allreduce_calls()
    prepared = None
    for step in range(3):
        expected = []  # every rank's gradients computed here, on copies, and averaged in float64
        for r in range(size):
            replica = copy.deepcopy(model)
            replica(batch(r, step)).square().sum().backward()
            expected.append([p.grad.clone() for p in replica.parameters()])
        optimizer.zero_grad()
        model(batch(rank, step)).square().sum().backward()
        optimizer.synchronize()
        for p, *per_rank in zip(model.parameters(), *expected):
            check_close(f"gradient {tuple(p.shape)}", p.grad.numpy(), (sum(per_rank) / size).numpy(), "float64",
                        f"step {step}:")
        with optimizer.skip_synchronize():
            optimizer.step()
        requests = [bucket.prepared for bucket in optimizer._buckets]
        assert all(r is not None for r in requests), "a gradient left the prepared path"
        assert prepared is None or all(a is b for a, b in zip(prepared, requests)), "a request was filled again"
        prepared = requests
    assert {bucket.placement for bucket in optimizer._buckets} == {gpu_path.placement(model[0].weight)}
    assert doubles().nccl.fake_nccl_allreduce_calls() - allreduce_calls >= 3, "the gradients did not go to NCCL"
