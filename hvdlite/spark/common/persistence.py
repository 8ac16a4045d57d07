"""Saving and loading Estimators and Models as Spark ML stages (MLWritable / MLReadable, so that they go into a
Pipeline's save and load): the parameters that are JSON values in Spark ML's own metadata file, the others (models,
optimizers, losses, functions) pickled with cloudpickle beside it. A Store and a backend are never saved (as in
Horovod): they belong to the cluster, not to the stage."""
import posixpath

import cloudpickle
import pyarrow.fs
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader, MLWritable, MLWriter

OBJECTS_FILE = "hvdlite_objects.pkl"
NOT_SAVED = ("store", "backend")


def _json_value(value):
    return value is None or isinstance(value, (bool, int, float, str)) or (
        isinstance(value, (list, tuple)) and all(_json_value(v) for v in value)) or (
        isinstance(value, dict) and all(isinstance(k, str) and _json_value(v) for k, v in value.items()))


def _filesystem(path):
    try:
        return pyarrow.fs.FileSystem.from_uri(path)
    except (pyarrow.ArrowInvalid, ValueError):
        return pyarrow.fs.LocalFileSystem(), posixpath.abspath(path)


class StageWriter(MLWriter):
    def __init__(self, instance):
        super().__init__()
        self.instance = instance

    def saveImpl(self, path):
        values = {p.name: self.instance.getOrDefault(p) for p in self.instance.params if self.instance.isSet(p)}
        plain = {k: v for k, v in values.items() if _json_value(v) and k not in NOT_SAVED}
        objects = {k: v for k, v in values.items() if k not in plain and k not in NOT_SAVED}
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession, paramMap=plain)
        filesystem, base = _filesystem(path)
        with filesystem.open_output_stream(posixpath.join(base, OBJECTS_FILE)) as stream:
            stream.write(cloudpickle.dumps(objects))


class StageReader(MLReader):
    def __init__(self, cls):
        super().__init__()
        self.cls = cls

    def load(self, path):
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        filesystem, base = _filesystem(path)
        with filesystem.open_input_stream(posixpath.join(base, OBJECTS_FILE)) as stream:
            objects = cloudpickle.loads(stream.read())
        instance = self.cls()
        instance._resetUid(metadata["uid"])
        instance._set(**metadata["paramMap"], **objects)
        return instance


class Persistent(MLWritable, MLReadable):
    """MLWritable and MLReadable for a stage whose parameters are partly Python objects."""

    def write(self):
        return StageWriter(self)

    def save(self, path):
        self.write().save(path)

    @classmethod
    def read(cls):
        return StageReader(cls)

    @classmethod
    def load(cls, path):
        return cls.read().load(path)
