/* What the files of hvdlite._hotpath share: the handle type and the calls that make, wait for and release
 * handles (hotpath.c), used by the others (the NumPy collectives, their per-name entries and int handles, the
 * Request and PreparedRequest paths). Internal to the extension. */
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "hvdlite.h"

#define ERROR_BYTES 4096
#define RELEASED (-1)
#define HOTPATH_INTERNAL __attribute__((visibility("hidden")))

typedef struct {
  PyObject_HEAD
  hvdlite_handle id;   /* RELEASED once given back to the core */
  PyObject *keepalive; /* what holds the memory the core reads and writes until release */
  PyObject *name;      /* the request's name, for error messages */
} CoreHandle;

HOTPATH_INTERNAL extern PyTypeObject CoreHandleType;
HOTPATH_INTERNAL extern PyObject *hvdlite_error; /* hvdlite.errors.HvdliteError */

/* The base of requests.PreparedRequest, whose submit and run are C methods (prepared_request.c). */
HOTPATH_INTERNAL extern PyTypeObject PreparedRequestBaseType;
/* The filled C request of a PreparedRequest, or NULL with an error naming where (TypeError for another object,
 * ValueError for one never filled). */
HOTPATH_INTERNAL const hvdlite_request *prepared_request_of(PyObject *prepared, const char *where);

/* Handle.wait(): 0 once the request succeeded (without the GIL while it is pending), or -1 with its
 * HvdliteError (or the already-released one) raised. */
HOTPATH_INTERNAL int wait_one(CoreHandle *handle);
HOTPATH_INTERNAL void release_one(CoreHandle *handle);
/* Handle.finish(): wait_one, then release_one whatever happened; a handle that has finished well (the second and
 * later handles of a fused step) is released under one lock of the core's handle table instead of two. 0, or -1
 * with wait_one's error raised. */
HOTPATH_INTERNAL int finish_one(CoreHandle *handle);
/* After the core has released the handle's id: marks it released and drops the memory it kept alive. */
HOTPATH_INTERNAL void forget_released(CoreHandle *handle);
/* Enqueues a filled request; its Handle, or the core's refusal as ValueError (-1, -2) or HvdliteError (-3). */
HOTPATH_INTERNAL PyObject *enqueue(const hvdlite_request *request, PyObject *keepalive, PyObject *name);
/* Enqueues a filled request without a Handle: its core handle id (> 0), or -1 with the refusal raised as enqueue
 * raises it. The caller keeps what the core reads and writes alive until it has finished the id. */
HOTPATH_INTERNAL hvdlite_handle enqueue_id(const hvdlite_request *request);
/* Waits for a core handle id (without the GIL while it is pending), then releases it whatever happened: 0, or
 * -1 with its HvdliteError raised (name says which request). */
HOTPATH_INTERNAL int finish_id(hvdlite_handle id, PyObject *name);
/* Submits a filled request and waits for it (without the GIL); the finished Handle, or raises (releasing it)
 * when the collective failed or the core refused it. */
HOTPATH_INTERNAL PyObject *run_filled(const hvdlite_request *request, PyObject *keepalive, PyObject *name);
/* hvdlite_run without the GIL, then the handle released: 0 done, 1 failed (the error raised), -1 refused
 * (raised). For callers that need only the outputs (the numpy all-reduce). */
HOTPATH_INTERNAL int run_and_release(const hvdlite_request *request, PyObject *name);

/* A copy of the prepared request (not NULL) pointed at input and output (integer addresses, None, or contiguous
 * buffers); 0, or -1 with a Python error set (naming the tensor and which buffer). */
HOTPATH_INTERNAL int with_buffers(const hvdlite_request *prepared, PyObject *input, PyObject *output, PyObject *name,
                                  hvdlite_request *request);
/* 0 when nargs is expected, else -1 with a TypeError naming function. */
HOTPATH_INTERNAL int check_arguments(const char *function, Py_ssize_t nargs, Py_ssize_t expected);

