/* hvdlite._tensor_calls, request filling: the one place a requests.Request becomes the core's hvdlite_request.
 *
 * Every path that hands a request to the core (a one-off submit, a group, a PreparedRequest or PreparedGroup filled
 * once) fills it here, field by field from the Request's attributes, and raises what is wrong naming the tensor:
 * an unknown dtype, a shape that is not a sequence of non-negative ints, a process set never added, splits that do
 * not give one count per rank of the set, a buffer that cannot be read or written. The dtype names are the header's
 * (DTYPES); Python reads them from this module, not the other way round.
 */
#include "requests.h"

#include <string.h>

static const struct {
  const char *name;
  int dtype;
} dtype_names[] = {
    {"uint8", HVDLITE_UINT8},     {"int8", HVDLITE_INT8},         {"int16", HVDLITE_INT16},
    {"int32", HVDLITE_INT32},     {"int64", HVDLITE_INT64},       {"float16", HVDLITE_FLOAT16},
    {"bfloat16", HVDLITE_BFLOAT16}, {"float32", HVDLITE_FLOAT32}, {"float64", HVDLITE_FLOAT64},
    {"bool", HVDLITE_BOOL},       {"uint16", HVDLITE_UINT16},
};
#define DTYPE_COUNT (sizeof dtype_names / sizeof dtype_names[0])

static PyObject *dtypes; /* name -> hvdlite_dtype value, built from dtype_names */
static PyObject *supported_dtypes; /* "uint8, int8, ...": for the error that names them */
static PyObject *collective_attribute, *name_attribute, *dtype_attribute, *shape_attribute, *input_attribute,
    *output_attribute, *op_attribute, *prescale_attribute, *postscale_attribute, *root_attribute, *splits_attribute,
    *gpu_attribute, *set_attribute, *keepalive_attribute, *set_id_attribute, *ranks_attribute;
static PyObject *name_counters; /* (kind, process set id) -> the next number auto_name gives */

int process_set_id_of(PyObject *process_set) {
  if (process_set == Py_None) return 0;
  PyObject *set_id = PyObject_GetAttr(process_set, set_id_attribute);
  long id = set_id != NULL && PyLong_Check(set_id) ? PyLong_AsLong(set_id) : -1;
  Py_XDECREF(set_id);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    id = -1;
  }
  return (int)id;
}

int raise_set_not_added(PyObject *name) {
  PyErr_Format(PyExc_ValueError, "tensor '%S': this process set has not been added: call hvd.add_process_set() first",
               name);
  return -1;
}

void release_parts(RequestParts *parts) {
  Py_CLEAR(parts->name);
  PyMem_Free(parts->dims);
  PyMem_Free(parts->splits);
  parts->dims = NULL;
  parts->splits = NULL;
}

/* request's attribute as a C long (an int, or anything with __index__: NumPy's integers) / a double; -1 with a
 * TypeError naming the tensor when it is not one. */
static int long_attribute(PyObject *request, PyObject *attribute, PyObject *name, long *value) {
  PyObject *item = PyObject_GetAttr(request, attribute);
  if (item == NULL) return -1;
  PyObject *index = PyNumber_Index(item);
  *value = index != NULL ? PyLong_AsLong(index) : -1;
  const int failed = index == NULL || PyErr_Occurred();
  Py_XDECREF(index);
  if (failed) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "tensor '%S': %U must be an int, got %R", name, attribute, item);
  }
  Py_DECREF(item);
  return failed ? -1 : 0;
}

static int double_attribute(PyObject *request, PyObject *attribute, PyObject *name, double *value) {
  PyObject *item = PyObject_GetAttr(request, attribute);
  if (item == NULL) return -1;
  *value = PyFloat_AsDouble(item);
  const int failed = *value == -1.0 && PyErr_Occurred();
  if (failed) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "tensor '%S': %U must be a number, got %R", name, attribute, item);
  }
  Py_DECREF(item);
  return failed ? -1 : 0;
}

