/* hvdlite._tensor_calls, NumPy part: the per-tensor work of hvd.allreduce_async / allreduce and of
 * grouped_allreduce_async on NumPy arrays, in C (synchronize and poll: int_handles.c).
 *
 * Each all-reduce name keeps one prepared request (filled once, see prepared_request.c) as a NamedAllreduce
 * (named_allreduce.c) in named_allreduces. When an array matches its name's request (same dtype, shape, op, scale
 * factors, process set; C-contiguous, native byte order), the call is a dictionary lookup, an output array
 * (recycled, see recycled_output) and one enqueue. Anything else (a new name, another shape, no name, a list, a 0-d
 * or strided array) is made contiguous, checked and prepared here too (prepare_allreduce), raising what is wrong.
 * Horovod's argument rules (resolve_op) and the "not initialized" error (require_init) live here as well, and
 * hvdlite/ops.py and basics.py use these: no Python runs per tensor, and nothing is lent to C from Python.
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

/* name -> its NamedAllreduce. Bounded (emptied when full): each also holds the core's entry for its name, so the
 * bound is the core's default response cache capacity, beyond which names are negotiated the slow way anyway. */
static PyObject *named_allreduces;
#define NAMED_ALLREDUCES_LIMIT 1024
/* The reduce ops of enum hvdlite_reduce_op, as bits: an op given as a plain int is checked with a bit test. */
static const uint64_t plain_ops = 1ULL << HVDLITE_OP_AVERAGE | 1ULL << HVDLITE_OP_SUM | 1ULL << HVDLITE_OP_ADASUM |
                                  1ULL << HVDLITE_OP_MIN | 1ULL << HVDLITE_OP_MAX | 1ULL << HVDLITE_OP_PRODUCT;
static PyObject *average_op; /* HVDLITE_OP_AVERAGE as an int: the op when neither op nor average is given */
static PyObject *allreduce_kind; /* "allreduce": auto_name's kind for unnamed all-reduces */
static int bfloat16_type = -1; /* ml_dtypes.bfloat16's NumPy type number */

/* Raises hvdlite's "not initialized" ValueError and returns -1 unless the core runs (0). */
static int require_running(void) {
  if (hvdlite_is_initialized()) return 0;
  PyErr_SetString(PyExc_ValueError, "hvdlite has not been initialized; use hvd.init().");
  return -1;
}

/* Horovod's rule for (op, average): op wins, and is checked; the deprecated average maps True/False to
 * Average/Sum (with a DeprecationWarning stacklevel frames up); neither: Average. The op (new reference), or NULL
 * with ValueError for both given or an op the core does not have. */
static PyObject *resolve(PyObject *op, PyObject *average, int stacklevel) {
  if (op != Py_None) {
    if (average != Py_None) {
      PyErr_SetString(PyExc_ValueError, "The op parameter supersedes average. Please provide only one of them.");
      return NULL;
    }
    PyObject *index = PyNumber_Index(op);
    const long value = index != NULL ? PyLong_AsLong(index) : -1;
    Py_XDECREF(index);
    PyErr_Clear();
    if (value >= 0 && value < 64 && (plain_ops >> value & 1)) return PyLong_FromLong(value);
    return PyErr_Format(PyExc_ValueError, "unknown reduce op %R", op);
  }
  if (average == Py_None) return Py_NewRef(average_op);
  if (PyErr_WarnEx(PyExc_DeprecationWarning, "Parameter `average` has been replaced with `op` and will be removed in v1.0",
                   stacklevel) != 0) {
    return NULL;
  }
  const int truth = PyObject_IsTrue(average);
  return truth < 0 ? NULL : PyLong_FromLong(truth ? HVDLITE_OP_AVERAGE : HVDLITE_OP_SUM);
}

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
  PyObject *found = PyDict_GetItemWithError(named_allreduces, name);
  if (found == NULL) return NULL;
  if (!Py_IS_TYPE(found, &NamedAllreduceType)) {
    PyErr_Format(PyExc_TypeError, "the prepared all-reduce of '%U' must be a NamedAllreduce", name);
    return NULL;
  }
  NamedAllreduce *entry = (NamedAllreduce *)found;
  return matches(tensor, &entry->request, signature) ? (NamedAllreduce *)Py_NewRef(entry) : NULL;
}