/* array_collectives.c: its module functions, and its set-up at import (0, or -1 with an error set). */
HOTPATH_INTERNAL extern PyMethodDef array_collective_functions[];
HOTPATH_INTERNAL int array_collectives_ready(void);
HOTPATH_INTERNAL int array_collectives_constants(PyObject *module); /* 0, or -1 with an error set */
/* Handle.output_buffer(): the core-allocated output of a finished handle as a uint8 array viewing core memory
 * (the array keeps the handle; the memory stays valid until the handle is released). */
HOTPATH_INTERNAL PyObject *core_output_array(CoreHandle *handle);
/* A ProcessSet's process_set_id, or -1 with no error set when it has none (not added to hvdlite yet). */
HOTPATH_INTERNAL int process_set_id_of(PyObject *process_set);
/* A C-contiguous, writeable array of dims viewing data, of the core's dtype, that keeps base alive (a new
 * reference), or NULL with an error set. */
HOTPATH_INTERNAL PyObject *array_viewing(void *data, int ndim, const int64_t *dims, int dtype, PyObject *base);
/* 1 when object is a NumPy array (*bfloat16 then says whether of ml_dtypes' bfloat16), else 0. */
HOTPATH_INTERNAL int is_array(PyObject *object, int *bfloat16);
/* hvd.allreduce_async (wait 0) / allreduce (wait 1) with Horovod's arguments as given (vectorcall: nargs
 * positional, then the values of kwnames); function names the caller in errors; in_place_result, when given,
 * reduces into the tensor argument itself and is what synchronize returns. */
HOTPATH_INTERNAL PyObject *allreduce_call(const char *function, PyObject *const *args, Py_ssize_t nargs,
                                          PyObject *kwnames, int wait, PyObject *in_place_result);

/* int_handles.c: the int handles of the NumPy API (track, synchronize, poll). submit_tracked enqueues a filled
 * request and files it under a new int handle, which it returns (or NULL with an error): synchronize then
 * returns result, and keepalive and name are held until then. */
HOTPATH_INTERNAL extern PyMethodDef int_handle_functions[];
HOTPATH_INTERNAL PyObject *submit_tracked(const hvdlite_request *request, PyObject *keepalive, PyObject *name,
                                          PyObject *result);
/* hvd.synchronize(handle_id) (a new reference), or NULL with its error; *unknown says whether that error is
 * the handle being unknown (never returned, or synchronized already). */
HOTPATH_INTERNAL PyObject *synchronize_int_handle(PyObject *key, int *unknown);

/* torch_tensors.c: hvdlite.torch's allreduce_async, allreduce_async_ and synchronize in C (TorchCall), and
 * configure_torch. */
HOTPATH_INTERNAL extern PyMethodDef torch_tensor_functions[];
HOTPATH_INTERNAL extern PyTypeObject TorchCallType;

/* named_allreduce.c: one name's prepared all-reduce, as the NumPy API caches it (see there). */
#define KEPT_OUTPUTS 2 /* output arrays kept for recycling per request (array_collectives.c, recycled_output) */
#define INLINE_DIMS 8  /* dims held in the entry itself; more stay in the PreparedRequest's memory */
typedef struct NamedAllreduce {
  PyObject_HEAD
  hvdlite_request request;          /* a copy of the PreparedRequest's C request; shape points at dims if it fits */
  PyObject *outputs[KEPT_OUTPUTS];  /* the last outputs, most recent first, or None */
  PyObject *prepared;               /* the PreparedRequest: the core's token and the memory request points to */
  /* The call order (array_collectives.c): the name called after this one last time, and its entry (borrowed, good
   * while named_allreduce_generation is next_generation). */
  PyObject *next_name;
  struct NamedAllreduce *next_entry;
  uint64_t next_generation;
  int64_t dims[INLINE_DIMS];
} NamedAllreduce;
HOTPATH_INTERNAL extern PyTypeObject NamedAllreduceType;
/* Bumped whenever a NamedAllreduce dies (and whenever the NumPy API's table of them may have changed): what
 * array_collectives.c remembers of the call order holds them by borrowed reference, valid while it is unchanged. */
HOTPATH_INTERNAL extern uint64_t named_allreduce_generation;

/* request_objects.c: submit_request (a requests.Request filled in C) and its set-up at import. */
HOTPATH_INTERNAL extern PyMethodDef request_object_functions[];
HOTPATH_INTERNAL int request_objects_ready(void);
