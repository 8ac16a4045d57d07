"""DistributedOptimizer, parameter/optimizer-state broadcast and SyncBatchNorm, checked on every rank.

The reference for training is a single process run, on every rank, over the concatenation of all ranks'
batches with the plain torch optimizer (float64, so equality is tight).
"""
import copy
import time
import warnings

import pytest
import torch
import torch.nn as nn

import hvdlite.torch as hvd
from harness.seeds import rank_generator

# HVDLITE_OVERLAP auto is "off" on a machine with no more cores than ranks (async work held until every rank
# waits); "on" runs each gradient's all-reduce as soon as it is ready. Every test runs under both.
pytestmark = [pytest.mark.ranks(2, 3),
              # A rank that never submits turns into an error on every rank instead of a hang.
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=15, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=30)]


@pytest.fixture(scope="module", autouse=True)
def started():
    torch.set_num_threads(1)
    hvd.init()


@pytest.fixture(autouse=True, params=[pytest.param(mode, marks=pytest.mark.hvd_env(HVDLITE_OVERLAP=mode), id=f"overlap {mode}")
                                      for mode in ("auto", "on")])
def overlap(request):
    return request.param

STEPS = 4
BATCH = 4  # rows per rank


def mlp(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 6), nn.Tanh(), nn.Linear(6, 3)).to(dtype)


def global_batch(step, dtype=torch.float64):
    """The whole job's batch for ``step`` (every rank can build it): BATCH rows per rank."""
    g = torch.Generator().manual_seed(500 + step)
    n = BATCH * hvd.size()
    return torch.randn(n, 5, generator=g, dtype=dtype), torch.randn(n, 3, generator=g, dtype=dtype)


def shard(t):
    return t[hvd.rank() * BATCH:(hvd.rank() + 1) * BATCH]


def params_of(model):
    return [p.detach().clone() for p in model.parameters()]


def same_on_every_rank(checks, label, tensors):
    gathered = hvd.allgather_object([t.detach().cpu() for t in tensors])
    ok = all(all(torch.equal(a, b) for a, b in zip(gathered[0], other)) for other in gathered[1:])
    checks.true(f"{label}: bitwise identical on every rank", ok)


def close_params(checks, label, got, want, tol=1e-12):
    for i, (a, b) in enumerate(zip(got, want)):
        checks.close(f"{label}: parameter {i} equals the single-process run", a, b, rtol=tol, atol=tol)


def train_reference(model, optimizer, steps=STEPS, clip=None, dtype=torch.float64):
    for step in range(steps):
        x, y = global_batch(step, dtype)
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
    return params_of(model)


