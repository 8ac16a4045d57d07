"""``hvdlite.spark``: horovod.spark's ``run`` and Databricks' ``HorovodRunner`` on hvdlite.

``run(fn, ...)`` runs ``fn`` on ``num_proc`` ranks that live inside one barrier-mode Spark stage, a task per rank
(Spark places them; its UI shows them), and returns their values in rank order. See docs/spark.md.
"""
from hvdlite.runner.function_runner import RankFailed  # noqa: F401
from hvdlite.runner.slot_job import SlotLost  # noqa: F401

from .job import HorovodRunner, run  # noqa: F401
