"""Gradient compression for the wire: cast floating tensors down before a collective and back after."""
import tensorflow as tf


class Compressor:
    """Interface: ``compress(tensor) -> (tensor, context)``, ``decompress(tensor, context) -> tensor``."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Leaves tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        dtype = tensor.dtype
        if dtype.is_floating and dtype != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    """Floating tensors travel as float16."""
    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Floating tensors travel as bfloat16 (float32's range, fewer mantissa bits)."""
    wire_dtype = tf.bfloat16


class Compression:
    """The compressors by name, as Horovod spells them: ``Compression.none``, ``Compression.fp16``."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
