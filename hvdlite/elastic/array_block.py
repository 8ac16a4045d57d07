"""ArrayBlock: NumPy arrays that pickle as one list of dtypes and shapes and their raw memory.

A commit holds a model's and an optimizer's arrays; pickled one by one, each array costs NumPy's reduction (a
tuple of constructor, dtype, shape, flags), more than copying a small one. Here the whole list costs one
reduction, and with protocol 5 and a buffer callback (commits.encode) each array's memory goes out of band,
written from where it lies.
"""
import pickle

import numpy as np


class ArrayBlock:
    """A list of NumPy arrays (``block.arrays``, not to be replaced); unpickled, the arrays are writable. A block
    pickled again (a state's arrays in its host's memory slot, every commit) reuses its first reduction."""

    __slots__ = ("arrays", "_reduced")

    def __init__(self, arrays):
        self.arrays = [a if a.flags.c_contiguous else a.copy(order="C") for a in arrays]
        self._reduced = None

    def __reduce_ex__(self, protocol):
        if protocol < 5:
            return _rebuild, (*self._layout(), *(a.tobytes() for a in self.arrays))
        if self._reduced is None:
            self._reduced = _rebuild, (*self._layout(), *(pickle.PickleBuffer(_exportable(a)) for a in self.arrays))
        return self._reduced

    def _layout(self):
        # A dtype's string ("<f4") pickles as a short string; the dtype object itself through a reduction of its own.
        # Dtypes that NumPy only knows as raw bytes ("<V2": ml_dtypes' bfloat16) go as objects.
        return ([a.dtype.str if a.dtype.kind != "V" else a.dtype for a in self.arrays],
                [a.shape for a in self.arrays])


def _exportable(array):
    # Dtypes that NumPy cannot export as a buffer (ml_dtypes' bfloat16) go as their bytes.
    return array if array.dtype.kind != "V" else array.reshape(-1).view(np.uint8)


def _rebuild(dtypes, shapes, *buffers):
    block = ArrayBlock.__new__(ArrayBlock)
    block._reduced = None
    block.arrays = [np.frombuffer(buffer if not isinstance(buffer, bytes) else bytearray(buffer), dtype).reshape(shape)
                    for dtype, shape, buffer in zip(dtypes, shapes, buffers)]
    return block
