/* hvdlite._tensor_calls, NumPy part: the per-tensor work of hvd.allreduce_async / allreduce and of
 * grouped_allreduce_async on NumPy arrays, in C (synchronize and poll: int_handles.c).
 *
 * hvdlite/ops.py keeps one prepared request (filled once, see hvdlite/requests.py) per tensor name, as a
 * NamedAllreduce (named_allreduce.c). When an
 * array matches its name's request (same dtype, shape, op, scale factors, process set; C-contiguous, native
 * byte order), the call is a dictionary lookup, an output array (recycled, see recycled_output) and one
 * enqueue: no Python runs. Anything else (a new name, another shape, no name, a list, a 0-d or strided array)
 * goes to ops.py's prepare function, which checks the arguments, raises what is wrong, and caches the new
 * request.
 *
 * An all-reduce's int handle (int_handles.c) files the core's Handle and the output array that synchronize
 * returns.
 */
#include "array_collectives.h"

#include "int_handles.h"
#include "output_arena.h"
#include "requests.h"

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION /* memory handlers (NEP 49) */
#include <numpy/arrayobject.h>

static PyObject *prepare_allreduce; /* ops._prepare_allreduce(tensor, name, op, pre, post, set)
                                       -> (prepared, array, its entry in prepared_requests or None) */
static PyObject *resolve_op;        /* ops.resolve_op(op, average): Horovod's rules, raises for a bad op */
static uint64_t plain_ops;          /* ops._REDUCE_OPS as bits: the ops resolve_op returns unchanged when average
                                       is None (a bit test instead of a set lookup per tensor) */
static PyObject *average_op;        /* ops.Average: the op when neither op nor average is given */
static PyObject *prepared_requests; /* ops._PREPARED_REQUESTS: name -> its NamedAllreduce (named_allreduce.c) */
static PyObject *require_init;      /* basics._require_init: raises ValueError when hvdlite is not running */
static int bfloat16_type = -1;      /* ml_dtypes.bfloat16's NumPy type number */
static PyObject *name_attribute;

/* What every member of a call must have been prepared with. */
typedef struct {
  int op;
  double prescale_factor, postscale_factor;
  int process_set_id;
} Signature;

/* The signature of (op, prescale, postscale, process_set) arguments; 0 when one is not what a prepared request
 * holds (not a number, a process set not added): then Python decides, and raises what it must. */
static int signature_of(PyObject *const *args, Signature *signature) {
  signature->process_set_id = process_set_id_of(args[3]);  /* first: it clears what it raises */
  signature->op = (int)PyLong_AsLong(args[0]);
  signature->prescale_factor = PyFloat_AsDouble(args[1]);
  signature->postscale_factor = PyFloat_AsDouble(args[2]);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    return 0;
  }
  return signature->process_set_id >= 0;
}

/* The core's dtype of an array, or -1 for one left to Python (not supported, byte-swapped). */
static int core_dtype(PyArrayObject *array) {
  if (!PyArray_ISNOTSWAPPED(array)) return -1;
  switch (PyArray_TYPE(array)) {
    case NPY_BOOL: return HVDLITE_BOOL;
    case NPY_USHORT: return HVDLITE_UINT16;
    case NPY_UBYTE: return HVDLITE_UINT8;
    case NPY_BYTE: return HVDLITE_INT8;
    case NPY_SHORT: return HVDLITE_INT16;
    case NPY_INT: return sizeof(int) == 4 ? HVDLITE_INT32 : -1;
    case NPY_LONG: return sizeof(long) == 8 ? HVDLITE_INT64 : HVDLITE_INT32;
    case NPY_LONGLONG: return HVDLITE_INT64;
    case NPY_HALF: return HVDLITE_FLOAT16;
    case NPY_FLOAT: return HVDLITE_FLOAT32;
    case NPY_DOUBLE: return HVDLITE_FLOAT64;
  }
  return PyArray_TYPE(array) == bfloat16_type ? HVDLITE_BFLOAT16 : -1;
}