def train_distributed(model, optimizer, steps=STEPS, passes=1, dtype=torch.float64, first=0):
    for step in range(first, first + steps):
        x, y = global_batch(step, dtype)
        x, y = shard(x), shard(y)
        optimizer.zero_grad()
        for part in range(passes):
            rows = slice(part * BATCH // passes, (part + 1) * BATCH // passes)
            (nn.functional.mse_loss(model(x[rows]), y[rows]) / passes).backward()
        optimizer.step()
    return params_of(model)


OPTIMIZERS = {
    "SGD momentum+wd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "Adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
    "RMSprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01),
}


def test_wrapping_keeps_the_class_and_refuses_bad_arguments(checks):
    model = mlp()
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    checks.true("returns an optimizer of the wrapped class", isinstance(opt, torch.optim.SGD))
    checks.true("keeps the class name", type(opt).__name__ == "SGD", type(opt).__name__)
    checks.true("keeps hyper-parameters", opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.5)
    named = list(model.named_parameters())
    checks.raises("duplicate names raise ValueError", ValueError, hvd.DistributedOptimizer, torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=[("w", p) for _, p in named])
    checks.raises("missing names raise ValueError", ValueError, hvd.DistributedOptimizer, torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=named[:-1])
    checks.raises("names that are not tuples raise ValueError", ValueError, hvd.DistributedOptimizer, torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=[p for _, p in named])
    checks.raises("wrapping twice raises ValueError", ValueError, hvd.DistributedOptimizer, opt)
    checks.raises("predivide with Sum raises ValueError", ValueError, hvd.DistributedOptimizer, torch.optim.SGD(model.parameters(), lr=0.1), op=hvd.Sum, gradient_predivide_factor=2.0)


def test_training_equals_one_process_on_the_whole_batch(checks):
    for label, make in OPTIMIZERS.items():
        ref_model = mlp()
        want = train_reference(ref_model, make(ref_model.parameters()))
        model = mlp(seed=hvd.rank() + 10)  # different on purpose: broadcast_parameters fixes it
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        base = make(model.parameters())
        opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        # rank 0's initial parameters are those of seed 10: rebuild the reference from them
        ref_model = mlp(seed=10)
        want = train_reference(ref_model, make(ref_model.parameters()))
        got = train_distributed(model, opt)
        same_on_every_rank(checks, f"{label} after {STEPS} steps", got)
        close_params(checks, f"{label} after {STEPS} steps", got, want)
    # an LR scheduler created before wrapping keeps working on the wrapped optimizer
    ref_model = mlp()
    ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.2, momentum=0.9)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=1, gamma=0.5)
    model = mlp()
    base = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(base, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the scheduler watches the unwrapped optimizer's step
        for step in range(STEPS):
            x, y = global_batch(step)
            for m, o, s, xs, ys in ((ref_model, ref_opt, ref_sched, x, y), (model, opt, sched, shard(x), shard(y))):
                o.zero_grad()
                nn.functional.mse_loss(m(xs), ys).backward()
                o.step()
                s.step()
    checks.true("scheduler built before wrapping drives the wrapped lr", opt.param_groups[0]["lr"] == 0.2 * 0.5 ** STEPS)
    close_params(checks, "LR scheduler created before wrapping", params_of(model), params_of(ref_model))
    # accumulation over two backward passes per step
    ref_model = mlp()
    want = train_reference(ref_model, OPTIMIZERS["Adam"](ref_model.parameters()))
    model = mlp()
    opt = hvd.DistributedOptimizer(OPTIMIZERS["Adam"](model.parameters()),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=2)
    got = train_distributed(model, opt, passes=2)
    same_on_every_rank(checks, "backward_passes_per_step=2", got)
    close_params(checks, "backward_passes_per_step=2", got, want)
    x, y = global_batch(STEPS)
    opt.zero_grad()
    nn.functional.mse_loss(model(shard(x)), shard(y)).backward()
    checks.true("backward_passes_per_step=2: nothing is sent after the first pass", opt._in_flight() == 0, str(opt._in_flight()))
    nn.functional.mse_loss(model(shard(x)), shard(y)).backward()
    checks.true("backward_passes_per_step=2: every gradient is in flight after the second pass", opt._in_flight() == len(list(model.parameters())), str(opt._in_flight()))
    opt.step()
    # grouped all-reduces and the op/predivide variants give the same training
    variants = {
        "groups=2": dict(groups=2),
        "groups as lists": dict(groups="lists"),
        "gradient_predivide_factor=2": dict(gradient_predivide_factor=2.0),
        "op=Sum with lr/size": dict(op=hvd.Sum),
    }
    for label, kwargs in variants.items():
        ref_model = mlp()
        want = train_reference(ref_model, torch.optim.SGD(ref_model.parameters(), lr=0.1, momentum=0.9))
        model = mlp()
        lr = 0.1 / hvd.size() if kwargs.get("op") == hvd.Sum else 0.1
        if kwargs.get("groups") == "lists":
            kwargs = dict(groups=[[model[0].weight, model[2].bias], [model[4].weight, model[0].bias]])
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9),
                                       named_parameters=model.named_parameters(), **kwargs)
        got = train_distributed(model, opt)
        same_on_every_rank(checks, label, got)
        close_params(checks, label, got, want, tol=1e-10)
    # compression: close to the float32 reference, identical on every rank
    for comp, tol in ((hvd.Compression.fp16, 2e-3), (hvd.Compression.bf16, 2e-2)):
        ref_model = mlp(dtype=torch.float32)
        want = train_reference(ref_model, torch.optim.SGD(ref_model.parameters(), lr=0.1), dtype=torch.float32)
        model = mlp(dtype=torch.float32)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters(), compression=comp)
        got = train_distributed(model, opt, dtype=torch.float32)
        same_on_every_rank(checks, f"compression {comp.__name__}", got)
        close_params(checks, f"compression {comp.__name__}", got, want, tol=tol)


