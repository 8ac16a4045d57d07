/* hvdlite._tensor_calls, Request part: hvdlite.requests.submit(Request) and run(Request) in C for the common case.
 *
 * The adapters' one-off collectives (torch's hvd.allreduce, broadcast, allgather...) build a Request per call.
 * Filling its C struct through cffi, field by field, cost more than a small all-reduce.
 * Here the fields are read once each into a struct on the stack and enqueued. Anything out of the ordinary
 * (splits, cffi pointers, an unknown dtype, a process set not added, a shape that is not a short sequence of
 * ints) is left to requests.py's Python fill, which raises what is wrong: submit_request and submit_and_wait_request return
 * None then.
 */
#include "requests.h"

#define MAX_NDIM 32

static PyObject *dtypes; /* requests.DTYPES: core dtype name -> its hvdlite_dtype value */
PyObject *global_process_set;
static PyObject *collective_attribute, *name_attribute, *dtype_attribute, *shape_attribute, *input_attribute,
    *output_attribute, *op_attribute, *prescale_attribute, *postscale_attribute, *root_attribute, *splits_attribute, *gpu_attribute,
    *set_attribute, *keepalive_attribute, *set_id_attribute;

enum Conversion { AS_LONG, AS_DOUBLE, AS_ADDRESS };

/* attribute converted into *value (a long, a double from an int or a float, or a void * from an int address);
 * 0, or -1 with no error left set when it is missing or of another type (a cffi pointer, say). */
static int number_attribute(PyObject *object, PyObject *attribute, enum Conversion conversion, void *value) {
  PyObject *item = PyObject_GetAttr(object, attribute);
  int ok = item != NULL && (PyLong_Check(item) || (conversion == AS_DOUBLE && PyFloat_Check(item)));
  if (ok) {
    switch (conversion) {
      case AS_LONG: *(long *)value = PyLong_AsLong(item); break;
      case AS_DOUBLE: *(double *)value = PyFloat_AsDouble(item); break;
      case AS_ADDRESS: *(void **)value = PyLong_AsVoidPtr(item); break;
    }
    ok = !PyErr_Occurred();
  }
  Py_XDECREF(item);
  PyErr_Clear();
  return ok ? 0 : -1;
}

/* Shape attribute (a tuple or list of ints, at most MAX_NDIM) into dims; its length, or -1 with no error set. */
static int shape_attribute_of(PyObject *object, int64_t *dims) {
  PyObject *shape = PyObject_GetAttr(object, shape_attribute);
  int ndim = -1;
  if (shape != NULL && (PyTuple_CheckExact(shape) || PyList_CheckExact(shape)) &&
      PySequence_Fast_GET_SIZE(shape) <= MAX_NDIM) {
    ndim = (int)PySequence_Fast_GET_SIZE(shape);
    PyObject **items = PySequence_Fast_ITEMS(shape);
    for (int i = 0; i < ndim; ++i) {
      dims[i] = PyLong_Check(items[i]) ? PyLong_AsLongLong(items[i]) : -1;
      if (dims[i] < 0) ndim = -1;  /* not an int, or negative: Python says which */
    }
  }
  Py_XDECREF(shape);
  PyErr_Clear();
  return ndim;
}

/* The request's process set id, or -1 with no error set when the set was not added. */
static int request_set_id(PyObject *request) {
  PyObject *set = PyObject_GetAttr(request, set_attribute);
  const int id = set != NULL ? process_set_id_of(set) : -1;
  Py_XDECREF(set);
  PyErr_Clear();
  return id;
}

/* Fills c from request; 0, or -1 (no error set) when Python must fill it. name: the request's name (new ref). */
static int fill(PyObject *request, hvdlite_request *c, int64_t *dims, PyObject **name) {
  long collective, op, root;
  void *input;
  memset(c, 0, sizeof *c);
  *name = PyObject_GetAttr(request, name_attribute);
  if (*name == NULL || !PyUnicode_Check(*name)) goto python;
  c->name = PyUnicode_AsUTF8(*name); /* kept by the str object, which outlives the enqueue */
  if (c->name == NULL) goto python;
  PyObject *splits = PyObject_GetAttr(request, splits_attribute);
  const int has_splits = splits != Py_None;
  Py_XDECREF(splits);
  if (has_splits) goto python;
  PyObject *gpu = PyObject_GetAttr(request, gpu_attribute);
  const int on_gpu = gpu != Py_None;
  Py_XDECREF(gpu);
  if (on_gpu) goto python; /* GPU tensors: requests.py fills the device and stream */
  PyObject *dtype_name = PyObject_GetAttr(request, dtype_attribute);
  PyObject *dtype = dtype_name != NULL && PyUnicode_CheckExact(dtype_name) ? PyDict_GetItemWithError(dtypes, dtype_name)
                                                                          : NULL;
  Py_XDECREF(dtype_name);
  if (dtype == NULL || !PyLong_Check(dtype)) goto python;
  c->dtype = (int)PyLong_AsLong(dtype);
  c->ndim = shape_attribute_of(request, dims);
  c->shape = dims;
  c->process_set_id = request_set_id(request);
  if (c->ndim < 0 || c->process_set_id < 0 ||
      number_attribute(request, collective_attribute, AS_LONG, &collective) != 0 ||
      number_attribute(request, op_attribute, AS_LONG, &op) != 0 ||
      number_attribute(request, root_attribute, AS_LONG, &root) != 0 ||
      number_attribute(request, prescale_attribute, AS_DOUBLE, &c->prescale_factor) != 0 ||
      number_attribute(request, postscale_attribute, AS_DOUBLE, &c->postscale_factor) != 0 ||
      number_attribute(request, input_attribute, AS_ADDRESS, &input) != 0 ||
      number_attribute(request, output_attribute, AS_ADDRESS, &c->output) != 0) {
    goto python;
  }
  c->input = input;
  c->collective = (int)collective;
  c->reduce_op = (int)op;
  c->root_rank = (int)root;
  return 0;
python:
  PyErr_Clear();
  Py_CLEAR(*name);
  return -1;
}

