/* The bottom layer of hvdlite._tensor_calls: the Handle type and the calls that enqueue, run, wait for and
 * release requests in the core (core_handles.c). Every other part of the extension builds on it; it depends on
 * nothing of theirs. Internal to the extension. */
#pragma once
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "hvdlite.h"

#define ERROR_BYTES 4096
#define RELEASED (-1)
#define EXTENSION_INTERNAL __attribute__((visibility("hidden")))

typedef struct {
  PyObject_HEAD
  hvdlite_handle id;   /* RELEASED once given back to the core */
  PyObject *keepalive; /* what holds the memory the core reads and writes until release */
  PyObject *name;      /* the request's name, for error messages */
} CoreHandle;

EXTENSION_INTERNAL extern PyTypeObject CoreHandleType;
EXTENSION_INTERNAL extern PyObject *hvdlite_error; /* hvdlite.errors.HvdliteError */

/* Handle.wait(): 0 once the request succeeded (without the GIL while it is pending), or -1 with its
 * HvdliteError (or the already-released one) raised. */
EXTENSION_INTERNAL int wait_one(CoreHandle *handle);
EXTENSION_INTERNAL void release_one(CoreHandle *handle);
/* Handle.finish(): wait_one, then release_one whatever happened; a handle that has finished well (the second and
 * later handles of a fused step) is released under one lock of the core's handle table instead of two. 0, or -1
 * with wait_one's error raised. */
EXTENSION_INTERNAL int finish_one(CoreHandle *handle);
/* Enqueues a filled request; its Handle, or the core's refusal as ValueError (-1, -2) or HvdliteError (-3). */
EXTENSION_INTERNAL PyObject *enqueue(const hvdlite_request *request, PyObject *keepalive, PyObject *name);
/* Submits a filled request and waits for it (without the GIL); the finished Handle, or raises (releasing it)
 * when the collective failed or the core refused it. */
EXTENSION_INTERNAL PyObject *submit_and_wait_filled(const hvdlite_request *request, PyObject *keepalive, PyObject *name);
/* hvdlite_enqueue_and_wait without the GIL, then the handle released: 0 done, 1 failed (the error raised), -1 refused
 * (raised). For callers that need only the outputs (the numpy all-reduce). */
EXTENSION_INTERNAL int run_and_release(const hvdlite_request *request, PyObject *name);

/* A copy of the prepared request (not NULL) pointed at input and output (integer addresses, None, or contiguous
 * buffers); 0, or -1 with a Python error set (naming the tensor and which buffer). */
EXTENSION_INTERNAL int with_buffers(const hvdlite_request *prepared, PyObject *input, PyObject *output,
                                    PyObject *name, hvdlite_request *request);
/* 0 when nargs is expected, else -1 with a TypeError naming function. */
EXTENSION_INTERNAL int check_arguments(const char *function, Py_ssize_t nargs, Py_ssize_t expected);

/* The module functions of this layer (enqueue, wait_all, release_all, point_group, ...), and its set-up at
 * import: 0, or -1 with an error set. */
EXTENSION_INTERNAL extern PyMethodDef core_handle_functions[];
EXTENSION_INTERNAL int core_handles_ready(void);
