/* hvdlite._tensor_calls, PreparedRequest: a request filled into its C form once (request_fill.c), registered with
 * the core (hvdlite_prepare: no name copied, hashed or checked per submission), then submitted again and again with
 * new buffers: what the torch optimizer does with every gradient, once per step, and what the NumPy API keeps per
 * all-reduce name (named_allreduce.c). submit and submit_and_wait are C methods: no Python frame per gradient.
 */
#include "requests.h"

#include <structmember.h>

/* The filled C request of self, or NULL with ValueError naming where it was needed. */
static const hvdlite_request *filled_request(PreparedRequest *self, const char *where) {
  if (self->request.name != NULL) return &self->request;
  PyErr_Format(PyExc_ValueError, "%s: this PreparedRequest was never filled", where);
  return NULL;
}

const hvdlite_request *prepared_request_of(PyObject *prepared, const char *where) {
  if (!PyObject_TypeCheck(prepared, &PreparedRequestType)) {
    PyErr_Format(PyExc_TypeError, "%s: expected a PreparedRequest, got %T", where, prepared);
    return NULL;
  }
  return filled_request((PreparedRequest *)prepared, where);
}

/* Registers the filled request with the core, which then takes it by token. Where the core does not run or
 * refuses it, the request goes by value, and the refusal is raised when it is submitted. */
static void prepare(PreparedRequest *self) {
  const hvdlite_prepared token = hvdlite_prepare(&self->request, NULL, 0);
  if (token > 0) self->request.prepared = token;
}

static void unprepare(PreparedRequest *self) {
  if (self->request.prepared > 0) hvdlite_unprepare(self->request.prepared);
  self->request.prepared = 0;
}

/* PreparedRequest(request): fills and prepares a requests.Request. */
static int prepared_init(PreparedRequest *self, PyObject *args, PyObject *kwargs) {
  PyObject *request;
  static char *keywords[] = {"request", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:PreparedRequest", keywords, &request)) return -1;
  if (self->request.name != NULL) {
    PyErr_SetString(PyExc_TypeError, "PreparedRequest: already filled");
    return -1;
  }
  PyObject *keepalive = keepalive_of(request);
  if (keepalive == NULL) return -1;
  if (fill_request(request, &self->request, &self->parts) != 0) {
    Py_DECREF(keepalive);
    return -1;
  }
  self->keepalive = keepalive;
  prepare(self);
  return 0;
}

PyObject *new_prepared_request(const hvdlite_request *request, PyObject *name) {
  PreparedRequest *self = (PreparedRequest *)PreparedRequestType.tp_alloc(&PreparedRequestType, 0); /* zeroed */
  if (self == NULL) return NULL;
  self->keepalive = Py_NewRef(Py_None);
  if (copy_request(request, name, &self->request, &self->parts) != 0) {
    memset(&self->request, 0, sizeof self->request);
    Py_DECREF(self);
    return NULL;
  }
  prepare(self);
  return (PyObject *)self;
}

/* The prepared request pointed at args[0] (input) and args[1] (output); 0, or -1 with an error set. */
static int pointed(PreparedRequest *self, const char *method, PyObject *const *args, Py_ssize_t nargs,
                   hvdlite_request *request) {
  if (check_arguments(method, nargs, 3) != 0) return -1;
  const hvdlite_request *prepared = filled_request(self, method);
  return prepared ? with_buffers(prepared, args[0], args[1], self->parts.name, request) : -1;
}

static PyObject *prepared_submit(PreparedRequest *self, PyObject *const *args, Py_ssize_t nargs) {
  hvdlite_request request;
  if (pointed(self, "submit", args, nargs, &request) != 0) return NULL;
  return enqueue(&request, args[2], self->parts.name);
}

static PyObject *prepared_submit_and_wait(PreparedRequest *self, PyObject *const *args, Py_ssize_t nargs) {
  hvdlite_request request;
  if (pointed(self, "submit_and_wait", args, nargs, &request) != 0) return NULL;
  return submit_and_wait_filled(&request, args[2], self->parts.name);
}

static PyObject *prepared_name(PreparedRequest *self, void *closure) {
  return Py_NewRef(self->parts.name ? self->parts.name : Py_None);
}

static int prepared_traverse(PreparedRequest *self, visitproc visit, void *arg) {
  Py_VISIT(self->keepalive);
  return 0;
}

static int prepared_clear(PreparedRequest *self) {
  Py_CLEAR(self->keepalive);
  return 0;
}

static void prepared_dealloc(PreparedRequest *self) {
  PyObject_GC_UnTrack(self);
  unprepare(self);
  release_parts(&self->parts);
  prepared_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef prepared_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))prepared_submit, METH_FASTCALL,
     "submit(input, output, keepalive): submits with these buffers (integer addresses, or contiguous arrays; same "
     "dtype and shape as prepared) kept alive by keepalive; returns the Handle at once."},
    {"submit_and_wait", (PyCFunction)(void (*)(void))prepared_submit_and_wait, METH_FASTCALL,
     "submit_and_wait(input, output, keepalive): as submit, and waits (the core starts its round at once); returns the "
     "finished Handle, or raises HvdliteError (releasing it) when the collective failed."},
    {NULL, NULL, 0, NULL}};

static PyMemberDef prepared_members[] = {
    {"token", T_LONGLONG, offsetof(PreparedRequest, request.prepared), READONLY,
     "The core's token for this request (0: it goes by value: the core did not run, or refused it)."},
    {NULL, 0, 0, 0, NULL}};

static PyGetSetDef prepared_getset[] = {
    {"name", (getter)prepared_name, NULL, "The request's name (None before it is filled).", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject PreparedRequestType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hvdlite._tensor_calls.PreparedRequest",
    .tp_doc = "PreparedRequest(request): a requests.Request filled into its C form once, then submitted again and "
              "again with new buffers\n(what an optimizer does with a parameter's gradient every step): each submit "
              "sets two pointers and makes one C call.\nThe core knows it by a token while this object lives.",
    .tp_basicsize = sizeof(PreparedRequest),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)prepared_init,
    .tp_traverse = (traverseproc)prepared_traverse,
    .tp_clear = (inquiry)prepared_clear,
    .tp_dealloc = (destructor)prepared_dealloc,
    .tp_methods = prepared_methods,
    .tp_getset = prepared_getset,
    .tp_members = prepared_members,
};