/* True when the object is an array the core can read in place as the all-reduce request describes. */
static int matches(PyObject *object, const hvdlite_request *request, const Signature *signature) {
  if (!PyArray_Check(object)) return 0;
  PyArrayObject *array = (PyArrayObject *)object;
  if (!PyArray_IS_C_CONTIGUOUS(array) || request->collective != HVDLITE_ALLREDUCE ||
      request->reduce_op != signature->op || request->prescale_factor != signature->prescale_factor ||
      request->postscale_factor != signature->postscale_factor ||
      request->process_set_id != signature->process_set_id || request->ndim != PyArray_NDIM(array) ||
      request->ndim == 0 || request->dtype != core_dtype(array)) {
    return 0;
  }
  const npy_intp *dims = PyArray_DIMS(array);
  for (int i = 0; i < request->ndim; ++i) {
    if (request->shape[i] != dims[i]) return 0;
  }
  return 1;
}

/* Output recycling. Each prepared request, and each member of a prepared group, keeps its last KEPT_OUTPUTS
 * output arrays in slots (most recent first; array_collectives.h). One that nobody else holds any more (no reference,
 * view, buffer export or weak reference: only its slot's) is handed out again instead of a new array. A
 * training step drops its results; a new array every step costs a malloc and, once glibc has given the freed
 * pages back, a page fault per 4 KiB when the core writes it (several times slower than fixed outputs for a
 * step of many small tensors). Two slots, so that a loop that
 * still holds the last result while it makes the next one reuses the one before. */

/* New recycled outputs take their memory from output_arena.c (packed end to end): NumPy's memory handler is
 * switched to it for the one allocation. The array frees through it whenever it dies. */
static PyDataMem_Handler arena_handler = {
    "hvdlite_outputs", 1, {NULL, output_arena_malloc, output_arena_calloc, output_arena_realloc, output_arena_free}};
static PyObject *arena_capsule;

static PyObject *new_output_like(PyArrayObject *like) {
  PyObject *previous = PyDataMem_SetHandler(arena_capsule);
  if (previous == NULL) return NULL;
  PyObject *output = PyArray_NewLikeArray(like, NPY_CORDER, NULL, 1);
  PyObject *restored = PyDataMem_SetHandler(previous);
  Py_DECREF(previous);
  if (restored == NULL) Py_CLEAR(output);
  Py_XDECREF(restored);
  return output;
}

/* True when a and b have the same dims (inline: NumPy's PyArray_SAMESHAPE is a call through its API table). */
static int same_shape(PyArrayObject *a, PyArrayObject *b) {
  const int ndim = PyArray_NDIM(a);
  if (ndim != PyArray_NDIM(b)) return 0;
  const npy_intp *a_dims = PyArray_DIMS(a), *b_dims = PyArray_DIMS(b);
  for (int i = 0; i < ndim; ++i) {
    if (a_dims[i] != b_dims[i]) return 0;
  }
  return 1;
}

/* True when kept is an array only its slot holds, of like's type, dtype and shape, that may be written. */
static int reusable(PyObject *kept, PyArrayObject *like) {
  if (Py_REFCNT(kept) != 1 || !PyArray_CheckExact(kept) || !PyArray_CheckExact((PyObject *)like)) return 0;
  PyArrayObject *array = (PyArrayObject *)kept;
  if (((PyArrayObject_fields *)array)->weakreflist != NULL || !PyArray_CHKFLAGS(array, NPY_ARRAY_OWNDATA) ||
      !PyArray_ISWRITEABLE(array) || !PyArray_IS_C_CONTIGUOUS(array) ||
      !(PyArray_DESCR(array) == PyArray_DESCR(like) || PyArray_EquivArrTypes(array, like)) ||
      !same_shape(array, like)) {
    return 0;  /* the caller changed its shape, dtype, strides or flags in place, or watches it */
  }
  return 1;
}

