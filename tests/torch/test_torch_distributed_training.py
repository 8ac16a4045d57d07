"""What users run on torch.distributed, on the "hvdlite" backend: DDP (its options, no_sync, comm hooks),
ZeroRedundancyOptimizer and FSDP2, each trained for some steps and compared with the same run on gloo in the
same processes (a gloo group beside the hvdlite world) and with a float64 single-process reference.

Tolerances: on 2 ranks a sum of two numbers does not depend on the order, so DDP's gradients, hence its
parameters, are bitwise equal to gloo's; on 3 ranks the two backends may add in another order (last bits of
float32), compressed hooks round once more, and Adam magnifies such differences: the stated tolerances
cover exactly that.
"""
import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import hvdlite.torch  # noqa: F401  (registers the backend)

pytestmark = [pytest.mark.ranks(2, 3),
              pytest.mark.hvd_env(HVDLITE_STALL_CHECK_TIME_SECONDS=15, HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=60)]

STEPS = 6
gloo = None


@pytest.fixture(scope="module", autouse=True)
def process_groups():
    global gloo
    torch.set_num_threads(1)
    dist.init_process_group("hvdlite")
    gloo = dist.new_group(backend="gloo")
    yield
    dist.destroy_process_group()


class Net(nn.Module):
    """An MLP; with_side, a branch that some steps leave unused (find_unused_parameters)."""

    def __init__(self, with_side=False):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
        self.head = nn.Linear(32, 4)
        self.side = nn.Linear(32, 4) if with_side else None

    def forward(self, x, use_side=False):
        h = self.body(x)
        return self.head(h) + (self.side(h) if use_side else 0)


def batch(rank, step, n=8):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(n, 16, generator=g), torch.randint(0, 4, (n,), generator=g)


def flat_parameters(model):
    return torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])