/* A sequence of ints into a new PyMem array (int64 or int32 by wide); its length, or -1 with an error naming the
 * tensor and what (shape, splits) is wrong. */
static Py_ssize_t int_array(PyObject *sequence, const char *what, PyObject *name, int wide, void **out) {
  PyObject *fast = PySequence_Fast(sequence, "");
  if (fast == NULL) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "tensor '%S': %s must be a sequence of ints, got %R", name, what, sequence);
    return -1;
  }
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
  void *values = PyMem_Malloc((size_t)(count > 0 ? count : 1) * (wide ? sizeof(int64_t) : sizeof(int32_t)));
  if (values == NULL) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < count; ++i) {
    PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
    PyObject *number = PyNumber_Index(item);  /* ints, NumPy's integer scalars */
    const long long value = number != NULL ? PyLong_AsLongLong(number) : -1;
    Py_XDECREF(number);
    if (value < 0 || (!wide && value > INT32_MAX)) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "tensor '%S': %s must hold non-negative ints%s, got %R", name, what,
                   wide ? "" : " below 2**31", sequence);
      PyMem_Free(values);
      Py_DECREF(fast);
      return -1;
    }
    if (wide) ((int64_t *)values)[i] = value;
    else ((int32_t *)values)[i] = (int32_t)value;
  }
  Py_DECREF(fast);
  *out = values;
  return count;
}

PyObject *raise_unsupported_dtype(PyObject *dtype_name, PyObject *name) {
  return PyErr_Format(PyExc_TypeError, "hvdlite does not support dtype %R (tensor '%S'); supported: %U", dtype_name,
                      name, supported_dtypes);
}

/* The core's dtype for a Request's dtype name; -1 with TypeError naming the tensor for one it does not carry. */
static int dtype_of(PyObject *dtype_name, PyObject *name) {
  PyObject *dtype = PyUnicode_Check(dtype_name) ? PyDict_GetItemWithError(dtypes, dtype_name) : NULL;
  if (dtype != NULL) return (int)PyLong_AsLong(dtype);
  if (!PyErr_Occurred()) raise_unsupported_dtype(dtype_name, name);
  return -1;
}

/* Splits (a sequence, one count per rank of the set) into c and parts; 0, or -1 with an error naming the tensor. */
static int fill_splits(PyObject *splits, PyObject *process_set, hvdlite_request *c, RequestParts *parts) {
  const Py_ssize_t count = int_array(splits, "splits", parts->name, 0, (void **)&parts->splits);
  if (count < 0) return -1;
  /* The set's ranks as Python keeps them (the global set's refreshed at init): the job's size is a query of the
   * cffi binding, not of this extension's. */
  PyObject *ranks = PyObject_GetAttr(process_set, ranks_attribute);
  const Py_ssize_t set_size = ranks != NULL ? PyObject_Size(ranks) : -1;
  Py_XDECREF(ranks);
  if (set_size < 0) return -1;
  if (count != set_size) {
    PyErr_Format(PyExc_ValueError, "alltoall of '%S': splits needs one entry per rank of the process set (%zd), "
                 "got %zd", parts->name, set_size, count);
    return -1;
  }
  c->splits = parts->splits;
  return 0;
}

/* GPU placement (device ordinal, CUstream address) into c; 0, or -1 with an error naming the tensor. */
static int fill_gpu(PyObject *gpu, hvdlite_request *c, PyObject *name) {
  int device;
  unsigned long long stream;
  if (!PyTuple_Check(gpu) || !PyArg_ParseTuple(gpu, "iK", &device, &stream)) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "tensor '%S': gpu must be (device ordinal, stream address), got %R", name, gpu);
    return -1;
  }
  c->gpu = 1;
  c->gpu_device = device;
  c->gpu_stream = (void *)(uintptr_t)stream;
  return 0;
}

