"""Helpers built on the tensor collectives: broadcasting a model's parameters and an optimizer's state, and
moving arbitrary picklable Python objects between ranks."""
import io

import torch

from hvdlite import basics
from hvdlite.process_sets import global_process_set

from .async_ops import Min, allgather_async, allreduce_async, broadcast_async_, set_auto_name
from .handles import synchronize

try:  # cloudpickle also handles lambdas and locally defined classes, as Horovod's helpers do
    import cloudpickle as _pickle
except ImportError:  # pragma: no cover - depends on the environment
    import pickle as _pickle


def _to_bytes_tensor(obj):
    buffer = io.BytesIO()
    _pickle.dump(obj, buffer)
    return torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8)


def _from_bytes_tensor(tensor):
    return _pickle.loads(tensor.numpy().tobytes())


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns the object ``obj`` of ``root_rank`` on every rank of the set (pickled, sent as bytes).

    Other ranks may pass anything (usually None) as ``obj``.
    """
    name = name if name is not None else set_auto_name("broadcast_object", process_set)
    is_root = basics.rank() == root_rank  # a global rank, as in Horovod
    payload = _to_bytes_tensor(obj) if is_root else None
    size = torch.tensor([payload.numel() if is_root else 0], dtype=torch.int64)
    synchronize(broadcast_async_(size, root_rank, name=f"{name}.size", process_set=process_set))
    if not is_root:
        payload = torch.empty(int(size[0]), dtype=torch.uint8)
    synchronize(broadcast_async_(payload, root_rank, name=f"{name}.data", process_set=process_set))
    return obj if is_root else _from_bytes_tensor(payload)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's ``obj``, in rank order of the set."""
    name = name if name is not None else set_auto_name("allgather_object", process_set)
    payload = _to_bytes_tensor(obj)
    sizes = synchronize(allgather_async(torch.tensor([payload.numel()], dtype=torch.int64),
                                        name=f"{name}.sizes", process_set=process_set))
    data = synchronize(allgather_async(payload, name=f"{name}.data", process_set=process_set))
    return [_from_bytes_tensor(chunk) for chunk in torch.split(data, sizes.tolist())]


def _named_tensors(params):
    if isinstance(params, dict):
        return sorted(params.items())
    items = list(params)
    return [p if isinstance(p, tuple) else (None, p) for p in items]


def broadcast_parameters(params, root_rank, prefix=None, process_set=global_process_set):
    """Overwrites, in place, every tensor of ``params`` with its value on ``root_rank``.

    ``params`` is a ``model.state_dict()``, ``model.named_parameters()`` or a list of tensors; the broadcasts
    run concurrently and this returns when all are done.
    """
    if not isinstance(params, (dict, list, tuple)) and not hasattr(params, "__iter__"):
        raise ValueError(f"invalid params of type: {type(params)}")
    pending = []
    for key, tensor in _named_tensors(params):
        if tensor is None:
            continue
        if not torch.is_tensor(tensor):
            raise ValueError(f"broadcast_parameters: {key!r} is a {type(tensor).__name__}, not a tensor")
        name = None if key is None else f"broadcast_parameters.{prefix or ''}{key}"
        pending.append(broadcast_async_(tensor, root_rank, name=name, process_set=process_set))
    for handle in pending:
        synchronize(handle)


def _describe_state(state_dict):
    """Root's optimizer state as a picklable layout: hyper-parameters, and for each state entry either the
    tensor's dtype and shape (sent by a tensor broadcast) or the Python value itself."""
    groups = [{"options": {k: v for k, v in g.items() if k != "params"}, "num_params": len(g["params"])}
              for g in state_dict["param_groups"]]
    state = {}
    for pid, entries in state_dict["state"].items():
        state[pid] = {key: (("tensor", value.dtype, tuple(value.shape)) if torch.is_tensor(value)
                            else ("value", value))
                      for key, value in entries.items()}
    return {"param_groups": groups, "state": state}


def _give_zero_gradients(optimizer):
    """As Horovod leaves them after broadcasting a fresh optimizer's state: every parameter that requires a
    gradient and has none gets a zero one (scripts read ``p.grad`` right after), the others keep None. Unlike
    Horovod, no optimizer step is taken, so weight decay does not move the parameters."""
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Makes every rank's optimizer state and hyper-parameters those of ``root_rank``.

    Works whether or not the state exists yet on each rank (an optimizer that has never stepped has no state):
    the root's layout is broadcast first, the other ranks allocate what they lack and receive the root's
    tensors, then load the result. Scalar hyper-parameters (lr, momentum, betas, ...) come from the root too.
    Every rank raises ValueError if the optimizers' parameter groups differ in shape.
    """
    if not process_set.included():
        return
    state_dict = optimizer.state_dict()
    if not state_dict["state"]:
        _give_zero_gradients(optimizer)
    is_root = basics.rank() == root_rank  # a global rank, as in Horovod
    name = set_auto_name("broadcast_optimizer_state", process_set)
    layout = broadcast_object(_describe_state(state_dict) if is_root else None, root_rank,
                              name=f"{name}.layout", process_set=process_set)

    mine = [len(g["params"]) for g in state_dict["param_groups"]]
    theirs = [g["num_params"] for g in layout["param_groups"]]
    agree = torch.tensor([int(mine == theirs)], dtype=torch.int32)
    agree = synchronize(allreduce_async(agree, name=f"{name}.agree", op=Min, process_set=process_set))
    if not int(agree[0]):
        raise ValueError(f"broadcast_optimizer_state: the optimizers' parameter groups differ between ranks "
                         f"(root has {theirs} parameters per group, this rank {mine})")

    received = {}
    pending = []
    for pid, entries in layout["state"].items():
        for key, (kind, *spec) in entries.items():
            if kind != "tensor":
                continue
            if is_root:
                tensor = state_dict["state"][pid][key]
            else:
                tensor = torch.empty(spec[1], dtype=spec[0])
                received[(pid, key)] = tensor
            pending.append(broadcast_async_(tensor, root_rank, name=f"{name}.{pid}.{key}",
                                            process_set=process_set))
    for handle in pending:
        synchronize(handle)
    if is_root:
        return
    new_state = {pid: {key: (received[(pid, key)] if kind == "tensor" else spec[0])
                       for key, (kind, *spec) in entries.items()}
                 for pid, entries in layout["state"].items()}
    new_groups = [dict(g["options"], params=own["params"])
                  for g, own in zip(layout["param_groups"], state_dict["param_groups"])]
    optimizer.load_state_dict({"state": new_state, "param_groups": new_groups})