/* An output array like `like` from KEPT_OUTPUTS slots (each an array or None): a kept one
 * nobody holds, or a new one, which goes into the first slot (the others move down one). */
static PyObject *recycled_output(PyObject **slots, PyArrayObject *like) {
  int found = 0;
  while (found < KEPT_OUTPUTS && !(slots[found] != Py_None && reusable(slots[found], like))) ++found;
  PyObject *output = found < KEPT_OUTPUTS ? slots[found]  /* the slot's reference moves to the front */
                                          : new_output_like(like);
  if (output == NULL) return NULL;
  PyObject *dropped = found < KEPT_OUTPUTS ? NULL : slots[KEPT_OUTPUTS - 1];
  for (int i = found < KEPT_OUTPUTS ? found : KEPT_OUTPUTS - 1; i > 0; --i) slots[i] = slots[i - 1];
  slots[0] = output;
  Py_XDECREF(dropped);  /* last: its deallocation may run arbitrary code */
  return Py_NewRef(output);
}

/* True for a name the caller gave (a non-empty str): only such calls are cached by name. */
static int is_given_name(PyObject *name) {
  return PyUnicode_Check(name) && PyUnicode_GET_LENGTH(name) > 0;
}

/* The cached NamedAllreduce of name when tensor matches its request (a new reference), else NULL (with an error
 * set only when something failed, not for a mere miss). */
static NamedAllreduce *cached_entry(PyObject *tensor, PyObject *name, const Signature *signature) {
  if (!is_given_name(name)) return NULL;
  PyObject *found = PyDict_GetItemWithError(prepared_requests, name);
  if (found == NULL) return NULL;
  if (!Py_IS_TYPE(found, &NamedAllreduceType)) {
    PyErr_Format(PyExc_TypeError, "the prepared all-reduce of '%U' must be a NamedAllreduce", name);
    return NULL;
  }
  NamedAllreduce *entry = (NamedAllreduce *)found;
  return matches(tensor, &entry->request, signature) ? (NamedAllreduce *)Py_NewRef(entry) : NULL;
}

/* 0 once ops.py has called configure_arrays, else -1 with an error set. */
static int check_configured(void) {
  if (prepared_requests != NULL) return 0;
  PyErr_SetString(PyExc_RuntimeError, "hvdlite._tensor_calls: configure_arrays was not called (import hvdlite.ops)");
  return -1;
}

/* What ops._prepare_allreduce makes of a call the C path has no matching request for: the array to read (new
 * reference in *array), and the request to send: its NamedAllreduce's (a new reference in *entry) for a named
 * call, else the PreparedRequest's own (held by *prepared). NULL with an error set when Python raised. */
static const hvdlite_request *prepared_in_python(PyObject *const *args, PyObject **array, NamedAllreduce **entry,
                                                 PyObject **prepared) {
  PyObject *made = PyObject_Vectorcall(prepare_allreduce, args, 6, NULL);
  if (made == NULL) return NULL;
  PyObject *kept = PyTuple_Check(made) && PyTuple_GET_SIZE(made) == 3 ? PyTuple_GET_ITEM(made, 2) : NULL;
  if (kept == NULL || !PyArray_Check(PyTuple_GET_ITEM(made, 1)) ||
      !(kept == Py_None || Py_IS_TYPE(kept, &NamedAllreduceType))) {
    Py_DECREF(made);
    PyErr_SetString(PyExc_TypeError, "prepare must return (PreparedRequest, array, NamedAllreduce or None)");
    return NULL;
  }
  *array = Py_NewRef(PyTuple_GET_ITEM(made, 1));
  *prepared = Py_NewRef(PyTuple_GET_ITEM(made, 0));
  *entry = kept == Py_None ? NULL : (NamedAllreduce *)Py_NewRef(kept); /* just cached: its output is kept too */
  Py_DECREF(made);
  return *entry ? &(*entry)->request : prepared_request_of(*prepared, "allreduce");
}

