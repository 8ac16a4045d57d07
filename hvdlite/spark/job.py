"""A Spark job whose barrier stage holds the ranks: each task runs a slot agent (hvdlite/runner/slots.py) that
MPI's launcher reaches in ssh's place, so every rank is a child of its task, and registers it with this driver.
Once every task has, the ranks run as an hvdliterun job on the tasks (slot_job.run_on_slots); then the tasks are
released and the stage ends. A task that dies ends the job at once (its registration connection drops); a job
that fails, or a stage Spark gives up on, has its job group cancelled, which kills the tasks and what they run.
``run_elastic`` then starts a new stage (runner/slot_elastic.py).
"""
import os
import socket
import sys
import threading
import uuid

try:
    import pyspark
except ImportError:
    raise ImportError("hvdlite.spark needs PySpark: pip install 'hvdlite[spark]' (or pip install pyspark)") from None

from hvdlite.runner.slot_elastic import SlotSource, run_elastic_on_slots
from hvdlite.runner.slot_job import run_on_slots
from hvdlite.runner.slots import SlotRegistry

START_TIMEOUT_VARIABLE = "HOROVOD_SPARK_START_TIMEOUT"  # as Horovod reads it
DEFAULT_START_TIMEOUT = 600  # seconds for Spark to start every task (Horovod's default)
ELASTIC_TIMEOUT_VARIABLE = "HOROVOD_ELASTIC_TIMEOUT"
DEFAULT_ELASTIC_TIMEOUT = 600  # seconds to wait for min_num_proc free cores before a restart (Horovod's default)
JOIN_SECONDS = 60  # for the stage to end once its tasks are released or cancelled


def _spark_context():
    context = pyspark.SparkContext._active_spark_context
    if context is None:
        raise RuntimeError("hvdlite.spark.run: no active SparkContext; start a SparkSession (or SparkContext) first")
    return context


def _slot_task(address, secret):
    """The function each barrier task runs (pickled by Spark): serve as slot ``partitionId`` until released."""
    def task(_):
        from pyspark import BarrierTaskContext

        from hvdlite.runner.slots import SlotAgent, register_and_wait
        index = BarrierTaskContext.get().partitionId()
        register_and_wait(address, secret, index, SlotAgent(secret))
        return iter([index])
    return task


class _Stage:
    """The barrier stage, collected in a thread of its own under a job group (Spark's job groups are per thread)."""

    def __init__(self, context, num_proc, registry, driver_host):
        self.context, self.group = context, f"hvdlite-spark-{uuid.uuid4().hex[:12]}"
        task = _slot_task((driver_host, registry.port), registry.secret)
        self._thread = threading.Thread(target=self._collect, args=(num_proc, task, registry), daemon=True,
                                        name="hvdlite-spark-stage")
        self._thread.start()

    def _collect(self, num_proc, task, registry):
        self.context.setJobGroup(self.group, f"hvdlite: {num_proc} ranks", interruptOnCancel=True)
        try:
            self.context.parallelize(range(num_proc), num_proc).barrier().mapPartitions(task).collect()
        except Exception as error:  # noqa: BLE001 (Spark's errors come through py4j in many types)
            registry.fail(RuntimeError(f"the Spark stage holding the ranks failed: {error}"))

    def end(self, cancel):
        if cancel:
            self.context.cancelJobGroup(self.group)
        self._thread.join(JOIN_SECONDS)


class _SparkSlots(SlotSource):
    """Slots as tasks of a barrier stage of the active SparkContext, one stage per acquire."""

    def __init__(self, context):
        self.context = context
        self.caller_host = context.getConf().get("spark.driver.host") or socket.gethostname()
        self._stages = {}  # id(registry) -> its _Stage

    def available(self):
        return self.context.defaultParallelism

    def acquire(self, count, timeout):
        registry = SlotRegistry(count)
        stage = _Stage(self.context, count, registry, self.caller_host)
        self._stages[id(registry)] = stage
        return self.registered(registry, timeout)

    def release(self, registry, failed):
        registry.release()
        self._stages.pop(id(registry)).end(cancel=failed)


def _start_timeout(given):
    return given if given is not None else int(os.environ.get(START_TIMEOUT_VARIABLE, DEFAULT_START_TIMEOUT))