/* The array the core reads for tensor: C-contiguous, native byte order, at least one dimension (the tensor itself
 * where it is one, else a copy); NULL with an error set. */
static PyObject *contiguous(PyObject *tensor) {
  PyObject *array = PyArray_FromAny(tensor, NULL, 0, 0, NPY_ARRAY_C_CONTIGUOUS, NULL);
  if (array != NULL && !PyArray_ISNOTSWAPPED((PyArrayObject *)array)) {  /* the core reads native numbers */
    PyArray_Descr *native = PyArray_DescrNewByteorder(PyArray_DESCR((PyArrayObject *)array), NPY_NATIVE);
    Py_SETREF(array, native != NULL ? PyArray_CastToType((PyArrayObject *)array, native, 0) : NULL);
  }
  if (array != NULL && PyArray_NDIM((PyArrayObject *)array) == 0) {
    Py_SETREF(array, PyArray_Ravel((PyArrayObject *)array, NPY_CORDER));
  }
  return array;
}

/* The signature of a call whose arguments (op resolved) cannot all be what a request holds; -1 with the error
 * naming the tensor. */
static int checked_signature(PyObject *const *args, PyObject *name, Signature *signature) {
  signature->process_set_id = process_set_id_of(args[3]);
  if (signature->process_set_id < 0) return raise_set_not_added(name);
  signature->op = (int)PyLong_AsLong(args[0]);
  signature->prescale_factor = PyFloat_AsDouble(args[1]);
  signature->postscale_factor = PyFloat_AsDouble(args[2]);
  if (!PyErr_Occurred()) return 0;
  PyErr_Clear();
  PyErr_Format(PyExc_TypeError, "tensor '%S': op must be an int and the scale factors numbers, got %R, %R, %R",
               name, args[0], args[1], args[2]);
  return -1;
}

/* For a call with no matching request (args as allreduce_array's): the array to read (new reference in *array) and
 * a new PreparedRequest for it (*prepared), kept by name as a NamedAllreduce (a new reference in *entry, else NULL)
 * for a named call. Returns the request to send, or NULL with an error naming the tensor. */
static const hvdlite_request *prepare_allreduce(PyObject *const *args, PyObject **array, NamedAllreduce **entry,
                                                PyObject **prepared) {
  *array = contiguous(args[0]);
  if (*array == NULL) return NULL;
  PyArrayObject *contiguous_array = (PyArrayObject *)*array;
  PyObject *name = is_given_name(args[1]) ? Py_NewRef(args[1]) : auto_name(allreduce_kind, args[5]);
  if (name == NULL) return NULL;
  Signature signature = {0};  /* filled by checked_signature, which gcc cannot see through */
  hvdlite_request request = {0};
  int64_t dims[NPY_MAXDIMS];
  request.dtype = core_dtype(contiguous_array);
  if (request.dtype < 0) {
    PyObject *dtype_name = PyObject_GetAttrString((PyObject *)PyArray_DESCR(contiguous_array), "name");
    if (dtype_name != NULL) raise_unsupported_dtype(dtype_name, name);
    Py_XDECREF(dtype_name);
  } else if (checked_signature(args + 2, name, &signature) == 0) {
    request.collective = HVDLITE_ALLREDUCE;
    request.name = "";
    request.ndim = PyArray_NDIM(contiguous_array);
    for (int i = 0; i < request.ndim; ++i) dims[i] = PyArray_DIMS(contiguous_array)[i];
    request.shape = dims;
    request.reduce_op = signature.op;
    request.prescale_factor = signature.prescale_factor;
    request.postscale_factor = signature.postscale_factor;
    request.process_set_id = signature.process_set_id;
    *prepared = new_prepared_request(&request, name);
  }
  if (*prepared != NULL && is_given_name(args[1])) {  /* replaces a request of another dtype or shape */
    *entry = (NamedAllreduce *)PyObject_CallOneArg((PyObject *)&NamedAllreduceType, *prepared);
    if (*entry != NULL && PyDict_GET_SIZE(named_allreduces) >= NAMED_ALLREDUCES_LIMIT &&
        !PyDict_Contains(named_allreduces, name)) {
      PyDict_Clear(named_allreduces);
    }
    if (*entry != NULL && PyDict_SetItem(named_allreduces, name, (PyObject *)*entry) != 0) Py_CLEAR(*entry);
  }
  Py_DECREF(name);
  if (*prepared == NULL || (is_given_name(args[1]) && *entry == NULL)) return NULL;
  return *entry ? &(*entry)->request : prepared_request_of(*prepared, "allreduce");
}