def test_synchronize_then_clip_before_step(checks):
    ref_model = mlp()
    want = train_reference(ref_model, torch.optim.SGD(ref_model.parameters(), lr=0.1), clip=0.05)
    model = mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(STEPS):
        x, y = global_batch(step)
        opt.zero_grad()
        nn.functional.mse_loss(model(shard(x)), shard(y)).backward()
        opt.synchronize()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        with opt.skip_synchronize():
            opt.step()
    got = params_of(model)
    same_on_every_rank(checks, "synchronize + clip + skip_synchronize", got)
    close_params(checks, "synchronize + clip + skip_synchronize", got, want)
    # step() right after synchronize() warns and does not reduce twice (op=Sum would double the gradient)
    model = mlp()
    ref = mlp()
    want = train_reference(ref, torch.optim.SGD(ref.parameters(), lr=0.1), steps=1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1 / hvd.size()),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    x, y = global_batch(0)
    nn.functional.mse_loss(model(shard(x)), shard(y)).backward()
    opt.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt.step()
    checks.true("step() after synchronize() warns", any("skip_synchronize" in str(w.message) for w in caught))
    close_params(checks, "step() after synchronize() does not reduce twice", params_of(model), want)


def test_unused_parameters_and_zero_grad_misuse(checks):
    rank, size = hvd.rank(), hvd.size()

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(3)
            self.body = nn.Linear(5, 4).double()
            self.head_a = nn.Linear(4, 3).double()
            self.head_b = nn.Linear(4, 3).double()
            self.never = nn.Linear(4, 3).double()

        def forward(self, x, use_b):
            h = torch.tanh(self.body(x))
            return self.head_a(h) + (self.head_b(h) if use_b else 0)

    model, ref = TwoHeads(), TwoHeads()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    never_before = model.never.weight.detach().clone()
    for step in range(3):
        x, y = global_batch(step)
        # only rank 0 uses head_b on even steps; nobody ever uses `never`
        opt.zero_grad()
        nn.functional.mse_loss(model(shard(x), use_b=(rank == 0 and step % 2 == 0)), shard(y)).backward()
        opt.step()
        ref_opt.zero_grad()
        total = sum(nn.functional.mse_loss(ref(x[r * BATCH:(r + 1) * BATCH], use_b=(r == 0 and step % 2 == 0)),
                                           y[r * BATCH:(r + 1) * BATCH]) for r in range(size)) / size
        total.backward()
        ref_opt.step()
    got = params_of(model)
    same_on_every_rank(checks, "unused parameters", got)
    close_params(checks, "unused parameters", got, params_of(ref))
    checks.true("a parameter no rank uses is unchanged", torch.equal(model.never.weight, never_before))
    # zero_grad() between backward() and step() is refused on every rank, and training can go on
    x, y = global_batch(0)
    nn.functional.mse_loss(model(shard(x), use_b=True), shard(y)).backward()
    error = checks.raises("zero_grad() between backward() and step() raises", AssertionError, opt.zero_grad)
    checks.true("the error says why", error is not None and "before optimizer.step()" in str(error), str(error))
    opt.step()
    opt.zero_grad()
    checks.true("zero_grad() after step() works", all(p.grad is None for p in model.parameters()))
    # too many backward passes before step() is refused too
    nn.functional.mse_loss(model(shard(x), use_b=True), shard(y)).backward()
    checks.raises("a second backward() before step() raises", AssertionError, lambda: nn.functional.mse_loss(model(shard(x), use_b=True), shard(y)).backward())
    opt.synchronize()
    with opt.skip_synchronize():
        opt.step()


