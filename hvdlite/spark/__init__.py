"""``hvdlite.spark``: horovod.spark's ``run`` and ``run_elastic`` and Databricks' ``HorovodRunner`` on hvdlite.

``run(fn, ...)`` runs ``fn`` on ``num_proc`` ranks that live inside one barrier-mode Spark stage, a task per rank
(Spark places them; its UI shows them), and returns their values in rank order; ``run_elastic`` starts such a stage
again after a task is lost, the ranks resuming from their last ``hvd.elastic`` commit. See docs/spark.md.
"""
from hvdlite.runner.function_runner import RankFailed  # noqa: F401
from hvdlite.runner.slot_job import SlotLost  # noqa: F401

from .job import HorovodRunner, run, run_elastic  # noqa: F401