def run(fn, args=(), kwargs=None, num_proc=None, start_timeout=None, extra_mpi_args=None, env=None, stdout=None,
        stderr=None, verbose=1, nics=None, prefix_output_with_timestamp=False, executable=None):
    """Runs ``fn(*args, **kwargs)`` on ``num_proc`` ranks (Spark's default parallelism if None), each in a task of
    one barrier stage of the active SparkContext, and returns their return values in rank order.

    horovod.spark.run's arguments: ``start_timeout`` (seconds for every task to start; HOROVOD_SPARK_START_TIMEOUT,
    else 600), ``extra_mpi_args`` (added to mpiexec's), ``env`` (variables for the ranks, added to this process's),
    ``stdout``/``stderr`` (objects with ``write(str)`` for the ranks' output), ``verbose`` (2 or more: the launcher
    says what it runs), ``nics`` (the network interfaces to use), ``prefix_output_with_timestamp`` (each line of the
    ranks' output starts with the time it reached the driver). ``executable`` is taken and changes nothing (the
    ranks run this driver's Python). Raises RankFailed with every
    failing rank's traceback, SlotLost when a task died while its rank ran, RuntimeError when the stage failed.
    """
    source = _SparkSlots(_spark_context())
    start_timeout = _start_timeout(start_timeout)
    registry = source.acquire(num_proc or source.available(), start_timeout)
    finished = False
    try:
        result = run_on_slots(fn, args, kwargs, registry, source.caller_host, env=env,
                              **_job_options(start_timeout, extra_mpi_args, verbose, stdout, stderr, nics,
                                            prefix_output_with_timestamp))
        finished = True
        return result
    finally:
        source.release(registry, failed=not finished)


def run_elastic(fn, args=(), kwargs=None, num_proc=None, min_num_proc=None, max_num_proc=None, start_timeout=None,
                elastic_timeout=None, reset_limit=None, env=None, stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None):
    """horovod.spark.run_elastic: ``run`` that starts again after a task is lost (or a rank's process dies), on as
    many tasks as Spark has cores for then, between ``min_num_proc`` and ``max_num_proc`` (both default to
    ``num_proc``, itself Spark's default parallelism), waiting up to ``elastic_timeout`` seconds
    (HOROVOD_ELASTIC_TIMEOUT, else 600) for the minimum, at most ``reset_limit`` times (None: no limit). ``fn``
    trains with ``hvd.elastic.run`` and commits its state: each start resumes from the last commit. Returns the
    last start's values in rank order; raises RankFailed at once when ``fn`` raises (it would raise again), and the
    last failure when the limit is reached or the minimum does not come (TimeoutError)."""
    source = _SparkSlots(_spark_context())
    num_proc = num_proc or source.available()
    min_num_proc = min_num_proc if min_num_proc is not None else (min_np if min_np is not None else num_proc)
    max_num_proc = max_num_proc if max_num_proc is not None else (max_np if max_np is not None else num_proc)
    if elastic_timeout is None:
        elastic_timeout = float(os.environ.get(ELASTIC_TIMEOUT_VARIABLE, DEFAULT_ELASTIC_TIMEOUT))
    start_timeout = _start_timeout(start_timeout)
    return run_elastic_on_slots(fn, args, kwargs, source, num_proc, min_num_proc, max_num_proc, elastic_timeout,
                                reset_limit, _log, env=env,
                                **_job_options(start_timeout, extra_mpi_args=None, verbose=verbose, stdout=stdout,
                                               stderr=stderr, nics=nics, timestamps=prefix_output_with_timestamp))


def _job_options(start_timeout, extra_mpi_args, verbose, stdout, stderr, nics, timestamps):
    return dict(start_timeout=start_timeout, mpi_args=extra_mpi_args, verbose=verbose >= 2, stdout=stdout,
                stderr=stderr, network_interfaces=list(nics) if nics else None, timestamps=timestamps)


def _log(message):
    print(f"hvdlite.spark: {message}", file=sys.stderr, flush=True)


class HorovodRunner:
    """Databricks' ``HorovodRunner(np)``: ``np`` > 0 ranks in Spark tasks (``run`` above); ``np`` < 0: -np ranks
    on the driver alone (hvdlite.run), for trying a job out."""

    def __init__(self, np, driver_log_verbosity="all"):
        if not isinstance(np, int) or np == 0:
            raise ValueError(f"HorovodRunner: np must be a non-zero integer, not {np!r}")
        self.num_processor = np
        self.driver_log_verbosity = driver_log_verbosity

    def run(self, main, **kwargs):
        """Runs ``main(**kwargs)`` on every rank; returns rank 0's return value."""
        if self.num_processor < 0:
            from hvdlite.runner.function_runner import run as run_here
            return run_here(main, kwargs=kwargs, num_proc=-self.num_processor)[0]
        return run(main, kwargs=kwargs, num_proc=self.num_processor)[0]