/* The request filled in C and given to start (enqueue or submit_and_wait_filled): its Handle, or None when requests.py must
 * fill it (it then raises what is wrong). */
static PyObject *start_request(PyObject *request,
                               PyObject *(*start)(const hvdlite_request *, PyObject *keepalive, PyObject *name)) {
  if (dtypes == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "hvdlite._tensor_calls: configure_requests was not called (import hvdlite.requests)");
    return NULL;
  }
  hvdlite_request c;
  int64_t dims[MAX_NDIM];
  PyObject *name;
  if (fill(request, &c, dims, &name) != 0) Py_RETURN_NONE;
  PyObject *keepalive = PyObject_GetAttr(request, keepalive_attribute);
  PyObject *handle = keepalive != NULL ? start(&c, keepalive, name) : NULL;
  Py_XDECREF(keepalive);
  Py_DECREF(name);
  return handle;
}

/* submit_request(request) -> its Handle at once, or None (see start_request). */
static PyObject *submit_request(PyObject *module, PyObject *request) { return start_request(request, enqueue); }

/* submit_and_wait_request(request) -> its finished Handle (submitted and waited for), or None (see start_request). */
static PyObject *submit_and_wait_request_object(PyObject *module, PyObject *request) {
  return start_request(request, submit_and_wait_filled);
}

int process_set_id_of(PyObject *process_set) {
  if (process_set == global_process_set) return 0;  /* the default: its id is fixed, no attribute lookup */
  PyObject *set_id = PyObject_GetAttr(process_set, set_id_attribute);
  long id = set_id != NULL && PyLong_Check(set_id) ? PyLong_AsLong(set_id) : -1;
  Py_XDECREF(set_id);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    id = -1;
  }
  return (int)id;
}

/* configure_requests(dtypes, global_process_set): requests.DTYPES, the dtype names the core carries, and the
 * default process set. */
static PyObject *configure_requests(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (check_arguments("configure_requests", nargs, 2) != 0) return NULL;
  if (!PyDict_Check(args[0])) return PyErr_Format(PyExc_TypeError, "configure_requests needs a dict, got %R", args[0]);
  Py_XSETREF(dtypes, Py_NewRef(args[0]));
  Py_XSETREF(global_process_set, Py_NewRef(args[1]));
  Py_RETURN_NONE;
}

PyMethodDef request_object_functions[] = {
    {"submit_request", submit_request, METH_O,
     "submit_request(request) -> Handle, or None when the request needs requests.py's checks."},
    {"submit_and_wait_request", submit_and_wait_request_object, METH_O,
     "submit_and_wait_request(request) -> finished Handle, or None when the request needs requests.py's checks."},
    {"configure_requests", (PyCFunction)(void (*)(void))configure_requests, METH_FASTCALL,
     "configure_requests(dtypes, global_process_set): requests.DTYPES and the default process set."},
    {NULL, NULL, 0, NULL}};

int request_objects_ready(void) {
  struct {
    PyObject **slot;
    const char *text;
  } names[] = {{&collective_attribute, "collective"}, {&name_attribute, "name"},
               {&dtype_attribute, "dtype"}, {&shape_attribute, "shape"},
               {&input_attribute, "input_ptr"}, {&output_attribute, "output_ptr"},
               {&op_attribute, "op"}, {&prescale_attribute, "prescale_factor"},
               {&postscale_attribute, "postscale_factor"}, {&root_attribute, "root_rank"},
               {&splits_attribute, "splits"}, {&gpu_attribute, "gpu"}, {&set_attribute, "process_set"},
               {&keepalive_attribute, "keepalive"}, {&set_id_attribute, "process_set_id"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    *names[i].slot = PyUnicode_InternFromString(names[i].text);
    if (*names[i].slot == NULL) return -1;
  }
  return 0;
}