/* The all-reduce of one array into a new (or recycled) array of its shape, or into the array itself when
 * in_place_result is given (what synchronize then returns in place of the array: the framework tensor that owns
 * its memory); args are (tensor, name, op, prescale_factor, postscale_factor, process_set), op resolved. wait
 * false: enqueued, returns its int handle (see int_handles.c); true: returns the result. */
static PyObject *allreduce_array(PyObject *const *args, int wait, PyObject *in_place_result) {
  if (!hvdlite_is_initialized()) {
    PyObject *ok = PyObject_CallNoArgs(require_init);  /* raises ValueError */
    if (ok == NULL) return NULL;
    Py_DECREF(ok);
  }
  Signature signature;
  PyObject *prepared = NULL, *array = args[0], *result = NULL;
  NamedAllreduce *entry = signature_of(args + 2, &signature) ? cached_entry(args[0], args[1], &signature) : NULL;
  const hvdlite_request *request = NULL;
  if (entry != NULL) {
    request = &entry->request;
    Py_INCREF(array);
  } else {
    /* A name not prepared yet (or prepared otherwise), no name, or an array Python must look at. */
    if (PyErr_Occurred()) return NULL;
    array = NULL;
    request = prepared_in_python(args, &array, &entry, &prepared);
  }
  PyObject *name = request == NULL          ? NULL
                   : is_given_name(args[1]) ? Py_NewRef(args[1])
                                            : PyObject_GetAttr(prepared, name_attribute);
  if (name != NULL && in_place_result != NULL && array != args[0]) {
    /* Python made a contiguous copy: reducing it would leave the caller's memory as it was. */
    PyErr_Format(PyExc_ValueError, "in-place all-reduce of '%S' needs a C-contiguous array of at least one "
                 "dimension in native byte order", name);
    Py_CLEAR(name);
  }
  PyObject *output = name == NULL       ? NULL
                     : in_place_result ? Py_NewRef(array)
                     : entry           ? recycled_output(entry->outputs, (PyArrayObject *)array)
                                       : PyArray_NewLikeArray((PyArrayObject *)array, NPY_CORDER, NULL, 1);
  PyObject *returned = in_place_result ? in_place_result : output;
  if (output != NULL) {
    hvdlite_request filled = *request;
    filled.input = PyArray_DATA((PyArrayObject *)array);
    filled.output = PyArray_DATA((PyArrayObject *)output);
    if (wait) {
      if (run_and_release(&filled, name) == 0) result = Py_NewRef(returned);
    } else {
      /* The int handle keeps the input, and what synchronize returns (the output, which it keeps alive too). */
      result = submit_tracked(&filled, array, name, returned);
    }
  }
  Py_XDECREF(output);
  Py_XDECREF(name);
  Py_XDECREF(array);
  Py_XDECREF(prepared);
  Py_XDECREF(entry);
  return result;
}

static PyObject *allreduce_keywords[7], *float_one; /* interned parameter names; 1.0, the scale factors' default */
static const char *const allreduce_parameters[7] = {"tensor", "average", "name", "op", "prescale_factor",
                                                    "postscale_factor", "process_set"};

/* Binds Horovod's all-reduce arguments, given by position or keyword, to their slots in bound (NULL where the
 * default applies); 0, or -1 with Python's TypeError for a missing, unknown or repeated argument. */
