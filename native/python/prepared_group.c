/* hvdlite._tensor_calls, PreparedGroup and GroupHandle: requests filled into their C form once (request_fill.c) and
 * submitted together again and again, with new buffers or the same (what a training step does with the same
 * gradients every step, and the NumPy API's grouped all-reduce by name): a submission points each member at its
 * buffers at most and makes one C call. The handles of a submission stay one C array (GroupHandle, a Work): waiting
 * and releasing them are one core call each, with no Python object per member.
 */
#include "requests.h"

#include <structmember.h>

/* ------------------------------------------------------------------------------------------------ GroupHandle */

typedef struct {
  PyObject_HEAD
  hvdlite_handle *ids; /* count of them (PyMem) */
  int32_t count;
  PyObject *names;     /* the members' names (a tuple), for errors */
  PyObject *keepalive; /* what holds the members' memory; NULL once released */
} GroupHandle;

static PyObject *raise_group_released(void) {
  PyErr_SetString(hvdlite_error, "the group's handles were already released");
  return NULL;
}

static PyObject *group_poll(GroupHandle *self, PyObject *unused) {
  if (self->keepalive == NULL) return raise_group_released();
  return PyBool_FromLong(hvdlite_all_done(self->ids, self->count));
}

/* hvdlite_wait_all's result turned into Python's: 0, or -1 with the first failed member's HvdliteError raised. */
static int raise_for(GroupHandle *self, int code) {
  if (code > 0) raise_handle_error(self->ids[code - 1], PyTuple_GET_ITEM(self->names, code - 1));
  if (code < 0) PyErr_SetString(hvdlite_error, "wait: a handle of the group is unknown to the core");
  return code == 0 ? 0 : -1;
}

static int group_wait_done(GroupHandle *self) {
  if (self->keepalive == NULL) {
    raise_group_released();
    return -1;
  }
  return raise_for(self, wait_for(self->ids, self->count));
}