/* Reads and checks every field but the name; 0, or -1 with an error naming the tensor. */
static int fill_fields(PyObject *request, hvdlite_request *c, RequestParts *parts) {
  PyObject *name = parts->name;
  long collective, op, root;
  if (long_attribute(request, collective_attribute, name, &collective) != 0 ||
      long_attribute(request, op_attribute, name, &op) != 0 ||
      long_attribute(request, root_attribute, name, &root) != 0 ||
      double_attribute(request, prescale_attribute, name, &c->prescale_factor) != 0 ||
      double_attribute(request, postscale_attribute, name, &c->postscale_factor) != 0) {
    return -1;
  }
  c->collective = (int32_t)collective;
  c->reduce_op = (int32_t)op;
  c->root_rank = (int32_t)root;
  PyObject *dtype_name = PyObject_GetAttr(request, dtype_attribute);
  c->dtype = dtype_name != NULL ? dtype_of(dtype_name, name) : -1;
  Py_XDECREF(dtype_name);
  if (c->dtype < 0) return -1;
  PyObject *shape = PyObject_GetAttr(request, shape_attribute);
  const Py_ssize_t ndim = shape != NULL ? int_array(shape, "shape", name, 1, (void **)&parts->dims) : -1;
  Py_XDECREF(shape);
  if (ndim < 0) return -1;
  c->ndim = (int32_t)ndim;
  c->shape = parts->dims;
  PyObject *input = PyObject_GetAttr(request, input_attribute);
  c->input = input != NULL ? buffer_address(input, 0, "input", name) : NULL;
  Py_XDECREF(input);
  if (PyErr_Occurred()) return -1;
  PyObject *output = PyObject_GetAttr(request, output_attribute);
  c->output = output != NULL ? buffer_address(output, 1, "output", name) : NULL;
  Py_XDECREF(output);
  if (PyErr_Occurred()) return -1;
  PyObject *process_set = PyObject_GetAttr(request, set_attribute);
  if (process_set == NULL) return -1;
  c->process_set_id = process_set_id_of(process_set);
  int failed = 0;
  if (c->process_set_id < 0) failed = raise_set_not_added(name);
  PyObject *splits = failed ? NULL : PyObject_GetAttr(request, splits_attribute);
  if (!failed) failed = splits == NULL || (splits != Py_None && fill_splits(splits, process_set, c, parts) != 0);
  Py_XDECREF(splits);
  Py_DECREF(process_set);
  if (failed) return -1;
  PyObject *gpu = PyObject_GetAttr(request, gpu_attribute);
  failed = gpu == NULL || (gpu != Py_None && fill_gpu(gpu, c, name) != 0);
  Py_XDECREF(gpu);
  return failed ? -1 : 0;
}

int fill_request(PyObject *request, hvdlite_request *c, RequestParts *parts) {
  memset(c, 0, sizeof *c);
  memset(parts, 0, sizeof *parts);
  parts->name = PyObject_GetAttr(request, name_attribute);
  if (parts->name == NULL) return -1;
  if (!PyUnicode_Check(parts->name)) {
    PyErr_Format(PyExc_TypeError, "a request's name must be a str, got %R", parts->name);
  } else {
    c->name = PyUnicode_AsUTF8(parts->name); /* kept by the str, which parts holds */
    if (c->name != NULL && fill_fields(request, c, parts) == 0) return 0;
  }
  release_parts(parts);
  return -1;
}

int copy_request(const hvdlite_request *source, PyObject *name, hvdlite_request *c, RequestParts *parts) {
  memset(parts, 0, sizeof *parts);
  *c = *source;
  c->prepared = 0;
  parts->name = Py_NewRef(name);
  c->name = PyUnicode_AsUTF8(name);
  parts->dims = PyMem_Malloc(sizeof(int64_t) * (size_t)(source->ndim > 0 ? source->ndim : 1));
  if (source->splits != NULL) {
    PyErr_SetString(PyExc_ValueError, "copy_request: a request with splits is never copied");
  } else if (c->name != NULL && parts->dims == NULL) {
    PyErr_NoMemory();
  }
  if (PyErr_Occurred()) {
    release_parts(parts);
    return -1;
  }
  if (source->ndim > 0) memcpy(parts->dims, source->shape, sizeof(int64_t) * (size_t)source->ndim);
  c->shape = parts->dims;
  return 0;
}