static int bind_allreduce_arguments(const char *function, PyObject *const *args, Py_ssize_t nargs,
                                    PyObject *kwnames, PyObject **bound) {
  if (nargs > 7) {
    PyErr_Format(PyExc_TypeError, "%s() takes from 1 to 7 positional arguments but %zd were given", function, nargs);
    return -1;
  }
  for (int i = 0; i < 7; ++i) bound[i] = i < nargs ? args[i] : NULL;
  const Py_ssize_t nkeywords = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t k = 0; k < nkeywords; ++k) {
    PyObject *keyword = PyTuple_GET_ITEM(kwnames, k);
    int slot = 0;
    while (slot < 7 && keyword != allreduce_keywords[slot]) ++slot;  /* interned: usually the same object */
    for (int i = 0; slot == 7 && i < 7; ++i) {
      const int order = PyUnicode_Compare(keyword, allreduce_keywords[i]);
      if (order == -1 && PyErr_Occurred()) return -1;
      if (order == 0) slot = i;
    }
    if (slot == 7) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", function, keyword);
      return -1;
    }
    if (bound[slot] != NULL) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", function,
                   allreduce_parameters[slot]);
      return -1;
    }
    bound[slot] = args[nargs + k];
  }
  if (bound[0] == NULL) {
    PyErr_Format(PyExc_TypeError, "%s() missing 1 required positional argument: 'tensor'", function);
    return -1;
  }
  return 0;
}

/* hvd.allreduce_async (wait 0) and hvd.allreduce (wait 1) themselves, with Horovod's signature (vectorcall: nargs
 * positional, then the values of kwnames): the arguments bound and the op resolved (ops.resolve_op only for what
 * is not a plain op), then allreduce_array. No Python frame runs per tensor on the common path. function names the
 * caller in errors; in_place_result, when given, reduces into the tensor argument itself and is what synchronize
 * returns. */
static PyObject *allreduce_call(const char *function, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int wait,
                         PyObject *in_place_result) {
  if (check_configured() != 0) return NULL;
  PyObject *bound[7];
  if (bind_allreduce_arguments(function, args, nargs, kwnames, bound) != 0) return NULL;
  PyObject *average = bound[1] ? bound[1] : Py_None, *op = bound[3] ? bound[3] : Py_None;
  PyObject *resolved = NULL;
  if (average == Py_None && op == Py_None) {
    op = average_op;
  } else {
    const long value = average == Py_None && PyLong_CheckExact(op) ? PyLong_AsLong(op) : -1;
    if (value == -1) PyErr_Clear();  /* not a plain int: resolve_op decides, and says what is wrong */
    if (!(value >= 0 && value < 64 && (plain_ops >> value & 1))) {
      PyObject *pair[2] = {op, average};
      resolved = PyObject_Vectorcall(resolve_op, pair, 2, NULL);
      if (resolved == NULL) return NULL;
      op = resolved;
    }
  }
  PyObject *process_set = bound[6] && bound[6] != Py_None ? bound[6] : global_process_set;
  PyObject *call[6] = {bound[0], bound[2] ? bound[2] : Py_None, op, bound[4] ? bound[4] : float_one,
                       bound[5] ? bound[5] : float_one, process_set};
  PyObject *result = allreduce_array(call, wait, in_place_result);
  Py_XDECREF(resolved);
  return result;
}

static PyObject *allreduce_async_function(PyObject *module, PyObject *const *args, size_t nargs, PyObject *kwnames) {
  return allreduce_call("allreduce_async", args, PyVectorcall_NARGS(nargs), kwnames, 0, NULL);
}

static PyObject *allreduce_function(PyObject *module, PyObject *const *args, size_t nargs, PyObject *kwnames) {
  return allreduce_call("allreduce", args, PyVectorcall_NARGS(nargs), kwnames, 1, NULL);
}

/* allreduce_in_place_async(result, tensor, ...): result, then Horovod's all-reduce arguments; reduces tensor (an
 * array) in place, and synchronize returns result (hvdlite.torch's allreduce_async_: the tensor the array views). */