/* The all-reduce of one array into a new (or recycled) array of its shape, or into the array itself when
 * in_place_result is given (what synchronize then returns in place of the array: the framework tensor that owns
 * its memory); args are (tensor, name, op, prescale_factor, postscale_factor, process_set), op resolved. wait
 * false: enqueued, returns its int handle (see int_handles.c); true: returns the result. */
static PyObject *allreduce_array(PyObject *const *args, int wait, PyObject *in_place_result) {
  if (require_running() != 0) return NULL;
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
    request = prepare_allreduce(args, &array, &entry, &prepared);
  }
  PyObject *name = request == NULL          ? NULL
                   : is_given_name(args[1]) ? Py_NewRef(args[1])
                                            : Py_NewRef(((PreparedRequest *)prepared)->parts.name);
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
 * positional, then the values of kwnames): the arguments bound and the op resolved (resolve only for what
 * is not a plain op), then allreduce_array. No Python frame runs per tensor on the common path. function names the
 * caller in errors; in_place_result, when given, reduces into the tensor argument itself and is what synchronize
 * returns. */
static PyObject *allreduce_call(const char *function, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, int wait,
                         PyObject *in_place_result) {
  PyObject *bound[7];
  if (bind_allreduce_arguments(function, args, nargs, kwnames, bound) != 0) return NULL;
  PyObject *average = bound[1] ? bound[1] : Py_None, *op = bound[3] ? bound[3] : Py_None;
  PyObject *resolved = NULL;
  if (average == Py_None && op == Py_None) {
    op = average_op;
  } else {
    const long value = average == Py_None && PyLong_CheckExact(op) ? PyLong_AsLong(op) : -1;
    if (value == -1) PyErr_Clear();  /* not a plain int: resolve decides, and says what is wrong */
    if (!(value >= 0 && value < 64 && (plain_ops >> value & 1))) {
      resolved = resolve(op, average, 1);
      if (resolved == NULL) return NULL;
      op = resolved;
    }
  }
  PyObject *process_set = bound[6] ? bound[6] : Py_None; /* None: the global set */
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

/* point_arrays(group, arrays, op, prescale_factor, postscale_factor, process_set): points the members of a
 * PreparedGroup of all-reduces at the arrays (one each) and at output arrays of their shapes, recycled from the
 * group's kept outputs (KEPT_OUTPUTS per member, see recycled_output); returns the outputs, or None (nothing
 * pointed that matters) when an array does not match its request. */
static PyObject *point_arrays(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (check_arguments("point_arrays", nargs, 6) != 0) return NULL;
  if (!Py_IS_TYPE(args[0], &PreparedGroupType)) {
    return PyErr_Format(PyExc_TypeError, "point_arrays: expected a PreparedGroup, got %T", args[0]);
  }
  PreparedGroup *group = (PreparedGroup *)args[0];
  const Py_ssize_t count = group->count;
  if (group->kept == NULL) {
    group->kept = PyList_New(count * KEPT_OUTPUTS);
    if (group->kept == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count * KEPT_OUTPUTS; ++i) PyList_SET_ITEM(group->kept, i, Py_NewRef(Py_None));
  }
  Signature signature;
  if (group->requests == NULL || !signature_of(args + 2, &signature)) Py_RETURN_NONE;
  PyObject *arrays = PySequence_Fast(args[1], "point_arrays: arrays must be a sequence");
  if (arrays == NULL) return NULL;
  PyObject *outputs = NULL;
  if (PySequence_Fast_GET_SIZE(arrays) == count) outputs = PyList_New(count);
  for (Py_ssize_t i = 0; outputs != NULL && i < count; ++i) {
    PyObject *array = PySequence_Fast_GET_ITEM(arrays, i);
    if (!matches(array, &group->requests[i], &signature)) {
      Py_CLEAR(outputs);
      break;
    }
    PyObject *output = recycled_output(&PyList_GET_ITEM(group->kept, i * KEPT_OUTPUTS), (PyArrayObject *)array);
    if (output == NULL) {
      Py_CLEAR(outputs);
      Py_DECREF(arrays);
      return NULL;
    }
    PyList_SET_ITEM(outputs, i, output);
    group->requests[i].input = PyArray_DATA((PyArrayObject *)array);
    group->requests[i].output = PyArray_DATA((PyArrayObject *)output);
  }
  Py_DECREF(arrays);
  if (outputs == NULL && PyErr_Occurred()) return NULL;
  return outputs != NULL ? outputs : Py_NewRef(Py_None);
}

/* resolve_op(op, average, stacklevel=1): Horovod's rule (see resolve); the deprecation warning stacklevel frames up. */
static PyObject *resolve_op_function(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs < 2 || nargs > 3) return PyErr_Format(PyExc_TypeError, "resolve_op(op, average, stacklevel=1)");
  const long stacklevel = nargs == 3 ? PyLong_AsLong(args[2]) : 1;
  if (stacklevel == -1 && PyErr_Occurred()) return NULL;
  return resolve(args[0], args[1], (int)stacklevel);
}