PyObject *keepalive_of(PyObject *request) { return PyObject_GetAttr(request, keepalive_attribute); }

/* auto_name(kind, process_set=None): a name for an unnamed tensor, equal on every rank that calls collectives in the
 * same order. Counted per process set: ranks outside a set do not advance its counter, so the names of every set
 * stay equal on all of its ranks. */
PyObject *auto_name(PyObject *kind, PyObject *process_set) {
  const int set_id = process_set_id_of(process_set);
  PyObject *key = Py_BuildValue("(Oi)", kind, set_id);
  if (key == NULL) return NULL;
  PyObject *next = PyDict_GetItemWithError(name_counters, key);
  const long long number = next != NULL ? PyLong_AsLongLong(next) : 0;
  PyObject *following = PyErr_Occurred() ? NULL : PyLong_FromLongLong(number + 1);
  const int stored = following != NULL ? PyDict_SetItem(name_counters, key, following) : -1;
  Py_XDECREF(following);
  Py_DECREF(key);
  if (stored != 0) return NULL;
  return set_id > 0 ? PyUnicode_FromFormat("%U.set%d.noname.%lld", kind, set_id, number)
                    : PyUnicode_FromFormat("%U.noname.%lld", kind, number);
}

static PyObject *auto_name_function(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 1 || nargs > 2 || !PyUnicode_Check(args[0])) {
    return PyErr_Format(PyExc_TypeError, "auto_name(kind: str, process_set=None)");
  }
  return auto_name(args[0], nargs == 2 ? args[1] : Py_None);
}

PyMethodDef request_fill_functions[] = {
    {"auto_name", (PyCFunction)(void (*)(void))auto_name_function, METH_FASTCALL,
     "auto_name(kind, process_set=None) -> a name for an unnamed tensor, equal on every rank of the set that calls "
     "collectives in the same order."},
    {NULL, NULL, 0, NULL}};

int request_fill_constants(PyObject *module) { return PyModule_AddObjectRef(module, "DTYPES", dtypes); }

int request_fill_ready(void) {
  struct {
    PyObject **slot;
    const char *text;
  } names[] = {{&collective_attribute, "collective"}, {&name_attribute, "name"},
               {&dtype_attribute, "dtype"}, {&shape_attribute, "shape"},
               {&input_attribute, "input_ptr"}, {&output_attribute, "output_ptr"},
               {&op_attribute, "op"}, {&prescale_attribute, "prescale_factor"},
               {&postscale_attribute, "postscale_factor"}, {&root_attribute, "root_rank"},
               {&splits_attribute, "splits"}, {&gpu_attribute, "gpu"}, {&set_attribute, "process_set"},
               {&keepalive_attribute, "keepalive"}, {&set_id_attribute, "process_set_id"},
               {&ranks_attribute, "ranks"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    *names[i].slot = PyUnicode_InternFromString(names[i].text);
    if (*names[i].slot == NULL) return -1;
  }
  dtypes = PyDict_New();
  name_counters = PyDict_New();
  PyObject *listed = PyList_New(0);
  for (size_t i = 0; dtypes != NULL && listed != NULL && i < DTYPE_COUNT; ++i) {
    PyObject *name = PyUnicode_FromString(dtype_names[i].name);
    PyObject *value = PyLong_FromLong(dtype_names[i].dtype);
    if (name == NULL || value == NULL || PyDict_SetItem(dtypes, name, value) != 0 || PyList_Append(listed, name) != 0) {
      Py_CLEAR(dtypes);
    }
    Py_XDECREF(name);
    Py_XDECREF(value);
  }
  PyObject *separator = PyUnicode_FromString(", ");
  supported_dtypes = dtypes != NULL && separator != NULL ? PyUnicode_Join(separator, listed) : NULL;
  Py_XDECREF(separator);
  Py_XDECREF(listed);
  return dtypes != NULL && name_counters != NULL && supported_dtypes != NULL ? 0 : -1;
}
