"""Checks that multi-rank tests of the core's all-reduce algorithms share (through the NumPy API)."""
import numpy as np

import hvdlite as hvd
from hvdlite.requests import Collective, PreparedGroup, Request
from harness.reference import check_close, rank_input, reduce_reference

OPS = {"sum": hvd.Sum, "average": hvd.Average, "min": hvd.Min, "max": hvd.Max, "product": hvd.Product}


def same_bytes_everywhere(arrays, what):
    """Every rank holds the same bytes in arrays (one array or a list): results must be bitwise identical."""
    arrays = arrays if isinstance(arrays, (list, tuple)) else [arrays]
    data = b"".join(np.ascontiguousarray(a).view(np.uint8).tobytes() for a in arrays)
    everyone = hvd.allgather_object(data)
    assert all(b == everyone[0] for b in everyone), f"{what}: ranks hold different bytes"


def reduce_group_and_check(label, dtype, op_name, sizes, what, in_place_every=2):
    """All-reduces len(sizes) tensors submitted as one group (one fused batch), every in_place_every-th in place
    (none with None), and checks each against the float64 reference on every rank, inputs untouched, bytes equal
    everywhere. Returns the outputs."""
    rank, size = hvd.rank(), hvd.size()
    inputs = [rank_input(dtype, (n,), rank, op_name, (label, i)) for i, n in enumerate(sizes)]
    outputs = [x if in_place_every and i % in_place_every == 0 else np.full_like(x, 99) for i, x in enumerate(inputs)]
    originals = [x.copy() for x in inputs]
    # Prepared without buffers, given them at submission (as hvd.grouped_allreduce_async does).
    group = PreparedGroup([Request(Collective.ALLREDUCE, f"{label}.{i}", dtype, x.shape, 0, 0, op=OPS[op_name])
                           for i, x in enumerate(inputs)])
    handle = group.submit(inputs, outputs, (inputs, outputs))
    handle.wait()
    assert handle.poll(), f"{label}: a waited group must poll done"
    handle.release()
    for i, (n, out) in enumerate(zip(sizes, outputs)):
        expected = reduce_reference([rank_input(dtype, (n,), r, op_name, (label, i)) for r in range(size)], op_name)
        check_close(f"{label}.{i}", out, expected, dtype, what)
        if out is not inputs[i]:
            assert np.array_equal(inputs[i], originals[i]), f"{label}.{i}: the input was written"
    same_bytes_everywhere(outputs, label)
    return outputs
