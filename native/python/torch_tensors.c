/* hvdlite._hotpath, torch part: hvdlite.torch's allreduce_async, allreduce_async_ and synchronize in C for
 * contiguous CPU tensors, built without torch's headers (the extension compiles against no framework).
 *
 * A tensor's metadata is read through its Python attributes (is_cpu, dtype, shape, is_contiguous(), data_ptr():
 * ~0.05 us each) and its memory viewed as a NumPy array made here, whose base is the tensor; the NumPy API's
 * all-reduce (array_collectives.c) does the rest: the name's prepared request, a recycled output, or the tensor
 * itself in place. tensor.numpy() made the same view in 0.65 us, and the Python wrappers around it cost as much
 * again. Any other tensor (on a GPU, strided, 0-d or empty, of a dtype the core does not reduce) goes to the
 * function's Python twin, with the arguments as given, which stages it through host memory.
 */
#include "hotpath.h"

#include <stddef.h>
#include <string.h>

#define MAX_TORCH_DTYPES 16
#define MAX_ARGUMENTS 7 /* Horovod's all-reduce parameters */

static PyObject *tensor_type;                  /* torch.Tensor */
static PyObject *torch_dtypes[MAX_TORCH_DTYPES]; /* torch.float32, ... */
static int core_dtypes[MAX_TORCH_DTYPES];      /* the core's dtype of each */
static int dtype_count;
static PyObject *tensor_of;   /* staging.tensor_of(array): a result array as a tensor (bfloat16 included) */
static PyObject *from_numpy;  /* torch.from_numpy */
static PyObject *is_cpu_name, *dtype_name, *shape_name, *is_contiguous_name, *data_ptr_name;

/* 1 when the attribute (or method result) of tensor is True, 0 when not, -1 with an error set. */
static int is_true(PyObject *tensor, PyObject *name, int call) {
  PyObject *value = call ? PyObject_CallMethodNoArgs(tensor, name) : PyObject_GetAttr(tensor, name);
  if (value == NULL) return -1;
  const int truth = value == Py_True;
  Py_DECREF(value);
  return truth;
}

/* A NumPy array viewing the tensor's memory (a new reference) when the core can reduce it there: a torch.Tensor
 * on the CPU, C-contiguous, of at least one dimension and one element, of a dtype the core reduces. Py_None (a
 * new reference) for any other tensor; NULL with an error set when torch raised. */
static PyObject *host_view(PyObject *tensor) {
  if (tensor_type == NULL || !PyObject_TypeCheck(tensor, (PyTypeObject *)tensor_type)) Py_RETURN_NONE;
  int ok = is_true(tensor, is_cpu_name, 0);
  if (ok <= 0) return ok < 0 ? NULL : Py_NewRef(Py_None);
  PyObject *dtype = PyObject_GetAttr(tensor, dtype_name);
  if (dtype == NULL) return NULL;
  int slot = 0;
  while (slot < dtype_count && torch_dtypes[slot] != dtype) ++slot;  /* torch's dtypes are singletons */
  Py_DECREF(dtype);
  if (slot == dtype_count) Py_RETURN_NONE;
  PyObject *shape = PyObject_GetAttr(tensor, shape_name);  /* torch.Size, a tuple */
  if (shape == NULL) return NULL;
  int64_t dims[32];
  const Py_ssize_t ndim = PyTuple_Check(shape) ? PyTuple_GET_SIZE(shape) : 0;
  ok = ndim >= 1 && ndim <= 32;
  for (Py_ssize_t i = 0; ok && i < ndim; ++i) {
    dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    ok = dims[i] > 0;
  }
  Py_DECREF(shape);
  if (PyErr_Occurred()) return NULL;
  if (!ok) Py_RETURN_NONE;
  ok = is_true(tensor, is_contiguous_name, 1);
  if (ok <= 0) return ok < 0 ? NULL : Py_NewRef(Py_None);
  PyObject *address = PyObject_CallMethodNoArgs(tensor, data_ptr_name);
  if (address == NULL) return NULL;
  void *data = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  if (data == NULL) return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
  return array_viewing(data, (int)ndim, dims, core_dtypes[slot], tensor);
}

