"""Gradient compression for torch tensors: ``Compression.fp16`` and ``.bf16`` cast floating-point tensors to
a 16-bit type for the wire and back afterwards (the interface is hvdlite.compression's)."""
import torch

from hvdlite.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401 (Horovod's names)


class _TorchCast(CastCompressor):
    @staticmethod
    def is_floating(dtype):
        return dtype.is_floating_point

    @staticmethod
    def cast(tensor, dtype):
        return tensor.to(dtype)


class FP16Compressor(_TorchCast):
    """Sends floating-point tensors as float16 (reduced through float32 by the core)."""

    wire_dtype = torch.float16


class BF16Compressor(_TorchCast):
    """Sends floating-point tensors as bfloat16: float32's range with half its bytes."""

    wire_dtype = torch.bfloat16


class Compression:
    """The available compression algorithms: ``Compression.none``, ``.fp16`` and ``.bf16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
