"""``hvdlite.ray``: horovod.ray's ``RayExecutor`` on hvdlite: the ranks live in Ray actors placed by a placement
group, and stay up between calls. See docs/ray.md."""
from hvdlite.runner.function_runner import RankFailed  # noqa: F401
from hvdlite.runner.slot_job import SlotLost  # noqa: F401

from .executor import RayExecutor  # noqa: F401
