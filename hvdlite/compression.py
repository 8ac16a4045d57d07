"""Gradient compression for the wire, framework-free: Horovod's compressor interface
(``compress(tensor) -> (tensor, ctx)``, ``decompress(tensor, ctx) -> tensor``) and the compressor that casts
floating tensors down to a 16-bit type and back, which each framework adapter completes with its own dtypes
and cast. Integer tensors pass through unchanged."""


class Compressor:
    """Interface for compressing and decompressing a tensor."""

    @staticmethod
    def compress(tensor):
        """Returns the tensor to send and a context that ``decompress`` needs."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Restores a tensor compressed by ``compress`` with context ``ctx``."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class CastCompressor(Compressor):
    """Casts floating-point tensors to ``wire_dtype`` for the collective and back to their own type.
    A framework's subclass says what is floating (``is_floating(dtype)``) and how to cast
    (``cast(tensor, dtype)``); its subclasses name the ``wire_dtype``."""

    wire_dtype = None

    @staticmethod
    def is_floating(dtype):
        raise NotImplementedError

    @staticmethod
    def cast(tensor, dtype):
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor):
        dtype = tensor.dtype
        if cls.is_floating(dtype) and dtype != cls.wire_dtype:
            return cls.cast(tensor, cls.wire_dtype), dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.cast(tensor, ctx)