def train_ddp(group, steps=STEPS, hook=None, hook_state=None, accumulate=1, use_side=lambda step: False,
              optimizer="sgd", **ddp_options):
    model = DDP(Net(with_side=ddp_options.get("find_unused_parameters", False)), process_group=group, **ddp_options)
    if hook is not None:
        model.register_comm_hook(hook_state if hook_state is not None else group, hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if optimizer == "sgd" else \
        torch.optim.Adam(model.parameters(), lr=0.01)
    rank = dist.get_rank()
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            x, y = batch(rank, step * accumulate + micro)
            context = model.no_sync() if micro < accumulate - 1 else _nothing()
            with context:
                loss = nn.functional.cross_entropy(model(x, use_side=use_side(step)), y)
                loss.backward()
        opt.step()
    return flat_parameters(model.module)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def reference(steps=STEPS, accumulate=1, use_side=lambda step: False):
    """The same training in float64 on one process: the mean loss over every rank's batch."""
    size = dist.get_world_size()
    model = Net(with_side=use_side(1)).double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        opt.zero_grad()
        for micro in range(accumulate):
            for r in range(size):
                x, y = batch(r, step * accumulate + micro)
                loss = nn.functional.cross_entropy(model(x.double(), use_side=use_side(step)), y)
                (loss / size).backward()  # DDP averages over ranks; micro-steps add up
        opt.step()
    return flat_parameters(model)


def order_tolerance(checks, label, got, want, extra=0.0):
    """Bitwise on 2 ranks; on 3, the last bits of float32 sums in another order (plus what extra allows)."""
    if dist.get_world_size() == 2 and extra == 0.0:
        checks.true(label + " (bitwise)", torch.equal(got, want), f"max diff {(got - want).abs().max():.3g}")
    else:
        checks.close(label, got, want, rtol=1e-5 + extra, atol=1e-6 + extra)


@pytest.mark.parametrize("options", [
    {}, {"gradient_as_bucket_view": True}, {"static_graph": True}, {"bucket_cap_mb": 0.001},
], ids=["default", "bucket_view", "static_graph", "small_buckets"])
def test_ddp_equals_gloo(checks, options):
    got = train_ddp(None, **options)
    want = train_ddp(gloo, **options)
    order_tolerance(checks, f"DDP {options} on hvdlite vs gloo", got, want)
    checks.close("DDP vs the float64 single-process run", got, reference(), rtol=1e-4, atol=1e-5)


def test_ddp_find_unused_parameters_and_no_sync(checks):
    side = lambda step: step % 2 == 1  # noqa: E731
    got = train_ddp(None, find_unused_parameters=True, use_side=side)
    want = train_ddp(gloo, find_unused_parameters=True, use_side=side)
    order_tolerance(checks, "find_unused_parameters", got, want)
    checks.close("find_unused_parameters vs float64", got, reference(use_side=side), rtol=1e-4, atol=1e-5)
    got = train_ddp(None, accumulate=3)
    want = train_ddp(gloo, accumulate=3)
    order_tolerance(checks, "no_sync accumulation", got, want)
    checks.close("no_sync vs float64", got, reference(accumulate=3), rtol=1e-4, atol=1e-5)


def test_ddp_comm_hooks(checks):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    for name, hook, extra in (("allreduce", default_hooks.allreduce_hook, 0.0),
                              ("fp16_compress", default_hooks.fp16_compress_hook, 1e-3)):
        # (bf16_compress_hook refuses CPU tensors: torch allows it on NCCL and XCCL only)
        got = train_ddp(None, hook=hook)
        want = train_ddp(gloo, hook=hook)
        # compressed values are rounded once per step on both backends alike: equal unless summed in another order
        order_tolerance(checks, f"{name} hook", got, want, extra=0.0 if dist.get_world_size() == 2 else extra)
        checks.close(f"{name} hook vs float64", got, reference(), rtol=1e-4 + 10 * extra, atol=1e-5 + 10 * extra)

    def powersgd(group):
        return powerSGD_hook.PowerSGDState(process_group=group, matrix_approximation_rank=2,
                                           start_powerSGD_iter=2, random_seed=7)
    got = train_ddp(None, hook=powerSGD_hook.powerSGD_hook, hook_state=powersgd(None))
    want = train_ddp(gloo, hook=powerSGD_hook.powerSGD_hook, hook_state=powersgd(gloo))
    order_tolerance(checks, "PowerSGD hook", got, want, extra=0.0 if dist.get_world_size() == 2 else 1e-4)


def test_zero_redundancy_optimizer(checks):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    def run(group):
        model = DDP(Net(), process_group=group)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                      process_group=group)
        for step in range(STEPS):
            opt.zero_grad()
            x, y = batch(dist.get_rank(), step)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        # the full optimizer state, gathered on rank 0 and compared there
        opt.consolidate_state_dict(to=0)
        state = opt.state_dict() if dist.get_rank() == 0 else None
        return flat_parameters(model.module), state

    got, got_state = run(None)
    want, want_state = run(gloo)
    # Adam divides by the root of tiny second moments: on 3 ranks it magnifies the last-bit differences
    order_tolerance(checks, "ZeroRedundancyOptimizer parameters", got, want,
                    extra=0.0 if dist.get_world_size() == 2 else 5e-5)
    if dist.get_rank() == 0:
        for index, entry in want_state["state"].items():
            for key in ("exp_avg", "exp_avg_sq"):
                checks.close(f"consolidated Adam {key} of parameter {index}", got_state["state"][index][key],
                             entry[key], rtol=1e-5, atol=1e-7)


def test_fsdp2_fully_shard(checks):
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard

    def run(mesh):
        model = Net()
        for layer in model.body:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for step in range(STEPS):
            opt.zero_grad()
            x, y = batch(dist.get_rank(), step)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return torch.cat([p.full_tensor().reshape(-1).double() for p in model.parameters()])

    got = run(init_device_mesh("cpu", (dist.get_world_size(),)))
    checks.close("FSDP2 on hvdlite vs float64", got, reference(), rtol=1e-4, atol=1e-5)
    want = run(DeviceMesh.from_group(gloo, "cpu"))
    order_tolerance(checks, "FSDP2 on hvdlite vs gloo", got, want)
