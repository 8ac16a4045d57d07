/* hvdlite._tensor_calls, core handles: the Handle type, and the calls that enqueue, run, wait for and release a
 * request in the core, each a single C call (the bottom layer of the extension: see module.c).
 */
#include "core_handles.h"

#include <structmember.h>

PyTypeObject CoreHandleType;
PyObject *hvdlite_error;
static PyObject *invalid_request_error; /* hvdlite.errors.InvalidRequestError: a ValueError and a RuntimeError */
/* (id, keepalive, result) of handles dropped before their collective finished: the core still writes into their
 * memory, so it lives until the collective is done (swept on later submissions). */
static PyObject *orphans;

static PyObject *error_from_buffer(PyObject *type, const char *buffer) {
  PyObject *message = PyUnicode_DecodeUTF8(buffer, (Py_ssize_t)strlen(buffer), "replace");
  if (message != NULL) {
    PyErr_SetObject(type, message);
    Py_DECREF(message);
  }
  return NULL;
}

PyObject *raise_handle_error(hvdlite_handle id, PyObject *name) {
  char buffer[ERROR_BYTES];
  if (hvdlite_handle_error(id, buffer, ERROR_BYTES) > 0) return error_from_buffer(hvdlite_error, buffer);
  PyErr_Format(hvdlite_error, "request '%S' failed", name);
  return NULL;
}

static PyObject *raise_released(CoreHandle *self) {
  PyErr_Format(hvdlite_error, "the handle of '%S' was already released", self->name);
  return NULL;
}

static void sweep_orphans(void) {
  Py_ssize_t kept = 0, count = PyList_GET_SIZE(orphans);
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject *orphan = PyList_GET_ITEM(orphans, i);
    hvdlite_handle id = (hvdlite_handle)PyLong_AsLongLong(PyTuple_GET_ITEM(orphan, 0));
    if (hvdlite_poll(id) != 0) {
      hvdlite_release(id);
      continue;
    }
    Py_INCREF(orphan);
    PyList_SetItem(orphans, kept++, orphan); /* moves the survivor forward; drops the slot's old reference */
  }
  PyList_SetSlice(orphans, kept, count, NULL);
}

void orphan(hvdlite_handle id, PyObject *keepalive) {
  PyObject *entry = Py_BuildValue("(LO)", (long long)id, keepalive);
  if (entry == NULL || PyList_Append(orphans, entry) != 0) PyErr_WriteUnraisable(keepalive);
  Py_XDECREF(entry);
}

/* Makes handle stand for the core's request id, keeping keepalive until release. */
static void adopt(CoreHandle *handle, hvdlite_handle id, PyObject *keepalive, PyObject *name) {
  handle->id = id;
  Py_INCREF(keepalive);
  handle->keepalive = keepalive;
  Py_INCREF(name);
  handle->name = name;
}

/* ------------------------------------------------------------------------------------------------ Handle */

static PyObject *handle_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  long long id;
  PyObject *keepalive, *name;
  static char *keywords[] = {"handle_id", "keepalive", "name", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "LOO", keywords, &id, &keepalive, &name)) return NULL;
  CoreHandle *self = (CoreHandle *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  adopt(self, id, keepalive, name);
  return (PyObject *)self;
}

