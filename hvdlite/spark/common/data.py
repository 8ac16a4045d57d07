"""A DataFrame's training columns to Parquet in the Store, before any rank starts: columns checked by name and type,
Spark ML vectors (dense or sparse) written as arrays, rows split into training and validation, and written in
enough row groups that every rank streams several (hvdlite/spark/common/reader.py). What was written for the same
data and settings is found again by its key and reused."""
import hashlib
import json
import math
import posixpath

import pyarrow.parquet as pq
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import VectorUDT
from pyspark.sql import functions as F
from pyspark.sql import types as T

SCALAR_TYPES = (T.BooleanType, T.ByteType, T.ShortType, T.IntegerType, T.LongType, T.FloatType, T.DoubleType)
METADATA_FILE = "hvdlite_metadata.json"


class Prepared:
    """Where a fit's data is, and what each column holds: metadata[name] = {"kind": "scalar" | "array" | "vector",
    "shape": [...] of one row's value}."""

    def __init__(self, train_path, val_path, metadata, train_rows, val_rows):
        self.train_path, self.val_path = train_path, val_path
        self.metadata, self.train_rows, self.val_rows = metadata, train_rows, val_rows


def column_kind(df, name):
    """scalar, array or vector; ValueError naming a column that is not there or holds something else."""
    if name not in df.columns:
        raise ValueError(f"column {name!r} is not in the DataFrame (its columns: {', '.join(df.columns)})")
    data_type = df.schema[name].dataType
    if isinstance(data_type, VectorUDT):
        return "vector"
    if isinstance(data_type, T.ArrayType) and isinstance(data_type.elementType, SCALAR_TYPES):
        return "array"
    if isinstance(data_type, SCALAR_TYPES):
        return "scalar"
    raise ValueError(f"column {name!r} holds {data_type.simpleString()}: an Estimator takes numbers, arrays of "
                     "numbers and Spark ML vectors")


def check_columns(df, feature_cols, label_cols, sample_weight_col=None, validation=None):
    """Every named column exists and holds numbers; returns {name: kind}."""
    if not feature_cols:
        raise ValueError("feature_cols is not set: name the columns the model takes")
    if not label_cols:
        raise ValueError("label_cols is not set: name the columns the model predicts")
    columns = [*feature_cols, *label_cols, *([sample_weight_col] if sample_weight_col else [])]
    if isinstance(validation, str):
        columns.append(validation)
    elif validation is not None and not (isinstance(validation, float) and 0 <= validation < 1):
        raise ValueError(f"validation={validation!r}: a fraction in [0, 1) or a column name")
    return {name: column_kind(df, name) for name in dict.fromkeys(columns)}


def _shapes(df, kinds, given):
    """Each column's value shape: given ({name: shape}, from input_shapes / label_shapes, with or without the batch
    leading as -1) or its length in the data, which must be the same in every row."""
    shapes = {name: [] for name, kind in kinds.items() if kind == "scalar"}
    sized = [name for name, kind in kinds.items() if kind != "scalar"]
    if sized:
        row = df.agg(*[F.min(F.size(name)).alias(f"min{i}") for i, name in enumerate(sized)],
                     *[F.max(F.size(name)).alias(f"max{i}") for i, name in enumerate(sized)]).first()
        for i, name in enumerate(sized):
            low, high = row[f"min{i}"], row[f"max{i}"]
            if low != high:
                raise ValueError(f"column {name!r} holds values of {low} to {high} elements: every row's must have "
                                 "the same size")
            shapes[name] = [int(low or 0)]
    for name, shape in (given or {}).items():
        shape = list(shape)
        if shape and shape[0] in (-1, None):  # Horovod's input_shapes lead with the batch
            shape = shape[1:]
        if name in shapes:
            count, wanted = math.prod(shapes[name]), math.prod(shape)
            if shapes[name] and wanted != count and -1 not in shape:
                raise ValueError(f"column {name!r} holds {count} values a row, which cannot take the shape {list(shape)}")
            shapes[name] = list(shape)
    return shapes


def _key(df, columns, validation, seed, parts):
    text = json.dumps([df.semanticHash(), columns, validation, seed, parts])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _rows(store, path):
    return sum(pq.ParquetFile(f, filesystem=store.fs).metadata.num_rows for f in store.parquet_files(path))


def prepare(df, store, feature_cols, label_cols, sample_weight_col=None, validation=None, seed=None, parts=10,
            shapes=None, verbose=0):
    """Writes (or finds) the fit's Parquet in the store; returns a Prepared."""
    kinds = check_columns(df, feature_cols, label_cols, sample_weight_col, validation)
    columns = list(dict.fromkeys([*feature_cols, *label_cols, *([sample_weight_col] if sample_weight_col else [])]))
    key = _key(df, columns, validation, seed, parts)
    train_path, val_path = store.get_train_data_path(key), store.get_val_data_path(key)
    metadata_path = posixpath.join(train_path, METADATA_FILE)
    if store.exists(metadata_path):
        saved = json.loads(store.read(metadata_path))
        if verbose:
            print(f"hvdlite: reusing the prepared data in {train_path}")
        return Prepared(train_path, val_path if saved["val_rows"] else None, saved["metadata"], saved["train_rows"],
                        saved["val_rows"])
    selected = df.select(*[vector_to_array(F.col(name), "float32").alias(name) if kinds[name] == "vector"
                           else F.col(name) for name in columns],
                         *([F.col(validation)] if isinstance(validation, str) else []))
    measured = _shapes(selected, {name: kinds[name] for name in columns}, shapes)
    if isinstance(validation, str):
        is_val = F.col(validation).cast("double") > 0
        train, val = selected.where(~is_val).drop(validation), selected.where(is_val).drop(validation)
    elif validation:
        train, val = selected.randomSplit([1 - validation, validation], seed=seed)
    else:
        train, val = selected, None
    for data, path in ((train, train_path), (val, val_path)):
        if data is not None:
            data.repartition(parts).write.mode("overwrite").parquet(store.get_data_url(path))
    train_rows = _rows(store, train_path)
    val_rows = _rows(store, val_path) if val is not None else 0
    if train_rows == 0:
        raise ValueError("no rows to train on" + (" after the validation split" if validation else ""))
    metadata = {name: {"kind": kinds[name], "shape": measured[name]} for name in columns}
    store.write(metadata_path, json.dumps({"metadata": metadata, "train_rows": train_rows, "val_rows": val_rows,
                                           "columns": columns}).encode())
    return Prepared(train_path, val_path if val_rows else None, metadata, train_rows, val_rows)