static PyObject *contiguous_function(PyObject *module, PyObject *tensor) { return contiguous(tensor); }

static PyObject *require_init_function(PyObject *module, PyObject *unused) {
  if (require_running() != 0) return NULL;
  Py_RETURN_NONE;
}

static PyObject *is_initialized_function(PyObject *module, PyObject *unused) {
  return PyBool_FromLong(hvdlite_is_initialized());
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
     "point_arrays(group, arrays, op, prescale_factor, postscale_factor, process_set) -> outputs or None"},
    {"resolve_op", FASTCALL(resolve_op_function),
     "resolve_op(op, average, stacklevel=1) -> the reduce op: op wins (checked); the deprecated average maps\n"
     "True/False to Average/Sum; neither: Average. ValueError for both, or an unknown op."},
    {"contiguous", contiguous_function, METH_O,
     "contiguous(tensor) -> the array the core reads for it: C-contiguous, native byte order, at least one dimension\n"
     "(the tensor itself where it is one, else a copy)."},
    {"require_init", require_init_function, METH_NOARGS,
     "require_init(): raises ValueError unless hvdlite has been initialized."},
    {"is_initialized", is_initialized_function, METH_NOARGS,
     "is_initialized() -> True while the core runs (between hvd.init() and shutdown)."},
    {"output_arena_bytes", output_arena_bytes, METH_NOARGS,
     "output_arena_bytes() -> bytes mapped for recycled outputs' chunks (output_arena.h)"},
    {NULL, NULL, 0, NULL}};

int array_collectives_constants(PyObject *module) {
  /* How many output slots each prepared request (and group member) keeps: see recycled_output. */
  if (PyModule_AddIntConstant(module, "KEPT_OUTPUTS", KEPT_OUTPUTS) != 0) return -1;
  return PyModule_AddObjectRef(module, "named_allreduces", named_allreduces);
}

int array_collectives_ready(void) {
  if (_import_array() < 0) return -1;
  arena_capsule = PyCapsule_New(&arena_handler, "mem_handler", NULL);
  if (arena_capsule == NULL) return -1;
  PyObject *ml_dtypes = PyImport_ImportModule("ml_dtypes");
  PyObject *bfloat16 = ml_dtypes != NULL ? PyObject_GetAttrString(ml_dtypes, "bfloat16") : NULL;
  Py_XDECREF(ml_dtypes);
  PyArray_Descr *descr = NULL;
  const int converted = bfloat16 != NULL && PyArray_DescrConverter(bfloat16, &descr);
  Py_XDECREF(bfloat16);
  if (!converted) return -1;
  bfloat16_type = descr->type_num;
  Py_DECREF(descr);
  named_allreduces = PyDict_New();
  average_op = PyLong_FromLong(HVDLITE_OP_AVERAGE);
  allreduce_kind = PyUnicode_InternFromString("allreduce");
  if (named_allreduces == NULL || average_op == NULL || allreduce_kind == NULL) return -1;
  float_one = PyFloat_FromDouble(1.0);
  if (float_one == NULL) return -1;
  for (int i = 0; i < 7; ++i) {
    allreduce_keywords[i] = PyUnicode_InternFromString(allreduce_parameters[i]);
    if (allreduce_keywords[i] == NULL) return -1;
  }
  return 0;
}