static PyObject *allreduce_in_place_async_function(PyObject *module, PyObject *const *args, size_t nargs,
                                                   PyObject *kwnames) {
  const Py_ssize_t positional = PyVectorcall_NARGS(nargs);
  if (positional < 2) {
    return PyErr_Format(PyExc_TypeError,
                        "allreduce_in_place_async() takes the result and the tensor first (%zd positional given)",
                        positional);
  }
  return allreduce_call("allreduce_in_place_async", args + 1, positional - 1, kwnames, 0, args[0]);
}

/* point_arrays(requests_address, count, arrays, op, prescale_factor, postscale_factor, process_set, kept):
 * points the count filled all-reduce requests at the arrays (one each) and at output arrays of their shapes,
 * recycled from kept (a list of count * KEPT_OUTPUTS slots, see recycled_output); returns the outputs, or None
 * (nothing pointed that matters) when an array does not match its request. */
static PyObject *point_arrays(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (check_arguments("point_arrays", nargs, 8) != 0) return NULL;
  hvdlite_request *requests = (hvdlite_request *)PyLong_AsVoidPtr(args[0]);
  const Py_ssize_t count = PyLong_AsSsize_t(args[1]);
  if (PyErr_Occurred()) return NULL;
  PyObject *kept = args[7];
  if (!PyList_CheckExact(kept) || PyList_GET_SIZE(kept) != count * KEPT_OUTPUTS) {
    return PyErr_Format(PyExc_TypeError, "point_arrays: kept must be a list of %zd slots", count * KEPT_OUTPUTS);
  }
  Signature signature;
  if (requests == NULL || !signature_of(args + 3, &signature)) Py_RETURN_NONE;
  PyObject *arrays = PySequence_Fast(args[2], "point_arrays: arrays must be a sequence");
  if (arrays == NULL) return NULL;
  PyObject *outputs = NULL;
  if (PySequence_Fast_GET_SIZE(arrays) == count) outputs = PyList_New(count);
  for (Py_ssize_t i = 0; outputs != NULL && i < count; ++i) {
    PyObject *array = PySequence_Fast_GET_ITEM(arrays, i);
    if (!matches(array, &requests[i], &signature)) {
      Py_CLEAR(outputs);
      break;
    }
    PyObject *output = recycled_output(&PyList_GET_ITEM(kept, i * KEPT_OUTPUTS), (PyArrayObject *)array);
    if (output == NULL) {
      Py_CLEAR(outputs);
      Py_DECREF(arrays);
      return NULL;
    }
    PyList_SET_ITEM(outputs, i, output);
    requests[i].input = PyArray_DATA((PyArrayObject *)array);
    requests[i].output = PyArray_DATA((PyArrayObject *)output);
  }
  Py_DECREF(arrays);
  if (outputs == NULL && PyErr_Occurred()) return NULL;
  return outputs != NULL ? outputs : Py_NewRef(Py_None);
}

/* configure_arrays(prepare, prepared_requests, require_init, bfloat16_dtype, resolve_op, reduce_ops, average):
 * what ops.py lends. */
static PyObject *configure_arrays(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (check_arguments("configure_arrays", nargs, 7) != 0) return NULL;
  if (!PyDict_Check(args[1]) || !PyAnySet_Check(args[5])) {
    return PyErr_Format(PyExc_TypeError, "configure_arrays: prepared_requests must be a dict, reduce_ops a set");
  }
  uint64_t ops = 0;
  PyObject *iterator = PyObject_GetIter(args[5]), *op;
  while (iterator != NULL && (op = PyIter_Next(iterator)) != NULL) {
    const long value = PyLong_CheckExact(op) ? PyLong_AsLong(op) : -1;
    Py_DECREF(op);
    if (value < 0 || value >= 64) {
      Py_DECREF(iterator);
      return PyErr_Format(PyExc_TypeError, "configure_arrays: reduce_ops must hold ints from 0 to 63");
    }
    ops |= 1ULL << value;
  }
  Py_XDECREF(iterator);
  if (PyErr_Occurred()) return NULL;
  plain_ops = ops;
  PyArray_Descr *bfloat16 = NULL;
  if (!PyArray_DescrConverter(args[3], &bfloat16)) return NULL;
  bfloat16_type = bfloat16->type_num;
  Py_DECREF(bfloat16);
  Py_XSETREF(prepare_allreduce, Py_NewRef(args[0]));
  Py_XSETREF(prepared_requests, Py_NewRef(args[1]));
  Py_XSETREF(require_init, Py_NewRef(args[2]));
  Py_XSETREF(resolve_op, Py_NewRef(args[4]));
  Py_XSETREF(average_op, Py_NewRef(args[6]));
  Py_RETURN_NONE;
}