static PyObject *group_wait(GroupHandle *self, PyObject *unused) {
  if (group_wait_done(self) != 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *group_result(GroupHandle *self, PyObject *unused) {
  Py_RETURN_NONE; /* a group of requests whose outputs are the callers' buffers */
}

/* The first failed member's HvdliteError (not raised), or None: all done well, or not all done yet. */
static PyObject *group_exception(GroupHandle *self, PyObject *unused) {
  if (self->keepalive == NULL) return raise_group_released();
  const int code = hvdlite_wait_all_done(self->ids, self->count);
  if (code == -2 || raise_for(self, code) == 0) Py_RETURN_NONE;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  return value;
}

static void group_release_ids(GroupHandle *self) {
  if (self->keepalive == NULL) return;
  hvdlite_release_all(self->ids, self->count);
  Py_CLEAR(self->keepalive);
}

static PyObject *group_release(GroupHandle *self, PyObject *unused) {
  group_release_ids(self);
  Py_RETURN_NONE;
}

/* wait, then release whatever happened (raises as wait does). */
static PyObject *group_finish(GroupHandle *self, PyObject *unused) {
  const int waited = group_wait_done(self);
  group_release_ids(self);
  if (waited != 0) return NULL;
  Py_RETURN_NONE;
}

static void group_dealloc(GroupHandle *self) {
  if (self->keepalive != NULL && !hvdlite_all_done(self->ids, self->count)) {
    for (int32_t i = 0; i < self->count; ++i) orphan(self->ids[i], self->keepalive); /* the core still writes */
    Py_CLEAR(self->keepalive);
  }
  group_release_ids(self);
  PyMem_Free(self->ids);
  Py_XDECREF(self->names);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef group_handle_methods[] = {
    {"poll", (PyCFunction)group_poll, METH_NOARGS, "True once every member is done, well or not."},
    {"wait", (PyCFunction)group_wait, METH_NOARGS,
     "Waits for every member (one core call, without the GIL); then raises HvdliteError for the first that failed."},
    {"result", (PyCFunction)group_result, METH_NOARGS, "None: the outputs are the callers' buffers."},
    {"exception", (PyCFunction)group_exception, METH_NOARGS,
     "The first failed member's HvdliteError (not raised), or None: all done well, or not all done yet."},
    {"release", (PyCFunction)group_release, METH_NOARGS, "Releases every member (again: nothing)."},
    {"finish", (PyCFunction)group_finish, METH_NOARGS, "wait, then release whatever happened."},
    {NULL, NULL, 0, NULL}};

PyTypeObject GroupHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hvdlite._tensor_calls.GroupHandle",
    .tp_doc = "The handles of a group submitted in one call (PreparedGroup.submit): a Work (hvdlite/work.py).",
    .tp_basicsize = sizeof(GroupHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)group_dealloc,
    .tp_methods = group_handle_methods,
};

/* ------------------------------------------------------------------------------------------------ PreparedGroup */

/* PreparedGroup(requests): fills every Request and registers each with the core (hvdlite_prepare, as
 * PreparedRequest does). */
static int group_init(PreparedGroup *self, PyObject *args, PyObject *kwargs) {
  PyObject *sequence;
  static char *keywords[] = {"requests", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:PreparedGroup", keywords, &sequence)) return -1;
  if (self->requests != NULL) {
    PyErr_SetString(PyExc_TypeError, "PreparedGroup: already filled");
    return -1;
  }
  PyObject *fast = PySequence_Fast(sequence, "PreparedGroup needs a sequence of Requests");
  if (fast == NULL) return -1;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
  const size_t slots = (size_t)(count > 0 ? count : 1);
  self->requests = PyMem_Calloc(slots, sizeof *self->requests);
  self->parts = PyMem_Calloc(slots, sizeof *self->parts);
  self->names = PyTuple_New(count);
  self->owned = PyTuple_New(count);
  if (self->requests == NULL || self->parts == NULL) PyErr_NoMemory();
  for (Py_ssize_t i = 0; !PyErr_Occurred() && i < count; ++i) {
    PyObject *request = PySequence_Fast_GET_ITEM(fast, i);
    PyObject *keepalive = keepalive_of(request);
    if (keepalive == NULL || fill_request(request, &self->requests[i], &self->parts[i]) != 0) {
      Py_XDECREF(keepalive);
      break;
    }
    self->count = i + 1; /* members filled so far: what dealloc releases */
    PyTuple_SET_ITEM(self->owned, i, keepalive);
    PyTuple_SET_ITEM(self->names, i, Py_NewRef(self->parts[i].name));
  }
  Py_DECREF(fast);
  if (PyErr_Occurred()) return -1;
  for (Py_ssize_t i = 0; i < count; ++i) {
    const hvdlite_prepared token = hvdlite_prepare(&self->requests[i], NULL, 0);
    if (token > 0) self->requests[i].prepared = token; /* else it goes by value; a refusal is raised on submit */
  }
  return 0;
}

/* Points member i at its input and output buffers (with_buffers, in place); 0, or -1 with an error naming the tensor
 * and the buffer. */
static int point(PreparedGroup *self, Py_ssize_t i, PyObject *input, PyObject *output) {
  return with_buffers(&self->requests[i], input, output, self->parts[i].name, &self->requests[i]);
}

/* Points every member at inputs[i] and outputs[i] (sequences of one buffer each); 0, or -1 with an error set (the
 * members then partly pointed: the caller submits nothing). */
static int point_all(PreparedGroup *self, PyObject *inputs, PyObject *outputs) {
  PyObject *in = PySequence_Fast(inputs, "PreparedGroup.submit: inputs must be a sequence");
  PyObject *out = in ? PySequence_Fast(outputs, "PreparedGroup.submit: outputs must be a sequence") : NULL;
  int result = -1;
  if (out == NULL) goto done;
  if (PySequence_Fast_GET_SIZE(in) != self->count || PySequence_Fast_GET_SIZE(out) != self->count) {
    PyErr_Format(PyExc_ValueError, "PreparedGroup.submit: %zd requests need one input and one output each (got %zd "
                 "and %zd)", self->count, PySequence_Fast_GET_SIZE(in), PySequence_Fast_GET_SIZE(out));
    goto done;
  }
  for (Py_ssize_t i = 0; i < self->count; ++i) {
    if (point(self, i, PySequence_Fast_GET_ITEM(in, i), PySequence_Fast_GET_ITEM(out, i)) != 0) goto done;
  }
  result = 0;
done:
  Py_XDECREF(in);
  Py_XDECREF(out);
  return result;
}

/* submit(inputs=None, outputs=None, keepalive=None) -> GroupHandle: submits every member, first pointed at inputs and
 * outputs if given (one buffer per member, same dtypes and shapes as prepared), the memory held by keepalive (by
 * default, the Requests' keepalives). */
static PyObject *group_submit(PreparedGroup *self, PyObject *args, PyObject *kwargs) {
  PyObject *inputs = Py_None, *outputs = Py_None, *keepalive = Py_None;
  static char *keywords[] = {"inputs", "outputs", "keepalive", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOO:submit", keywords, &inputs, &outputs, &keepalive)) return NULL;
  if (self->requests == NULL) return PyErr_Format(PyExc_ValueError, "submit: this PreparedGroup was never filled");
  if (inputs != Py_None && point_all(self, inputs, outputs) != 0) return NULL;
  GroupHandle *handle = PyObject_New(GroupHandle, &GroupHandleType);
  if (handle == NULL) return NULL;
  handle->count = (int32_t)self->count;
  handle->names = Py_NewRef(self->names);
  handle->keepalive = NULL;
  handle->ids = PyMem_Calloc((size_t)(self->count > 0 ? self->count : 1), sizeof *handle->ids);
  if (handle->ids == NULL) {
    Py_DECREF(handle);
    return PyErr_NoMemory();
  }
  char error[ERROR_BYTES];
  error[0] = '\0';
  const int code = self->count > 0
                       ? hvdlite_enqueue_group(self->requests, (int32_t)self->count, handle->ids, error, ERROR_BYTES)
                       : 0;
  if (code != 0) {
    Py_DECREF(handle);
    return raise_refusal(code, error);
  }
  handle->keepalive = Py_NewRef(keepalive != Py_None ? keepalive : self->owned);
  return (PyObject *)handle;
}

static int group_traverse(PreparedGroup *self, visitproc visit, void *arg) {
  Py_VISIT(self->owned);
  Py_VISIT(self->kept);
  return 0;
}

static int group_clear(PreparedGroup *self) {
  Py_CLEAR(self->owned);
  Py_CLEAR(self->kept);
  return 0;
}

static void group_dealloc_prepared(PreparedGroup *self) {
  PyObject_GC_UnTrack(self);
  for (Py_ssize_t i = 0; self->requests != NULL && i < self->count; ++i) {
    if (self->requests[i].prepared > 0) hvdlite_unprepare(self->requests[i].prepared);
  }
  for (Py_ssize_t i = 0; self->parts != NULL && i < self->count; ++i) release_parts(&self->parts[i]);
  PyMem_Free(self->requests);
  PyMem_Free(self->parts);
  Py_XDECREF(self->names);
  group_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef prepared_group_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))group_submit, METH_VARARGS | METH_KEYWORDS,
     "submit(inputs=None, outputs=None, keepalive=None) -> GroupHandle: submits every member; inputs and outputs, if "
     "given, hold one buffer per member (integer addresses or contiguous arrays, same dtypes and shapes as "
     "prepared) and keepalive what holds them."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef prepared_group_members[] = {
    {"names", T_OBJECT, offsetof(PreparedGroup, names), READONLY, "The members' names, in order."},
    {NULL, 0, 0, 0, NULL}};

PyTypeObject PreparedGroupType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hvdlite._tensor_calls.PreparedGroup",
    .tp_doc = "PreparedGroup(requests): requests filled into their C form once, then submitted together again and "
              "again\n(with new buffers or the same): what a training step does with the same gradients every step.",
    .tp_basicsize = sizeof(PreparedGroup),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)group_init,
    .tp_traverse = (traverseproc)group_traverse,
    .tp_clear = (inquiry)group_clear,
    .tp_dealloc = (destructor)group_dealloc_prepared,
    .tp_methods = prepared_group_methods,
    .tp_members = prepared_group_members,
};
