"""The Estimators' parameters as Spark ML Params, with Horovod's names, defaults, setters and getters
(``setBatchSize`` / ``getBatchSize``, and so on), and the ones hvdlite cannot honour refused by name."""
import re

from pyspark.ml.param.shared import Param, Params

# name -> (default, what it is). Defaults are Horovod's (JSON values: Spark ML's writer records them).
ESTIMATOR_PARAMS = {
    "num_proc": (None, "number of ranks; default: the Spark context's default parallelism"),
    "model": (None, "the model to train"),
    "backend": (None, "what runs the ranks (SparkBackend); exclusive with num_proc"),
    "store": (None, "where data, checkpoints and logs go (Store)"),
    "optimizer": (None, "the optimizer, wrapped in a DistributedOptimizer on every rank"),
    "loss": (None, "the loss, or one per label column"),
    "loss_weights": (None, "weights of the losses, one per label column"),
    "metrics": (None, "metrics recorded each epoch"),
    "sample_weight_col": (None, "column weighting each row's loss"),
    "gradient_compression": (None, "gradient compression of the DistributedOptimizer (hvd.Compression.fp16)"),
    "feature_cols": (None, "feature columns, in the order the model takes them"),
    "label_cols": (None, "label columns, one per model output"),
    "validation": (None, "a fraction of rows held out, or a column whose true / 1 rows are the validation set"),
    "callbacks": (None, "callbacks"),
    "batch_size": (32, "rows per batch on each rank"),
    "val_batch_size": (None, "rows per validation batch; default: batch_size"),
    "epochs": (1, "epochs to train"),
    "train_steps_per_epoch": (None, "training steps per epoch on every rank; default: the training rows over "
                                    "batch_size x ranks"),
    "validation_steps_per_epoch": (None, "validation steps per epoch; default: all validation rows"),
    "transformation_fn": (None, "a function applied to each batch (a dict of column name -> array) before the "
                                "model sees it"),
    "backward_passes_per_step": (1, "backward passes whose gradients are accumulated before each all-reduce"),
    "shuffle": (True, "shuffle the training rows each epoch (seeded by random_seed)"),
    "partitions_per_process": (10, "Parquet row groups written per rank, the units each rank streams"),
    "verbose": (1, "0 quiet, 1 a line per epoch on rank 0, 2 more"),
    "random_seed": (None, "seed of the model's initial state on every rank and of the shuffle"),
    "run_id": (None, "the run's name in the Store; an existing run resumes from its last checkpoint"),
    "label_shapes": (None, "shape of each label column's values"),
    "use_gpu": (True, "train on the rank's GPU where there is one"),
    "terminate_on_nan": (False, "stop training when the loss is not a number"),
    "inmemory_cache_all": (False, "each rank keeps its share of the training and validation rows in memory after "
                                  "reading them once (its row groups then fixed for the run)"),
    # Horovod's Petastorm reader options: refused unless left at their defaults (there is no Petastorm here).
    "shuffle_buffer_size": (None, "(Horovod's deprecated row buffer; refused: the rows are shuffled by row group "
                                  "and within it)"),
    "train_reader_num_workers": (None, "(Petastorm's reader workers; refused)"),
    "val_reader_num_workers": (None, "(Petastorm's reader workers; refused)"),
    "reader_pool_type": ("thread", "(Petastorm's pool; only 'thread')"),
    "compress_sparse_cols": (False, "(Petastorm's sparse encoding; refused: sparse vectors are written dense)"),
    "mp_start_method": (None, "(Petastorm's multiprocessing; refused)"),
}

# The parameters hvdlite cannot honour, and the value each must keep.
REFUSED = {"shuffle_buffer_size": None, "train_reader_num_workers": None, "val_reader_num_workers": None,
           "reader_pool_type": "thread", "compress_sparse_cols": False,
           "mp_start_method": None}


def camel(name):
    """batch_size -> BatchSize."""
    return re.sub(r"(?:^|_)([a-z])", lambda m: m.group(1).upper(), name)


def add_params(cls, table):
    """Declares each (name, (default, doc)) of table on cls as a Param with a setter and a getter."""
    for name, (_, doc) in table.items():
        setattr(cls, name, Param(Params._dummy(), name, doc))

        def setter(self, value, name=name):
            return self._set(**{name: value})

        def getter(self, name=name):
            return self.getOrDefault(getattr(self, name))

        setattr(cls, "set" + camel(name), setter)
        setattr(cls, "get" + camel(name), getter)
    return cls


def check_refused(params):
    """Raises ValueError naming each Horovod parameter set to what hvdlite cannot do."""
    refused = [f"{name}={params.getOrDefault(getattr(params, name))!r}" for name, keep in REFUSED.items()
               if params.getOrDefault(getattr(params, name)) != keep]
    if refused:
        raise ValueError("hvdlite's Estimators read Parquet with pyarrow, without Petastorm, and cannot honour "
                         + ", ".join(refused) + " (leave them unset; docs/spark.md)")
