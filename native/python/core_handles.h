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
/* Enqueues a filled request; its Handle, or the core's refusal as InvalidRequestError (-1, -2) or HvdliteError (-3). */
EXTENSION_INTERNAL PyObject *enqueue(const hvdlite_request *request, PyObject *keepalive, PyObject *name);
/* Submits a filled request and waits for it (without the GIL); the finished Handle, or raises (releasing it)
 * when the collective failed or the core refused it. */
EXTENSION_INTERNAL PyObject *submit_and_wait_filled(const hvdlite_request *request, PyObject *keepalive, PyObject *name);
/* hvdlite_enqueue_and_wait without the GIL, then the handle released: 0 done, 1 failed (the error raised), -1 refused
 * (raised). For callers that need only the outputs (the numpy all-reduce). */
EXTENSION_INTERNAL int run_and_release(const hvdlite_request *request, PyObject *name);

/* A copy of the prepared request (not NULL; request may be prepared itself, pointed in place) pointed at input and
 * output (integer addresses, None, or contiguous buffers); 0, or -1 with a Python error set (naming the tensor and
 * which buffer). */
EXTENSION_INTERNAL int with_buffers(const hvdlite_request *prepared, PyObject *input, PyObject *output,
                                    PyObject *name, hvdlite_request *request);
/* The address a request field takes from value (an int address, None for NULL, or a contiguous buffer, writable
 * where asked); NULL with an error naming the tensor and which buffer (input, output) when it cannot be used
 * (check PyErr_Occurred: None is NULL too). */
EXTENSION_INTERNAL void *buffer_address(PyObject *value, int writable, const char *which, PyObject *name);
/* A new Handle standing for the core's request id, keeping keepalive until release. */
EXTENSION_INTERNAL PyObject *handle_for(hvdlite_handle id, PyObject *keepalive, PyObject *name);
/* Raises the core's refusal of an enqueue (code -3: HvdliteError, else InvalidRequestError, a ValueError) with its
 * message; NULL. */
EXTENSION_INTERNAL PyObject *raise_refusal(int code, const char *error);
/* Raises the failed request's HvdliteError (its message from the core, or one naming it); NULL. */
EXTENSION_INTERNAL PyObject *raise_handle_error(hvdlite_handle id, PyObject *name);
/* hvdlite_wait_all, without the GIL only while something is pending. */
EXTENSION_INTERNAL int wait_for(const hvdlite_handle *ids, int32_t count);
/* Keeps keepalive until the core's request id is done, then releases it (a handle dropped while pending). */
EXTENSION_INTERNAL void orphan(hvdlite_handle id, PyObject *keepalive);
/* 0 when nargs is expected, else -1 with a TypeError naming function. */
EXTENSION_INTERNAL int check_arguments(const char *function, Py_ssize_t nargs, Py_ssize_t expected);

/* The module functions of this layer (wait_all, release_all, raise_handle_error, orphans), and its set-up at
 * import: 0, or -1 with an error set. */
EXTENSION_INTERNAL extern PyMethodDef core_handle_functions[];
EXTENSION_INTERNAL int core_handles_ready(void);
