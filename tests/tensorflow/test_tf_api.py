"""Worker (one process, no mpiexec): the shape of the hvdlite.tensorflow / hvdlite.keras API (Horovod's names
and arguments), its errors before init and for bad arguments, and size-1 behaviour."""
import inspect

import numpy as np

import pytest
import keras
import tensorflow as tf

import hvdlite.keras
import hvdlite.tensorflow as hvd
import hvdlite.tensorflow.keras as hvdk

# One rank, in file order: names and signatures, errors before init, then a size-1 job.
pytestmark = [pytest.mark.ranks(1), pytest.mark.hvd_env(TF_NUM_INTEROP_THREADS=1, TF_NUM_INTRAOP_THREADS=1, TF_CPP_MIN_LOG_LEVEL=2)]

checks = None  # the running test's Checks: the helpers below record into it


@pytest.fixture(autouse=True)
def record_into(request):
    global checks
    checks = request.getfixturevalue("checks")

TF_NAMES = """init shutdown is_initialized size rank local_size local_rank cross_size cross_rank is_homogeneous
mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built cuda_built rocm_built start_timeline
stop_timeline ProcessSet global_process_set add_process_set remove_process_set HorovodInternalError Average Sum Min
Max Product Adasum allreduce grouped_allreduce allgather grouped_allgather broadcast alltoall reducescatter
grouped_reducescatter join barrier broadcast_variables broadcast_object broadcast_object_fn allgather_object
Compression DistributedGradientTape DistributedOptimizer size_op rank_op local_size_op local_rank_op ccl_built ddl_built
broadcast_ broadcast_global_variables process_set_included_op PartialDistributedGradientTape
PartialDistributedOptimizer SyncBatchNormalization""".split()
KERAS_NAMES = """init shutdown size rank local_rank local_size DistributedOptimizer load_model callbacks allreduce
allgather broadcast reducescatter broadcast_object allgather_object broadcast_variables Compression Average Sum
ProcessSet add_process_set global_process_set HorovodInternalError PartialDistributedOptimizer SyncBatchNormalization
broadcast_global_variables""".split()
CALLBACKS = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback", "LearningRateWarmupCallback",
             "LearningRateScheduleCallback"]


def parameters(fn):
    return set(inspect.signature(fn).parameters)


def test_names():
    for name in TF_NAMES:
        checks.true(f"hvdlite.tensorflow.{name} exists", hasattr(hvd, name))
    for name in KERAS_NAMES:
        checks.true(f"hvdlite.tensorflow.keras.{name} exists", hasattr(hvdk, name))
        checks.true(f"hvdlite.keras.{name} is the same object",
                    getattr(hvdlite.keras, name, None) is getattr(hvdk, name, 0))
    for name in CALLBACKS:
        checks.true(f"callbacks.{name}",
                    getattr(hvdk.callbacks, name, None) is getattr(hvdlite.keras.callbacks, name, 0))
    checks.true("HorovodInternalError is hvdlite's error", hvd.HorovodInternalError is hvd.HvdliteError)
    checks.true("op numbering is Horovod's", (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) ==
                (0, 1, 2, 3, 4, 5))


def test_signatures():
    common = {"name", "process_set"}
    checks.true("allreduce arguments", {"tensor", "average", "device_dense", "device_sparse", "compression", "op",
                                        "prescale_factor", "postscale_factor"} | common <= parameters(hvd.allreduce))
    checks.true("grouped_allreduce arguments", {"tensors", "average", "compression", "op", "prescale_factor",
                                                "postscale_factor", "process_set"} <= parameters(hvd.grouped_allreduce))
    checks.true("allgather arguments", {"tensor"} | common <= parameters(hvd.allgather))
    checks.true("broadcast arguments", {"tensor", "root_rank"} | common <= parameters(hvd.broadcast))
    checks.true("alltoall arguments", {"tensor", "splits"} | common <= parameters(hvd.alltoall))
    checks.true("reducescatter arguments", {"tensor", "op", "compression", "prescale_factor", "postscale_factor"} |
                common <= parameters(hvd.reducescatter))
    checks.true("broadcast_variables arguments", {"variables", "root_rank", "process_set"} <=
                parameters(hvd.broadcast_variables))
    checks.true("DistributedGradientTape arguments", {"gradtape", "device_dense", "device_sparse", "compression",
                                                      "sparse_as_dense", "op", "gradient_predivide_factor",
                                                      "num_groups", "groups", "process_set"} <=
                parameters(hvd.DistributedGradientTape))
    checks.true("DistributedOptimizer arguments", {"optimizer", "name", "compression", "sparse_as_dense",
                                                   "gradient_predivide_factor", "op", "backward_passes_per_step",
                                                   "average_aggregated_gradients", "num_groups", "groups",
                                                   "process_set"} <= parameters(hvdk.DistributedOptimizer))
    checks.true("LearningRateWarmupCallback arguments", {"initial_lr", "warmup_epochs", "momentum_correction",
                                                         "steps_per_epoch", "verbose"} <=
                parameters(hvdk.callbacks.LearningRateWarmupCallback))
    checks.true("load_model arguments", {"filepath", "custom_optimizers", "custom_objects", "compression"} <=
                parameters(hvdk.load_model))