/* What a TorchCall stands for. */
enum { ALLREDUCE_ASYNC, ALLREDUCE_ASYNC_IN_PLACE, SYNCHRONIZE, CALL_KINDS };
static const char *const call_names[CALL_KINDS] = {"allreduce_async", "allreduce_async_", "synchronize"};

/* A function of hvdlite.torch, in C, that hands what it does not do itself to its Python twin: hvdlite.torch wraps
 * it with functools.update_wrapper, so it carries the twin's name, doc and signature (Horovod's defaults, which a
 * builtin's text signature cannot hold) and reaches it as __wrapped__. */
typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  int kind;
  PyObject *python; /* the twin: the same function in Python, for every case the C path leaves */
  PyObject *dict;   /* __name__, __doc__, __wrapped__, ... */
} TorchCall;

/* allreduce_async(tensor, ...) or allreduce_async_(tensor, ...) of hvdlite.torch (Horovod's signature): the NumPy
 * API's all-reduce of the tensor's view, or the Python twin (staged through host memory). */
static PyObject *torch_allreduce(TorchCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  const Py_ssize_t given = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  Py_ssize_t at = nargs >= 1 ? 0 : -1;  /* where the tensor is among args: first, or the value of tensor= */
  for (Py_ssize_t k = 0; at < 0 && k < given - nargs; ++k) {
    if (PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, k), "tensor") == 0) at = nargs + k;
  }
  PyObject *view = at >= 0 && given <= MAX_ARGUMENTS ? host_view(args[at]) : Py_NewRef(Py_None);
  if (view == NULL) return NULL;
  if (view == Py_None) {
    Py_DECREF(view);
    return PyObject_Vectorcall(self->python, args, nargsf, kwnames);
  }
  PyObject *call[MAX_ARGUMENTS];
  for (Py_ssize_t i = 0; i < given; ++i) call[i] = args[i];
  call[at] = view;
  const int in_place = self->kind == ALLREDUCE_ASYNC_IN_PLACE;
  PyObject *handle = allreduce_call(call_names[self->kind], call, nargs, kwnames, 0, in_place ? args[at] : NULL);
  Py_DECREF(view);
  return handle;
}

/* synchronize(handle) of hvdlite.torch: the int handle's result, a result array made a tensor; ValueError for a
 * handle never returned or synchronized already, the collective's error when it failed. */
static PyObject *torch_synchronize(TorchCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || kwnames != NULL) {
    return PyObject_Vectorcall(self->python, args, nargsf, kwnames);
  }
  int unknown = 0;
  PyObject *result = synchronize_int_handle(args[0], &unknown);
  if (result == NULL) {
    if (unknown && PyErr_ExceptionMatches(PyExc_KeyError)) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "unknown handle %R: it was never returned or is already synchronized",
                   args[0]);
    }
    return NULL;
  }
  int bfloat16 = 0;
  if (!is_array(result, &bfloat16)) return result;  /* the tensor itself (in place), or an operation's result */
  PyObject *tensor = PyObject_CallOneArg(bfloat16 ? tensor_of : from_numpy, result);
  Py_DECREF(result);
  return tensor;
}

static PyObject *torch_call_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
  TorchCall *self = (TorchCall *)callable;
  if (from_numpy == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "hvdlite._hotpath: configure_torch was not called (import hvdlite.torch)");
    return NULL;
  }
  return self->kind == SYNCHRONIZE ? torch_synchronize(self, args, nargsf, kwnames)
                                   : torch_allreduce(self, args, nargsf, kwnames);
}