static void handle_dealloc(CoreHandle *self) {
  if (self->id != RELEASED) {
    if (hvdlite_poll(self->id) != 0) {
      hvdlite_release(self->id);
    } else {
      orphan(self->id, self->keepalive); /* still running: the core keeps it; its memory must outlive it */
    }
  }
  Py_XDECREF(self->keepalive);
  Py_XDECREF(self->name);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *handle_poll(CoreHandle *self, PyObject *unused) {
  if (self->id == RELEASED) return raise_released(self);
  return PyBool_FromLong(hvdlite_poll(self->id) == 1);
}

/* hvdlite_wait_all, letting go of the GIL only when something is still pending (a finished wait returns at
 * once, and handing the GIL over costs more than it). */
int wait_for(const hvdlite_handle *ids, int32_t count) {
  int code = hvdlite_wait_all_done(ids, count);
  if (code != -2) return code;
  Py_BEGIN_ALLOW_THREADS
  code = hvdlite_wait_all(ids, count);
  Py_END_ALLOW_THREADS
  return code;
}

/* Waits for a core handle id: 0 once it succeeded, or -1 with its HvdliteError raised (name says which request). */
static int wait_id(hvdlite_handle id, PyObject *name) {
  if (wait_for(&id, 1) == 0) return 0;
  raise_handle_error(id, name);
  return -1;
}

int wait_one(CoreHandle *self) {
  if (self->id == RELEASED) {
    raise_released(self);
    return -1;
  }
  return wait_id(self->id, self->name);
}

static PyObject *handle_wait(CoreHandle *self, PyObject *unused) {
  if (wait_one(self) != 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *handle_raise_error(CoreHandle *self, PyObject *unused) {
  if (self->id == RELEASED) return raise_released(self);
  return raise_handle_error(self->id, self->name);
}

/* After the core has released the handle's id: marks it released and drops the memory it kept alive. */
static void forget_released(CoreHandle *self) {
  self->id = RELEASED;
  Py_CLEAR(self->keepalive);
}

void release_one(CoreHandle *self) {
  if (self->id == RELEASED) return;
  hvdlite_release(self->id);
  forget_released(self);
}

static PyObject *handle_release(CoreHandle *self, PyObject *unused) {
  release_one(self);
  Py_RETURN_NONE;
}

/* Waits for a core handle id (without the GIL while it is pending), then releases it whatever happened: 0, or
 * -1 with its HvdliteError raised (name says which request). */
static int finish_id(hvdlite_handle id, PyObject *name) {
  if (hvdlite_release_if_succeeded(id) == 0) return 0;  /* finished well: released under one lock */
  const int waited = wait_id(id, name);
  hvdlite_release(id);
  return waited;
}

int finish_one(CoreHandle *self) {
  if (self->id == RELEASED) {
    raise_released(self);
    return -1;
  }
  const int finished = finish_id(self->id, self->name);
  forget_released(self);
  return finished;
}

static PyObject *handle_finish(CoreHandle *self, PyObject *unused) {
  if (finish_one(self) != 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *handle_get_id(CoreHandle *self, void *closure) {
  if (self->id == RELEASED) Py_RETURN_NONE;
  return PyLong_FromLongLong(self->id);
}

/* The error the request failed with, as an HvdliteError object (not raised), or None: done well, or not done. */
static PyObject *handle_exception(CoreHandle *self, PyObject *unused) {
  if (self->id == RELEASED) return raise_released(self);
  if (hvdlite_poll(self->id) != 1 || hvdlite_wait(self->id) != 1) Py_RETURN_NONE;  /* done: wait does not block */
  raise_handle_error(self->id, self->name);
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  return value;
}

/* The rarer reads of a finished handle (core-allocated outputs, a process set's id). */
static PyObject *handle_result(CoreHandle *self, PyObject *unused) {
  if (self->id == RELEASED) return raise_released(self);
  return PyLong_FromLongLong((long long)hvdlite_handle_result(self->id));
}

/* ints[0..n) as a tuple (shape) or a list (splits). */
static PyObject *int64_sequence(const int64_t *ints, int n, int as_tuple) {
  PyObject *sequence = as_tuple ? PyTuple_New(n) : PyList_New(n);
  for (int i = 0; sequence != NULL && i < n; ++i) {
    PyObject *item = PyLong_FromLongLong((long long)ints[i]);
    if (item == NULL) Py_CLEAR(sequence);
    else if (as_tuple) PyTuple_SET_ITEM(sequence, i, item);
    else PyList_SET_ITEM(sequence, i, item);
  }
  return sequence;
}

static PyObject *handle_output_shape(CoreHandle *self, PyObject *unused) {
  if (self->id == RELEASED) return raise_released(self);
  const int ndim = hvdlite_handle_output_ndim(self->id);
  if (ndim <= 0) return PyTuple_New(0);
  int64_t *shape = PyMem_Malloc(sizeof(int64_t) * (size_t)ndim);
  if (shape == NULL) return PyErr_NoMemory();
  hvdlite_handle_output_shape(self->id, shape, ndim);
  PyObject *result = int64_sequence(shape, ndim, 1);
  PyMem_Free(shape);
  return result;
}

static PyObject *handle_received_splits(CoreHandle *self, PyObject *unused) {
  if (self->id == RELEASED) return raise_released(self);
  const int n = hvdlite_handle_received_splits(self->id, NULL, 0);
  if (n <= 0) return PyList_New(0);
  int32_t *splits = PyMem_Malloc(sizeof(int32_t) * (size_t)n);
  int64_t *wide = PyMem_Malloc(sizeof(int64_t) * (size_t)n);
  PyObject *result = NULL;
  if (splits == NULL || wide == NULL) {
    PyErr_NoMemory();
  } else {
    hvdlite_handle_received_splits(self->id, splits, n);
    for (int i = 0; i < n; ++i) wide[i] = splits[i];
    result = int64_sequence(wide, n, 0);
  }
  PyMem_Free(splits);
  PyMem_Free(wide);
  return result;
}

/* The buffer protocol: a Handle exports the output the core allocated for it (allgather, alltoall), writable
 * bytes valid until release. A view keeps the handle alive, not its memory: release only after the last read. */
static int handle_get_buffer(CoreHandle *self, Py_buffer *view, int flags) {
  static char empty;
  if (self->id == RELEASED) {
    PyErr_Format(PyExc_BufferError, "the handle of '%S' was already released", self->name);
    view->obj = NULL;
    return -1;
  }
  int64_t nbytes = 0;
  void *data = (void *)hvdlite_handle_output_data(self->id, &nbytes);
  return PyBuffer_FillInfo(view, (PyObject *)self, nbytes > 0 ? data : &empty, (Py_ssize_t)nbytes, 0, flags);
}

static PyBufferProcs handle_buffer = {.bf_getbuffer = (getbufferproc)handle_get_buffer};

static PyObject *handle_output_buffer(CoreHandle *self, PyObject *unused) {
  if (self->id == RELEASED) return raise_released(self);
  return PyMemoryView_FromObject((PyObject *)self);
}

static PyMethodDef handle_methods[] = {
    {"poll", (PyCFunction)handle_poll, METH_NOARGS, "True when the request has finished (well or not)."},
    {"wait", (PyCFunction)handle_wait, METH_NOARGS,
     "Blocks (without the GIL) until done; raises HvdliteError with the core's message on failure."},
    {"raise_error", (PyCFunction)handle_raise_error, METH_NOARGS, "Raises the request's HvdliteError."},
    {"exception", (PyCFunction)handle_exception, METH_NOARGS,
     "The HvdliteError the request failed with (not raised), or None: done well, or not done yet."},
    {"release", (PyCFunction)handle_release, METH_NOARGS,
     "Gives the handle back to the core and drops the memory it kept alive (again: nothing)."},
    {"finish", (PyCFunction)handle_finish, METH_NOARGS,
     "wait(), then release() whatever happened: raises HvdliteError if the request failed (its buffers are\n"
     "free to reuse either way). Cheaper than the two calls for a request that has already finished."},
    {"result", (PyCFunction)handle_result, METH_NOARGS,
     "The collective's integer result (a new process set's id), once finished."},
    {"output_shape", (PyCFunction)handle_output_shape, METH_NOARGS,
     "The shape of a core-allocated output (allgather, alltoall), once finished."},
    {"output_buffer", (PyCFunction)handle_output_buffer, METH_NOARGS,
     "The core-allocated output bytes as a memoryview of core memory: valid until release (the view keeps "
     "the handle)."},
    {"received_splits", (PyCFunction)handle_received_splits, METH_NOARGS,
     "Alltoall: the rows received from each rank, once finished."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef handle_getset[] = {
    {"_id", (getter)handle_get_id, NULL, "The core's handle id; None once released.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMemberDef handle_members[] = {
    {"name", T_OBJECT, offsetof(CoreHandle, name), READONLY, "The request's name."},
    {NULL, 0, 0, 0, NULL}};

/* Not a GC type, and final: a Python subclass would be tracked by the garbage collector, whose bookkeeping and
 * collections (every 700 new handles) cost more than the rest of a submission. A
 * handle refers to its keepalive, name and result only (arrays and strings), never to itself. */
PyTypeObject CoreHandleType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hvdlite.requests.Handle",
    .tp_doc = "One submitted request. Wait (or poll), read the output, then release.\n\n"
              "A handle dropped unreleased gives itself back to the core once its collective is done, keeping "
              "its memory alive until then.",
    .tp_basicsize = sizeof(CoreHandle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = handle_new,
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_methods = handle_methods,
    .tp_getset = handle_getset,
    .tp_members = handle_members,
    .tp_as_buffer = &handle_buffer,
};

/* ---------------------------------------------------------------------------------------- module calls */

/* An integer address, None (NULL), or a contiguous object with the buffer protocol (a NumPy array, which the
 * keepalive holds, so its address stays valid after the view is released). */
static void *address_of(PyObject *value, int writable) {
  if (PyLong_Check(value)) return PyLong_AsVoidPtr(value);
  if (value == Py_None) return NULL;
  Py_buffer view;
  if (PyObject_GetBuffer(value, &view, PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) != 0) return NULL;
  void *address = view.buf;
  PyBuffer_Release(&view);
  return address;
}

/* Says which tensor and which of its buffers the pending error (from address_of) is about; returns -1. */
static int name_buffer_error(const char *which, PyObject *name) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  PyErr_Format(type, "the %s buffer of tensor '%S' cannot be used: %S", which, name, value);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  return -1;
}

void *buffer_address(PyObject *value, int writable, const char *which, PyObject *name) {
  void *address = address_of(value, writable);
  if (PyErr_Occurred()) name_buffer_error(which, name);
  return address;
}

/* A handle not yet standing for a request; made before the request is enqueued, so that no request is ever left
 * in the core without one. */
static CoreHandle *new_handle(void) {
  if (PyList_GET_SIZE(orphans) > 0) sweep_orphans();
  CoreHandle *handle = PyObject_New(CoreHandle, &CoreHandleType); /* fields unset: fill them */
  if (handle == NULL) return NULL;
  handle->id = RELEASED;
  handle->keepalive = NULL;
  handle->name = NULL;
  return handle;
}

PyObject *raise_refusal(int code, const char *error) {
  return error_from_buffer(code == -3 ? hvdlite_error : invalid_request_error, error);
}

PyObject *handle_for(hvdlite_handle id, PyObject *keepalive, PyObject *name) {
  CoreHandle *handle = new_handle();
  if (handle != NULL) adopt(handle, id, keepalive, name);
  return (PyObject *)handle;
}

/* Enqueues a filled request: its core handle id (> 0), or -1 with the core's refusal raised as enqueue raises it. */
static hvdlite_handle enqueue_id(const hvdlite_request *request) {
  if (PyList_GET_SIZE(orphans) > 0) sweep_orphans();
  char error[ERROR_BYTES];
  error[0] = '\0';
  const hvdlite_handle id = hvdlite_enqueue(request, error, ERROR_BYTES);
  if (id >= 0) return id;
  raise_refusal((int)id, error);
  return -1;
}

/* Enqueues a filled request; its Handle, or the core's refusal as InvalidRequestError (-1, -2) or HvdliteError (-3). */
PyObject *enqueue(const hvdlite_request *request, PyObject *keepalive, PyObject *name) {
  CoreHandle *handle = new_handle();
  if (handle == NULL) return NULL;
  const hvdlite_handle id = enqueue_id(request);
  if (id < 0) {
    Py_DECREF(handle);
    return NULL;
  }
  adopt(handle, id, keepalive, name);
  return (PyObject *)handle;
}

/* hvdlite_enqueue_and_wait without the GIL: 0 done or 1 failed (*id is the finished request's handle, to release), or -1
 * refused (raised as ValueError or HvdliteError, no handle). */
static int run_without_gil(const hvdlite_request *request, hvdlite_handle *id) {
  char error[ERROR_BYTES];
  error[0] = '\0';
  *id = RELEASED;
  int code;
  Py_BEGIN_ALLOW_THREADS
  code = hvdlite_enqueue_and_wait(request, id, error, ERROR_BYTES);
  Py_END_ALLOW_THREADS
  if (code < 0) {
    raise_refusal(code, error);
    return -1;
  }
  return code;
}

int run_and_release(const hvdlite_request *request, PyObject *name) {
  hvdlite_handle id;
  const int code = run_without_gil(request, &id);
  if (code < 0) return -1;
  if (code != 0) raise_handle_error(id, name);
  hvdlite_release(id);
  return code;
}

int check_arguments(const char *function, Py_ssize_t nargs, Py_ssize_t expected) {
  if (nargs == expected) return 0;
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", function, expected, nargs);
  return -1;
}

/* The prepared request pointed at the buffers input and output, as a copy: the prepared struct itself is never
 * written, so two threads submitting it at once cannot swap each other's buffers (the core refuses the second as
 * a duplicate name). 0, or -1 with a Python error set naming the tensor and the buffer. */
int with_buffers(const hvdlite_request *prepared, PyObject *input, PyObject *output, PyObject *name,
                 hvdlite_request *request) {
  void *input_address = buffer_address(input, 0, "input", name);
  if (PyErr_Occurred()) return -1;
  void *output_address = buffer_address(output, 1, "output", name);
  if (PyErr_Occurred()) return -1;
  *request = *prepared;
  request->input = input_address;
  request->output = output_address;
  return 0;
}

PyObject *submit_and_wait_filled(const hvdlite_request *request, PyObject *keepalive, PyObject *name) {
  CoreHandle *handle = new_handle();
  if (handle == NULL) return NULL;
  hvdlite_handle id;
  const int code = run_without_gil(request, &id);
  if (code < 0) {
    Py_DECREF(handle);
    return NULL;
  }
  adopt(handle, id, keepalive, name);
  if (code != 0) {
    raise_handle_error(id, handle->name);
    release_one(handle);
    Py_DECREF(handle);
    return NULL;
  }
  return (PyObject *)handle;
}

/* The core ids of a sequence of handles, each checked to be a handle (and live unless allow_released), in a
 * buffer the caller frees with PyMem_Free; *fast is the sequence's fast form (a new reference, NULL on error).
 * NULL with an error set when the sequence does not qualify. */
static hvdlite_handle *ids_of(PyObject *handles, int allow_released, PyObject **fast, Py_ssize_t *count) {
  *fast = PySequence_Fast(handles, "expected a sequence of hvdlite handles");
  if (*fast == NULL) return NULL;
  *count = PySequence_Fast_GET_SIZE(*fast);
  hvdlite_handle *ids = PyMem_Malloc(sizeof(hvdlite_handle) * (size_t)(*count > 0 ? *count : 1));
  if (ids == NULL) {
    PyErr_NoMemory();
  } else {
    PyObject **items = PySequence_Fast_ITEMS(*fast);
    for (Py_ssize_t i = 0; i < *count; ++i) {
      if (!PyObject_TypeCheck(items[i], &CoreHandleType)) {
        PyErr_Format(PyExc_TypeError, "expected hvdlite handles, got %R", items[i]);
        break;
      }
      CoreHandle *handle = (CoreHandle *)items[i];
      if (handle->id == RELEASED && !allow_released) {
        raise_released(handle);
        break;
      }
      ids[i] = handle->id;
    }
  }
  if (PyErr_Occurred()) {
    PyMem_Free(ids);
    Py_CLEAR(*fast);
    return NULL;
  }
  return ids;
}

/* wait_all(handles): waits for every handle in one call (one wake-up), then raises HvdliteError for the
 * first that failed, if any. */
static PyObject *calls_wait_all(PyObject *module, PyObject *handles) {
  PyObject *fast;
  Py_ssize_t count;
  hvdlite_handle *ids = ids_of(handles, 0, &fast, &count);
  if (ids == NULL) return NULL;
  const int code = wait_for(ids, (int32_t)count);
  PyObject *result = NULL;
  if (code == 0) {
    Py_INCREF(Py_None);
    result = Py_None;
  } else if (code > 0) {
    raise_handle_error(ids[code - 1], ((CoreHandle *)PySequence_Fast_GET_ITEM(fast, code - 1))->name);
  } else {
    PyErr_SetString(hvdlite_error, "wait_all: a handle is unknown to the core");
  }
  PyMem_Free(ids);
  Py_DECREF(fast);
  return result;
}

/* release_all(handles): releases every handle not released yet. */
static PyObject *calls_release_all(PyObject *module, PyObject *handles) {
  PyObject *fast;
  Py_ssize_t count;
  hvdlite_handle *ids = ids_of(handles, 1, &fast, &count);
  if (ids == NULL) return NULL;
  Py_ssize_t live = 0;
  for (Py_ssize_t i = 0; i < count; ++i) {
    if (ids[i] != RELEASED) ids[live++] = ids[i];
  }
  hvdlite_release_all(ids, (int32_t)live);
  for (Py_ssize_t i = 0; i < count; ++i) {
    forget_released((CoreHandle *)PySequence_Fast_GET_ITEM(fast, i));
  }
  PyMem_Free(ids);
  Py_DECREF(fast);
  Py_RETURN_NONE;
}

/* raise_handle_error(handle_id, name): raises the failed request's HvdliteError (for handles kept as C ids). */
static PyObject *calls_raise_handle_error(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (check_arguments("raise_handle_error", nargs, 2) != 0) return NULL;
  const long long id = PyLong_AsLongLong(args[0]);
  if (id == -1 && PyErr_Occurred()) return NULL;
  return raise_handle_error((hvdlite_handle)id, args[1]);
}

static PyObject *calls_orphans(PyObject *module, PyObject *unused) {
  if (PyList_GET_SIZE(orphans) > 0) sweep_orphans();
  return PyLong_FromSsize_t(PyList_GET_SIZE(orphans));
}

PyMethodDef core_handle_functions[] = {
    {"wait_all", calls_wait_all, METH_O, "wait_all(handles): waits for all, raises for the first failure."},
    {"release_all", calls_release_all, METH_O, "release_all(handles): releases those not released yet."},
    {"raise_handle_error", (PyCFunction)(void (*)(void))calls_raise_handle_error, METH_FASTCALL,
     "raise_handle_error(handle_id, name): raises the failed request's HvdliteError."},
    {"orphans", calls_orphans, METH_NOARGS,
     "orphans() -> how many dropped handles still wait for their collective (for tests)."},
    {NULL, NULL, 0, NULL}};

int core_handles_ready(void) {
  if (PyType_Ready(&CoreHandleType) < 0) return -1;
  PyObject *errors = PyImport_ImportModule("hvdlite.errors");
  if (errors == NULL) return -1;
  hvdlite_error = PyObject_GetAttrString(errors, "HvdliteError");
  invalid_request_error = PyObject_GetAttrString(errors, "InvalidRequestError");
  Py_DECREF(errors);
  if (hvdlite_error == NULL || invalid_request_error == NULL) return -1;
  orphans = PyList_New(0);
  return orphans != NULL ? 0 : -1;
}