def test_before_init():
    checks.true("not initialized at start", not hvd.is_initialized())
    checks.raises("size() before init", (ValueError,), hvd.size, match=("init",))
    checks.raises("allreduce before init", (hvd.HorovodInternalError, ValueError), lambda: hvd.allreduce(tf.ones(3)))


def test_size_one():
    hvd.init()
    checks.true("initialized", hvd.is_initialized() and hvd.size() == 1 and hvd.rank() == 0)
    x = tf.constant([[1.5, -2.0], [3.0, 4.0]])
    checks.close("allreduce of one rank", hvd.allreduce(x).numpy(), x.numpy())
    checks.close("allgather of one rank", hvd.allgather(x).numpy(), x.numpy())
    checks.close("keras allreduce returns a value", hvdk.allreduce(np.array([2.0, 4.0]), op=hvd.Sum), [2.0, 4.0])
    checks.close("fp16 compression round trip", hvd.allreduce(x, compression=hvd.Compression.fp16).numpy(), x.numpy())
    checks.true("fp16 compression keeps dtype", hvd.allreduce(x, compression=hvd.Compression.fp16).dtype == tf.float32)
    wide = tf.constant([1.5, -2.0], dtype=tf.float64)
    for compressor, wire_dtype in ((hvd.Compression.fp16, tf.float16), (hvd.Compression.bf16, tf.bfloat16)):
        wire, context = compressor.compress(wide)
        checks.true(f"{compressor.__name__} sends {wire_dtype.name}", wire.dtype == wire_dtype)
        restored = compressor.decompress(wire, context)
        checks.true(f"{compressor.__name__} restores float64", restored.dtype == tf.float64)
        checks.close(f"{compressor.__name__} round trip", restored.numpy(), wide.numpy())
        ints = tf.constant([3])
        checks.true(f"{compressor.__name__} leaves ints", compressor.compress(ints)[0] is ints)
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(x * x)
    wrapped = hvd.DistributedGradientTape(tape)
    checks.true("DistributedGradientTape is a GradientTape", isinstance(wrapped, tf.GradientTape))
    checks.close("DistributedGradientTape gradient", wrapped.gradient(loss, x).numpy(), 2 * x.numpy())


def test_bad_arguments():
    checks.raises("DistributedOptimizer refuses non-Keras optimizers", (TypeError,), lambda: hvdk.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1)), match=("Keras",))
    checks.raises("backward_passes_per_step must be positive", (ValueError,), lambda: hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1), backward_passes_per_step=0))
    checks.raises("gradient_predivide_factor needs Average", (ValueError,), lambda: hvdk.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Sum,
                                                    gradient_predivide_factor=2.0), match=("Average",))
    checks.raises("op and average together", (ValueError,), lambda: hvd.allreduce(tf.ones(2), op=hvd.Sum, average=True))
    checks.raises("unknown op", (ValueError,), lambda: hvd.allreduce(tf.ones(2), op=17))
    opt = hvdk.DistributedOptimizer(keras.optimizers.AdamW(0.01, weight_decay=0.1))
    checks.true("wrapped optimizer keeps its class and config", isinstance(opt, keras.optimizers.AdamW) and
                opt.get_config()["weight_decay"] == 0.1 and type(opt).__name__ == "AdamW")
    checks.raises("wrapping twice", (ValueError,), lambda: hvdk.DistributedOptimizer(opt), match=("already",))


def test_shutdown():
    hvd.shutdown()
    checks.true("shutdown", not hvd.is_initialized())
