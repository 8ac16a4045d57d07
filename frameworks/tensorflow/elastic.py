"""``hvd.elastic`` for TensorFlow: TensorFlowKerasState (a Keras model and its optimizer) and TensorFlowState
(a list of variables), with ``run``, ``ObjectState`` and the errors (hvdlite.elastic)."""
from hvdlite import basics
from hvdlite.elastic import HorovodInternalError, HostsUpdatedInterrupt, ObjectState, State, run  # noqa: F401
from hvdlite.elastic.array_block import ArrayBlock

from .functions import broadcast_object, broadcast_variables


def _values(variables):
    return [v.numpy() for v in variables]  # numpy() of a variable is a copy of its value


def _assign(variables, values):
    for variable, value in zip(variables, values):
        variable.assign(value)


class TensorFlowState(ObjectState):
    """``TensorFlowState(variables=None, session=None, **kwargs)``: the values of ``variables`` (eager TF or Keras
    variables) and other values as attributes. ``session`` is accepted for Horovod's signature (TF1 graphs are
    not supported here: use eager variables)."""

    def __init__(self, variables=None, session=None, **kwargs):
        self.variables = list(variables or [])
        self._saved_values = None
        super().__init__(bcast_object=broadcast_object, get_rank=basics.rank, **kwargs)

    def _all_variables(self):
        return self.variables

    def save(self):
        self._saved_values = _values(self._all_variables())
        super().save()

    def restore(self):
        if self._saved_values is not None:
            _assign(self._all_variables(), self._saved_values)
        super().restore()

    def sync(self):
        variables = self._all_variables()
        if variables:
            broadcast_variables(variables, root_rank=0)
        self._saved_values = _values(variables)  # as Horovod: restore() after a sync goes back to the synced values
        super().sync()

    def snapshot(self):
        values = self._saved_values
        return {"variables": None if values is None else ArrayBlock(values), "values": super().snapshot()}

    def load_snapshot(self, snapshot):
        block = snapshot["variables"]
        self._saved_values = None if block is None else block.arrays
        super().load_snapshot(snapshot["values"])
        self.restore()


class TensorFlowKerasState(TensorFlowState):
    """``TensorFlowKerasState(model, optimizer=None, **kwargs)``: the model's weights and the optimizer's
    variables (the model's compiled optimizer by default; built first if it is not yet, so that its state is
    part of every commit from the start)."""

    def __init__(self, model, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        super().__init__(variables=None, **kwargs)

    def _all_variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None:
            if not self.optimizer.built:
                self.optimizer.build(self.model.trainable_variables)
            variables += list(self.optimizer.variables)
        return variables