def test_sparse_gradients_match_dense(checks):
    size = hvd.size()

    def model_of(sparse):
        torch.manual_seed(4)
        return nn.ModuleDict({"emb": nn.Embedding(10, 4, sparse=sparse), "out": nn.Linear(4, 2)}).double()

    def forward(m, ids):
        return m["out"](m["emb"](ids).mean(1))

    g = torch.Generator().manual_seed(9)
    ids = torch.randint(0, 10, (size * BATCH, 3), generator=g)
    target = torch.randn(size * BATCH, 2, generator=g, dtype=torch.float64)
    ref = model_of(False)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for _ in range(2):
        ref_opt.zero_grad()
        nn.functional.mse_loss(forward(ref, ids), target).backward()
        ref_opt.step()
    for sparse_as_dense in (False, True):
        model = model_of(True)
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                       named_parameters=model.named_parameters(), sparse_as_dense=sparse_as_dense)
        for _ in range(2):
            opt.zero_grad()
            nn.functional.mse_loss(forward(model, shard(ids)), shard(target)).backward()
            opt.step()
        got = params_of(model)
        same_on_every_rank(checks, f"sparse gradients, sparse_as_dense={sparse_as_dense}", got)
        close_params(checks, f"sparse gradients, sparse_as_dense={sparse_as_dense}", got, params_of(ref))


def test_join_with_uneven_data(checks):
    """Uneven data: rank r trains 2 + r steps, then joins; joined ranks count as zero gradients (the average
    still divides by the job's size); the last rank to join then broadcasts its parameters."""
    rank, size = hvd.rank(), hvd.size()
    model, ref = mlp(), mlp()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for step in range(2 + rank):
        x, y = global_batch(step)
        opt.zero_grad()
        nn.functional.mse_loss(model(shard(x)), shard(y)).backward()
        opt.step()
    last = hvd.join()
    checks.true("join returns the last rank to join", last == size - 1, repr(last))
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(2 + size - 1):
        x, y = global_batch(step)
        ref_opt.zero_grad()
        total = sum(nn.functional.mse_loss(ref(x[r * BATCH:(r + 1) * BATCH]), y[r * BATCH:(r + 1) * BATCH])
                    for r in range(size) if step < 2 + r) / size
        total.backward()
        ref_opt.step()
    got = params_of(model)
    same_on_every_rank(checks, "uneven steps with join", got)
    close_params(checks, "uneven steps with join", got, params_of(ref))


def test_gradient_allreduce_overlaps_backward(checks):
    """The last layer's all-reduce starts, and finishes, while backward is still computing earlier layers."""
    record = {}

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            bucket = opt._bucket_of[model[4].weight]
            record["last_submitted"] = bucket.work is not None
            record["first_submitted"] = opt._bucket_of[model[0].weight].work is not None
            deadline = time.time() + 20
            # A plain dense gradient takes the in-place fast path: bucket.work is the core's Handle.
            while bucket.work is not None and not bucket.work.poll() and time.time() < deadline:
                time.sleep(0.001)
            record["last_done_during_backward"] = bucket.work is not None and bucket.work.poll()
            record["t_done"] = time.time()
            time.sleep(0.05)
            return grad

    model = mlp(dtype=torch.float32)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = global_batch(0, torch.float32)
    h = SlowBackward.apply(model[1](model[0](shard(x))))
    out = model[4](model[3](model[2](h)))
    nn.functional.mse_loss(out, shard(y)).backward()
    t_end = time.time()
    checks.true("the last layer's all-reduce was submitted during backward", record.get("last_submitted"), record)
    checks.true("the first layer's gradient was not ready yet then", record.get("first_submitted") is False, record)
    checks.true("the last layer's all-reduce completed before backward finished", record.get("last_done_during_backward") and record["t_done"] < t_end, record)
    opt.step()
    same_on_every_rank(checks, "after the overlapped step", params_of(model))


