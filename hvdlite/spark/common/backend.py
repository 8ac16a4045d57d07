"""What runs an Estimator's ranks: horovod.spark.common.backend's SparkBackend, over hvdlite.spark.run (a barrier
stage whose tasks hold the ranks)."""
import hvdlite.spark.job as job


class Backend:
    """run(fn, args, env) -> the ranks' return values, by rank; num_processes() -> how many ranks."""

    def run(self, fn, args=(), kwargs=None, env=None):
        raise NotImplementedError

    def num_processes(self):
        raise NotImplementedError


class SparkBackend(Backend):
    """num_proc ranks in Spark tasks (default: the context's default parallelism); the other arguments are
    hvdlite.spark.run's (docs/spark.md)."""

    def __init__(self, num_proc=None, env=None, stdout=None, stderr=None, verbose=1, nics=None, start_timeout=None,
                 extra_mpi_args=None, prefix_output_with_timestamp=False, **refused):
        if refused:
            raise TypeError(f"SparkBackend does not take {sorted(refused)} (hvdlite.spark.run's arguments only)")
        self._num_proc, self._env = num_proc, env
        self._options = dict(stdout=stdout, stderr=stderr, verbose=verbose, nics=nics, start_timeout=start_timeout,
                             extra_mpi_args=extra_mpi_args,
                             prefix_output_with_timestamp=prefix_output_with_timestamp)

    def run(self, fn, args=(), kwargs=None, env=None):
        merged = {**(self._env or {}), **(env or {})} or None
        return job.run(fn, args=args, kwargs=kwargs, num_proc=self.num_processes(), env=merged,
                       **{k: v for k, v in self._options.items() if v is not None})

    def num_processes(self):
        return self._num_proc or job._spark_context().defaultParallelism
