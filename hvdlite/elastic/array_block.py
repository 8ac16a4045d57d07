"""ArrayBlock: NumPy arrays that pickle as one list of dtypes and shapes and their raw memory.

A commit holds a model's and an optimizer's arrays; pickled one by one, each array costs NumPy's reduction (a
tuple of constructor, dtype, shape, flags), more than copying a small one. Here the whole list costs one
reduction, and with protocol 5 and a buffer callback (commits.encode) each array's memory goes out of band,
written from where it lies.
"""
import pickle

import numpy as np


class ArrayBlock:
    """A list of NumPy arrays (``block.arrays``); unpickled, the arrays are writable."""

    __slots__ = ("arrays",)

    def __init__(self, arrays):
        self.arrays = [a if a.flags.c_contiguous else a.copy(order="C") for a in arrays]

    def __reduce_ex__(self, protocol):
        # A dtype's string ("<f4") pickles as a short string; the dtype object itself through a reduction of its own.
        # Dtypes that NumPy only knows as raw bytes ("<V2": ml_dtypes' bfloat16) go as objects.
        dtypes = [a.dtype.str if a.dtype.kind != "V" else a.dtype for a in self.arrays]
        shapes = [a.shape for a in self.arrays]
        if protocol < 5:
            return _rebuild, (dtypes, shapes, *(a.tobytes() for a in self.arrays))
        return _rebuild, (dtypes, shapes, *(pickle.PickleBuffer(_exportable(a)) for a in self.arrays))


def _exportable(array):
    # Dtypes that NumPy cannot export as a buffer (ml_dtypes' bfloat16) go as their bytes.
    return array if array.dtype.kind != "V" else array.reshape(-1).view(np.uint8)


def _rebuild(dtypes, shapes, *buffers):
    block = ArrayBlock.__new__(ArrayBlock)
    block.arrays = [np.frombuffer(buffer if not isinstance(buffer, bytes) else bytearray(buffer), dtype).reshape(shape)
                    for dtype, shape, buffer in zip(dtypes, shapes, buffers)]
    return block