#define FASTCALL(function) (PyCFunction)(void (*)(void))(function), METH_FASTCALL

#define ALLREDUCE_SIGNATURE \
  "(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, " \
  "process_set=None)\n--\n\n"
#define KEYWORDS(function) (PyCFunction)(void (*)(void))(function), METH_FASTCALL | METH_KEYWORDS

static PyObject *output_arena_bytes(PyObject *module, PyObject *unused) {
  return PyLong_FromSize_t(output_arena_chunk_bytes());
}

PyMethodDef array_collective_functions[] = {
    {"allreduce_async", KEYWORDS(allreduce_async_function),
     "allreduce_async" ALLREDUCE_SIGNATURE
     "Starts reducing tensor over all ranks of the process set; returns an int handle for synchronize() and\n"
     "poll(). op (Average, Sum, Min, Max, Product; default Average) wins over the deprecated average; the\n"
     "result is (prescale_factor * tensor) reduced, times postscale_factor. Ranks pair calls by name.\n"
     "process_set: a ProcessSet; None (the default) is the global process set."},
    {"allreduce", KEYWORDS(allreduce_function),
     "allreduce" ALLREDUCE_SIGNATURE
     "Reduces tensor over all ranks of the process set; returns a new array (see allreduce_async)."},
    {"allreduce_in_place_async", KEYWORDS(allreduce_in_place_async_function),
     "allreduce_in_place_async(result, tensor, average=None, name=None, op=None, prescale_factor=1.0,\n"
     "                         postscale_factor=1.0, process_set=None)\n--\n\n"
     "allreduce_async into tensor itself (a C-contiguous array of at least one dimension); synchronize()\n"
     "returns result, the object that owns the array's memory (a framework tensor viewed as the array)."},
    {"point_arrays", FASTCALL(point_arrays),
     "point_arrays(requests_address, count, arrays, op, prescale, postscale, process_set, kept) -> outputs or None"},
    {"output_arena_bytes", output_arena_bytes, METH_NOARGS,
     "output_arena_bytes() -> bytes mapped for recycled outputs' chunks (output_arena.h)"},
    {"configure_arrays", FASTCALL(configure_arrays),
     "configure_arrays(prepare, prepared_requests, require_init, bfloat16_dtype, resolve_op, reduce_ops, average)"},
    {NULL, NULL, 0, NULL}};

int array_collectives_constants(PyObject *module) {
  /* How many output slots each prepared request (and group member) keeps: see recycled_output. */
  return PyModule_AddIntConstant(module, "KEPT_OUTPUTS", KEPT_OUTPUTS);
}

int array_collectives_ready(void) {
  if (_import_array() < 0) return -1;
  arena_capsule = PyCapsule_New(&arena_handler, "mem_handler", NULL);
  if (arena_capsule == NULL) return -1;
  name_attribute = PyUnicode_InternFromString("name");
  if (name_attribute == NULL) return -1;
  float_one = PyFloat_FromDouble(1.0);
  if (float_one == NULL) return -1;
  for (int i = 0; i < 7; ++i) {
    allreduce_keywords[i] = PyUnicode_InternFromString(allreduce_parameters[i]);
    if (allreduce_keywords[i] == NULL) return -1;
  }
  return 0;
}