def test_timeline_names_gradients_by_parameter(checks):
    """A timeline started at run time records the gradients' all-reduces under their parameter names."""
    import json
    import os
    import tempfile
    path = os.path.join(tempfile.gettempdir(), f"hvdlite_torch_timeline_{os.getppid()}.json")
    model = mlp(dtype=torch.float32)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    # start/stop are applied by the core's thread at its next round: a barrier after each makes sure the step's
    # all-reduces are negotiated after the start and the file is closed before rank 0 reads it.
    hvd.start_timeline(path)
    hvd.barrier()
    x, y = global_batch(0, torch.float32)
    nn.functional.mse_loss(model(shard(x)), shard(y)).backward()
    opt.step()
    hvd.stop_timeline()
    hvd.barrier()
    if hvd.rank() == 0:
        with open(path) as f:
            events = json.load(f)
        events = events["traceEvents"] if isinstance(events, dict) else events
        text = json.dumps(events)
        for name, _ in model.named_parameters():
            checks.true(f"timeline has the all-reduce of {name}", f"DistributedOptimizer.{name}" in text)
        os.remove(path)


def test_broadcast_parameters_and_optimizer_state(checks):
    rank, size = hvd.rank(), hvd.size()
    root = size - 1
    model = mlp(seed=rank)
    hvd.broadcast_parameters(model.state_dict(), root_rank=root)
    close_params(checks, "broadcast_parameters(state_dict)", params_of(model), params_of(mlp(seed=root)), tol=0)
    model = mlp(seed=rank)
    hvd.broadcast_parameters(model.named_parameters(), root_rank=0)
    close_params(checks, "broadcast_parameters(named_parameters)", params_of(model), params_of(mlp(seed=0)), tol=0)
    bn = nn.BatchNorm1d(3)
    bn.running_mean.fill_(rank)
    bn.num_batches_tracked.fill_(rank + 7)
    hvd.broadcast_parameters(bn.state_dict(), root_rank=root)
    checks.true("broadcast_parameters covers buffers", float(bn.running_mean[0]) == root
            and int(bn.num_batches_tracked) == root + 7)

    # optimizer state that exists only on the root (it stepped; the others are fresh, with other settings)
    def stepped_adam(seed):
        m = mlp(seed=0)
        o = torch.optim.Adam(m.parameters(), lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)
        train_reference(m, o, steps=2)
        return m, o

    root_model, root_opt = stepped_adam(0)
    if rank == 0:
        model, opt = root_model, root_opt
        root_model, root_opt = stepped_adam(0)  # an untouched copy to compare with
    else:
        model = copy.deepcopy(root_model)
        opt = torch.optim.Adam(model.parameters(), lr=0.5 + rank, betas=(0.5, 0.5), weight_decay=0.0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    group = opt.param_groups[0]
    checks.true("scalar hyper-parameters come from the root", group["lr"] == 0.01 and tuple(group["betas"]) == (0.8, 0.9) and group["weight_decay"] == 0.1, str({k: group[k] for k in ("lr", "betas", "weight_decay")}))
    state = [opt.state[p] for p in model.parameters()]
    want = [root_opt.state[p] for p in root_model.parameters()]
    checks.true("state created on ranks that had none", all(len(s) == 3 for s in state), str([len(s) for s in state]))
    for i, (s, w) in enumerate(zip(state, want)):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            checks.close(f"optimizer state {key} of parameter {i} is the root's", s[key], w[key])
    got = train_distributed(model, opt, steps=2, first=2)
    same_on_every_rank(checks, "training after broadcast_optimizer_state", got)
    ref_model, ref_opt = stepped_adam(0)
    for step in range(2, 4):
        x, yy = global_batch(step)
        ref_opt.zero_grad()
        nn.functional.mse_loss(ref_model(x), yy).backward()
        ref_opt.step()
    close_params(checks, "training after broadcast_optimizer_state", got, params_of(ref_model))

    # no state anywhere yet: only hyper-parameters travel; every rank stays stateless and equal
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * (rank + 1), momentum=0.9 if rank == 0 else 0.1)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    checks.true("fresh optimizer: lr and momentum from the root", opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.9)
    checks.true("fresh optimizer stays without state", len(opt.state) == 0)
    # parameter groups that differ between ranks: every rank raises ValueError
    model = mlp()
    params = list(model.parameters())
    opt = torch.optim.SGD(params if rank == 0 else params[:-1], lr=0.1)
    checks.raises("different parameter groups raise ValueError on every rank", ValueError, hvd.broadcast_optimizer_state, opt, 0)
    # objects
    checks.true("broadcast_object of a lambda (cloudpickle)", hvd.broadcast_object((lambda v: v + rank) if rank == 0 else None)(1) == 1)