/* TorchCall(kind, python): kind is "allreduce_async", "allreduce_async_" or "synchronize". */
static PyObject *torch_call_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  const char *kind_name;
  PyObject *python;
  if (!PyArg_ParseTuple(args, "sO:TorchCall", &kind_name, &python)) return NULL;
  int kind = 0;
  while (kind < CALL_KINDS && strcmp(kind_name, call_names[kind]) != 0) ++kind;
  if (kind == CALL_KINDS || !PyCallable_Check(python)) {
    return PyErr_Format(PyExc_ValueError, "TorchCall(kind, python): kind one of allreduce_async, allreduce_async_, "
                        "synchronize (got '%s'), python a callable", kind_name);
  }
  TorchCall *self = (TorchCall *)type->tp_alloc(type, 0);
  if (self == NULL) return NULL;
  self->vectorcall = torch_call_vectorcall;
  self->kind = kind;
  self->python = Py_NewRef(python);
  return (PyObject *)self;
}

static int torch_call_traverse(TorchCall *self, visitproc visit, void *arg) {
  Py_VISIT(self->python);
  Py_VISIT(self->dict);
  return 0;
}

static int torch_call_clear(TorchCall *self) {
  Py_CLEAR(self->python);
  Py_CLEAR(self->dict);
  return 0;
}

static void torch_call_dealloc(TorchCall *self) {
  PyObject_GC_UnTrack(self);
  torch_call_clear(self);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *torch_call_repr(TorchCall *self) {
  return PyUnicode_FromFormat("<hvdlite.torch function %s (C)>", call_names[self->kind]);
}

static PyGetSetDef torch_call_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL}, {NULL}};

PyTypeObject TorchCallType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "hvdlite._hotpath.TorchCall",
    .tp_basicsize = sizeof(TorchCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "TorchCall(kind, python): an hvdlite.torch function in C, python doing what C leaves",
    .tp_new = torch_call_new,
    .tp_dealloc = (destructor)torch_call_dealloc,
    .tp_repr = (reprfunc)torch_call_repr,
    .tp_traverse = (traverseproc)torch_call_traverse,
    .tp_clear = (inquiry)torch_call_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(TorchCall, vectorcall),
    .tp_dictoffset = offsetof(TorchCall, dict),
    .tp_getset = torch_call_getset,
};

/* configure_torch(tensor_type, core_dtypes, tensor_of, from_numpy): what hvdlite.torch lends; core_dtypes maps
 * torch dtypes to the core's dtype numbers. */
static PyObject *configure_torch(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (check_arguments("configure_torch", nargs, 4) != 0) return NULL;
  if (!PyType_Check(args[0]) || !PyDict_Check(args[1]) || PyDict_GET_SIZE(args[1]) > MAX_TORCH_DTYPES) {
    return PyErr_Format(PyExc_TypeError, "configure_torch: a type, then a dict of at most %d dtypes",
                        MAX_TORCH_DTYPES);
  }
  if (is_cpu_name == NULL) {
    is_cpu_name = PyUnicode_InternFromString("is_cpu");
    dtype_name = PyUnicode_InternFromString("dtype");
    shape_name = PyUnicode_InternFromString("shape");
    is_contiguous_name = PyUnicode_InternFromString("is_contiguous");
    data_ptr_name = PyUnicode_InternFromString("data_ptr");
    if (!is_cpu_name || !dtype_name || !shape_name || !is_contiguous_name || !data_ptr_name) return NULL;
  }
  Py_ssize_t position = 0;
  PyObject *dtype, *number;
  int count = 0;
  while (PyDict_Next(args[1], &position, &dtype, &number)) {
    const long value = PyLong_AsLong(number);
    if (value == -1 && PyErr_Occurred()) return NULL;
    Py_XSETREF(torch_dtypes[count], Py_NewRef(dtype));
    core_dtypes[count++] = (int)value;
  }
  dtype_count = count;
  Py_XSETREF(tensor_type, Py_NewRef(args[0]));
  Py_XSETREF(tensor_of, Py_NewRef(args[2]));
  Py_XSETREF(from_numpy, Py_NewRef(args[3]));
  Py_RETURN_NONE;
}

PyMethodDef torch_tensor_functions[] = {
    {"configure_torch", (PyCFunction)(void (*)(void))configure_torch, METH_FASTCALL,
     "configure_torch(tensor_type, core_dtypes, tensor_of, from_numpy)"},
    {NULL, NULL, 0, NULL}};
