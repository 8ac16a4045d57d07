"""Gradient compression for TensorFlow tensors: ``Compression.fp16`` and ``.bf16`` cast floating tensors to a
16-bit type for the wire and back afterwards (the interface is hvdlite.compression's)."""
import tensorflow as tf

from hvdlite.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401 (Horovod's names)


class _TensorFlowCast(CastCompressor):
    @staticmethod
    def is_floating(dtype):
        return dtype.is_floating

    @staticmethod
    def cast(tensor, dtype):
        return tf.cast(tensor, dtype)


class FP16Compressor(_TensorFlowCast):
    """Floating tensors travel as float16."""

    wire_dtype = tf.float16


class BF16Compressor(_TensorFlowCast):
    """Floating tensors travel as bfloat16 (float32's range, fewer mantissa bits)."""

    wire_dtype = tf.bfloat16


class Compression:
    """The compressors by name, as Horovod spells them: ``Compression.none``, ``Compression.fp16``."""

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
