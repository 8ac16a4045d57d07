"""Gradient compression: cast floating tensors to a 16-bit type for the wire, back afterwards.

Horovod's interface: ``compress(tensor) -> (tensor, ctx)`` and ``decompress(tensor, ctx) -> tensor``.
Integer tensors pass through unchanged.
"""
import torch


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


class _CastCompressor(Compressor):
    """Casts floating-point tensors to ``wire_dtype`` for the collective and back to their own type."""

    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls.wire_dtype:
            return tensor.to(cls.wire_dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Sends floating-point tensors as float16 (reduced through float32 by the core)."""

    wire_dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Sends floating-point tensors as bfloat16: float32's range with half its bytes."""

    wire_dtype = torch.bfloat16


class Compression:
    """The available compression algorithms: ``Compression.none``, ``.fp16`` and ``.bf16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
