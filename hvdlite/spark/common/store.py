"""Where an Estimator keeps what a run makes: the training and validation data as Parquet, each run's checkpoints
and logs. horovod.spark.common.store's classes and paths, over pyarrow's file systems (no Petastorm).

    store = Store.create("/shared/hvdlite")           # LocalStore: a path every worker can reach (NFS, a local
    store = Store.create("hdfs://namenode/user/me")   # one on a single machine), HDFSStore, or DBFSLocalStore
"""
import io
import os
import posixpath

import pyarrow.fs


class Store:
    """A prefix path on a file system, with the layout of Horovod's stores:

    <prefix>/intermediate_train_data.<key>   Parquet of a prepared DataFrame (reused while the same data is fitted)
    <prefix>/intermediate_val_data.<key>
    <prefix>/runs/<run_id>/checkpoint/checkpoint.pt, <prefix>/runs/<run_id>/logs
    """

    def __init__(self, prefix_path, filesystem):
        self.prefix_path = prefix_path.rstrip("/") or "/"
        self.fs = filesystem

    @staticmethod
    def create(prefix_path, *args, **kwargs):
        """The store for a path: hdfs:// -> HDFSStore, dbfs:/ or /dbfs/ -> DBFSLocalStore, else LocalStore."""
        if prefix_path.startswith("hdfs://"):
            return HDFSStore(prefix_path, *args, **kwargs)
        if DBFSLocalStore.matches(prefix_path):
            return DBFSLocalStore(prefix_path, *args, **kwargs)
        return LocalStore(prefix_path, *args, **kwargs)

    # Paths, as Horovod's Store names them.
    def get_train_data_path(self, idx=None):
        return self._join(f"intermediate_train_data{'' if idx is None else '.' + str(idx)}")

    def get_val_data_path(self, idx=None):
        return self._join(f"intermediate_val_data{'' if idx is None else '.' + str(idx)}")

    def get_runs_path(self):
        return self._join("runs")

    def get_run_path(self, run_id):
        return posixpath.join(self.get_runs_path(), run_id)

    def get_checkpoint_path(self, run_id):
        return posixpath.join(self.get_run_path(run_id), "checkpoint")

    def get_checkpoint_filename(self):
        return "checkpoint.pt"

    def get_logs_path(self, run_id):
        return posixpath.join(self.get_run_path(run_id), "logs")

    def get_data_url(self, path):
        """The path as Spark's writers and readers name it (a URL)."""
        raise NotImplementedError

    # Files.
    def exists(self, path):
        return self.fs.get_file_info(path).type != pyarrow.fs.FileType.NotFound

    def read(self, path):
        with self.fs.open_input_stream(path) as stream:
            return stream.read()

    def write(self, path, data):
        """Writes bytes whole: to a temporary name, then renamed, so a reader never sees half a checkpoint."""
        self.fs.create_dir(posixpath.dirname(path), recursive=True)
        partial = path + ".partial"
        with self.fs.open_output_stream(partial) as stream:
            stream.write(data if isinstance(data, bytes) else bytes(data))
        self.fs.move(partial, path)

    def write_object(self, path, obj, save):
        """save(obj, file) into the store at path (torch.save, for one)."""
        buffer = io.BytesIO()
        save(obj, buffer)
        self.write(path, buffer.getvalue())

    def parquet_files(self, path):
        """The Parquet files of a data set written by Spark, in name order."""
        selector = pyarrow.fs.FileSelector(path, recursive=True)
        return sorted(info.path for info in self.fs.get_file_info(selector)
                      if info.type == pyarrow.fs.FileType.File and info.path.endswith(".parquet"))

    def _join(self, name):
        return posixpath.join(self.prefix_path, name)

    def __repr__(self):
        return f"{type(self).__name__}({self.prefix_path!r})"


class LocalStore(Store):
    """A path on the file system of the driver and of every worker: one machine, or a shared mount (NFS)."""

    def __init__(self, prefix_path, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"LocalStore takes only a path (got {args or ''} {kwargs or ''})")
        if prefix_path.startswith("file://"):
            prefix_path = prefix_path[len("file://"):]
        super().__init__(os.path.abspath(prefix_path), pyarrow.fs.LocalFileSystem())

    def get_data_url(self, path):
        return "file://" + path


class HDFSStore(Store):
    """hdfs://host[:port]/path, through pyarrow's HadoopFileSystem (libhdfs and a Hadoop client must be there:
    HADOOP_HOME, JAVA_HOME, CLASSPATH, as pyarrow documents)."""

    def __init__(self, prefix_path, host=None, port=None, user=None, **kwargs):
        if kwargs:
            raise TypeError(f"HDFSStore does not take {sorted(kwargs)}")
        try:
            filesystem, path = pyarrow.fs.FileSystem.from_uri(prefix_path)
            if host is not None or port is not None or user is not None:
                filesystem = pyarrow.fs.HadoopFileSystem(host or "default", port or 0, user=user)
        except (OSError, ValueError) as error:
            raise OSError(f"HDFSStore({prefix_path!r}): cannot reach HDFS through pyarrow ({error}); a LocalStore on "
                          "a path every worker shares works without it") from None
        self._url_prefix = prefix_path[:len(prefix_path) - len(path)] if prefix_path.endswith(path) else "hdfs://"
        super().__init__(path, filesystem)

    def get_data_url(self, path):
        return self._url_prefix.rstrip("/") + path


class DBFSLocalStore(LocalStore):
    """Databricks' DBFS through its local mount: dbfs:/path is /dbfs/path on the driver and every worker."""

    @staticmethod
    def matches(prefix_path):
        return prefix_path.startswith("dbfs:/") or prefix_path.startswith("/dbfs/")

    def __init__(self, prefix_path, *args, **kwargs):
        if prefix_path.startswith("dbfs:/"):
            prefix_path = "/dbfs/" + prefix_path[len("dbfs:/"):].lstrip("/")
        super().__init__(prefix_path, *args, **kwargs)