def test_sync_batch_norm_matches_whole_batch_statistics(checks):
    rank, size = hvd.rank(), hvd.size()
    rows = [r + 2 for r in range(size)]  # uneven batches exercise the exact combination of statistics
    start = sum(rows[:rank])
    g = torch.Generator().manual_seed(21)
    x_all = torch.randn(sum(rows), 3, 2, 2, generator=g, dtype=torch.float64) * 3 + 1
    w_all = torch.randn(sum(rows), 3, 2, 2, generator=g, dtype=torch.float64)
    torch.manual_seed(5)
    ref = nn.BatchNorm2d(3, momentum=0.3).double()
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-1, 1)
    sync = hvd.SyncBatchNorm(3, momentum=0.3).double()
    sync.load_state_dict(ref.state_dict())
    for step in range(2):
        xr = x_all.clone().requires_grad_(True)
        y_ref = ref(xr)
        (y_ref * w_all).sum().backward()
        x = x_all[start:start + rows[rank]].clone().requires_grad_(True)
        sync.zero_grad()
        y = sync(x)
        (y * w_all[start:start + rows[rank]]).sum().backward()
        checks.close(f"SyncBatchNorm output step {step}", y, y_ref[start:start + rows[rank]], 1e-10, 1e-10)
        checks.close(f"SyncBatchNorm input gradient step {step}", x.grad, xr.grad[start:start + rows[rank]], 1e-10, 1e-10)
        checks.close(f"SyncBatchNorm weight gradient summed over ranks step {step}", hvd.allreduce(sync.weight.grad, op=hvd.Sum), ref.weight.grad, 1e-10, 1e-10)
        checks.close(f"SyncBatchNorm bias gradient summed over ranks step {step}", hvd.allreduce(sync.bias.grad, op=hvd.Sum), ref.bias.grad, 1e-10, 1e-10)
        ref.weight.grad = None
        ref.bias.grad = None
    checks.close("SyncBatchNorm running mean", sync.running_mean, ref.running_mean, 1e-12, 1e-12)
    checks.close("SyncBatchNorm running var", sync.running_var, ref.running_var, 1e-12, 1e-12)
    sync.eval()
    ref.eval()
    checks.close("SyncBatchNorm eval uses running statistics", sync(x_all[:2]), ref(x_all[:2]), 1e-12, 1e-12)
    bn1 = hvd.SyncBatchNorm(4).double()
    v = torch.randn(3, 4, generator=rank_generator(rank, 3), dtype=torch.float64)
    everyone = torch.cat([torch.randn(3, 4, generator=rank_generator(r, 3), dtype=torch.float64)
                          for r in range(size)])
    checks.close("SyncBatchNorm on (N, C)", bn1(v), nn.BatchNorm1d(4).double()(everyone)[3 * rank:3 * rank + 3], 1e-10, 1e-10)
