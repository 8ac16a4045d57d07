/* hvdlite._tensor_calls, NamedAllreduce: what the NumPy API keeps per all-reduce name (ops._PREPARED_REQUESTS), in one
 * object: a copy of the name's prepared C request (its dims inline), its last output arrays for recycling, and
 * the PreparedRequest that holds the core's token and the memory the request points to.
 *
 * Why one object: hvd.allreduce_async reads all of it for every tensor of every step, after the all-reduce of
 * the step before has swept the caches. Kept as a list of [address int, PreparedRequest, outputs...] it took
 * seven scattered cache lines (the list, its items, the int, the cffi request over two lines, its shape, the
 * PreparedRequest); perf put a third of the NumPy path's extra time over the pointer-level path on those loads.
 * Here they are four lines side by side.
 */
#include "array_collectives.h"

#include "requests.h"

#include <structmember.h>
#include <string.h>

static PyObject *named_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *prepared;
  if (!PyArg_ParseTuple(args, "O!:NamedAllreduce", &PreparedRequestType, &prepared)) return NULL;
  const hvdlite_request *request = prepared_request_of(prepared, "NamedAllreduce");
  if (request == NULL) return NULL;
  NamedAllreduce *self = (NamedAllreduce *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->request = *request;
  if (request->ndim > 0 && request->ndim <= INLINE_DIMS) {
    memcpy(self->dims, request->shape, (size_t)request->ndim * sizeof(int64_t));
    self->request.shape = self->dims;
  }
  for (int i = 0; i < KEPT_OUTPUTS; ++i) self->outputs[i] = Py_NewRef(Py_None);
  self->prepared = Py_NewRef(prepared);
  return (PyObject *)self;
}

static int named_traverse(NamedAllreduce *self, visitproc visit, void *arg) {
  for (int i = 0; i < KEPT_OUTPUTS; ++i) Py_VISIT(self->outputs[i]);
  Py_VISIT(self->prepared);
  return 0;
}

static int named_clear(NamedAllreduce *self) {
  for (int i = 0; i < KEPT_OUTPUTS; ++i) Py_CLEAR(self->outputs[i]);
  Py_CLEAR(self->prepared);
  self->request.ndim = 0; /* matches nothing any more: the memory request points to may be gone */
  return 0;
}

static void named_dealloc(NamedAllreduce *self) {
  PyObject_GC_UnTrack(self);
  named_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *named_outputs(NamedAllreduce *self, void *closure) {
  PyObject *outputs = PyTuple_New(KEPT_OUTPUTS);
  for (int i = 0; outputs != NULL && i < KEPT_OUTPUTS; ++i) {
    PyTuple_SET_ITEM(outputs, i, Py_NewRef(self->outputs[i] ? self->outputs[i] : Py_None));
  }
  return outputs;
}

static PyGetSetDef named_getset[] = {
    {"outputs", (getter)named_outputs, NULL, "The outputs kept for recycling, most recent first (None: empty).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef named_members[] = {
    {"prepared", T_OBJECT, offsetof(NamedAllreduce, prepared), READONLY, "The PreparedRequest this copies."},
    {NULL, 0, 0, 0, NULL}};

PyTypeObject NamedAllreduceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hvdlite._tensor_calls.NamedAllreduce",
    .tp_doc = "NamedAllreduce(prepared): one name's prepared all-reduce and its recycled outputs, for the NumPy API.",
    .tp_basicsize = sizeof(NamedAllreduce),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = named_new,
    .tp_traverse = (traverseproc)named_traverse,
    .tp_clear = (inquiry)named_clear,
    .tp_dealloc = (destructor)named_dealloc,
    .tp_getset = named_getset,
    .tp_members = named_members,
};
