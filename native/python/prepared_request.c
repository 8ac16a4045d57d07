/* hvdlite._tensor_calls, PreparedRequestBase: the C half of hvdlite.requests.PreparedRequest.
 *
 * The torch optimizer submits every gradient through a PreparedRequest, once per step. As a Python method,
 * submit cost a Python frame on top of the C call it made, a third of a submission. Here submit and
 * submit_and_wait are the methods themselves: the request's address and name live in this struct, and
 * requests.py's subclass fills the C request, prepares it with the core and keeps what it points to.
 */
#include "requests.h"

#include <structmember.h>

typedef struct {
  PyObject_HEAD
  unsigned long long address; /* of the filled hvdlite_request (0 until the subclass has filled one) */
  PyObject *name;             /* the request's name, for handles and error messages */
} PreparedRequestBase;

/* The filled C request of self, or NULL with ValueError naming where it was needed. */
static const hvdlite_request *filled_request(PreparedRequestBase *self, const char *where) {
  if (self->address != 0 && self->name != NULL) return (const hvdlite_request *)(uintptr_t)self->address;
  PyErr_Format(PyExc_ValueError, "%s: this PreparedRequest was never filled", where);
  return NULL;
}

const hvdlite_request *prepared_request_of(PyObject *prepared, const char *where) {
  if (!PyObject_TypeCheck(prepared, &PreparedRequestBaseType)) {
    PyErr_Format(PyExc_TypeError, "%s: expected a PreparedRequest, got %T", where, prepared);
    return NULL;
  }
  return filled_request((PreparedRequestBase *)prepared, where);
}

/* The prepared request pointed at args[0] (input) and args[1] (output); 0, or -1 with an error set. */
static int pointed(PreparedRequestBase *self, const char *method, PyObject *const *args, Py_ssize_t nargs,
                   hvdlite_request *request) {
  if (check_arguments(method, nargs, 3) != 0) return -1;
  const hvdlite_request *prepared = filled_request(self, method);
  return prepared ? with_buffers(prepared, args[0], args[1], self->name, request) : -1;
}

static PyObject *prepared_submit(PreparedRequestBase *self, PyObject *const *args, Py_ssize_t nargs) {
  hvdlite_request request;
  if (pointed(self, "submit", args, nargs, &request) != 0) return NULL;
  return enqueue(&request, args[2], self->name);
}

static PyObject *prepared_submit_and_wait(PreparedRequestBase *self, PyObject *const *args, Py_ssize_t nargs) {
  hvdlite_request request;
  if (pointed(self, "submit_and_wait", args, nargs, &request) != 0) return NULL;
  return submit_and_wait_filled(&request, args[2], self->name);
}

static void prepared_dealloc(PreparedRequestBase *self) {
  Py_CLEAR(self->name);
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
    {"_address", T_ULONGLONG, offsetof(PreparedRequestBase, address), 0, "Address of the filled C request."},
    {"name", T_OBJECT, offsetof(PreparedRequestBase, name), 0, "The request's name."},
    {NULL, 0, 0, 0, NULL}};

PyTypeObject PreparedRequestBaseType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "hvdlite._tensor_calls.PreparedRequestBase",
    .tp_doc = "A filled request submitted again and again with new buffers (see hvdlite.requests.PreparedRequest).",
    .tp_basicsize = sizeof(PreparedRequestBase),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)prepared_dealloc,
    .tp_methods = prepared_methods,
    .tp_members = prepared_members,
};
