/* hvdlite._tensor_calls, requests: the one fill of a requests.Request into the core's hvdlite_request
 * (request_fill.c), one-off submissions (request_objects.c), and the requests filled once and submitted again and
 * again: PreparedRequest (prepared_request.c), PreparedGroup and the GroupHandle it returns (prepared_group.c).
 * Built on core_handles.h. Internal to the extension. */
#pragma once
#include "core_handles.h"

/* What a filled hvdlite_request points to besides the caller's buffers: its name (a str holding the UTF-8 the
 * request points at), its dims and its splits (PyMem, or NULL). Lives as long as the request is used. */
typedef struct {
  PyObject *name;
  int64_t *dims;
  int32_t *splits;
} RequestParts;

/* Fills c from a requests.Request (parts keeps what c points to); 0, or -1 with a TypeError or ValueError naming
 * the tensor and what is wrong (dtype, shape, a process set not added, splits, a buffer, a field of another type). */
EXTENSION_INTERNAL int fill_request(PyObject *request, hvdlite_request *c, RequestParts *parts);
/* A copy of a filled request without splits, under name, into c and parts; 0, or -1 with an error set. */
EXTENSION_INTERNAL int copy_request(const hvdlite_request *source, PyObject *name, hvdlite_request *c,
                                    RequestParts *parts);
EXTENSION_INTERNAL void release_parts(RequestParts *parts);
/* TypeError: the core does not carry this dtype (a name), naming the tensor and the dtypes it carries; NULL. */
EXTENSION_INTERNAL PyObject *raise_unsupported_dtype(PyObject *dtype_name, PyObject *name);
/* The Request's keepalive (new reference), or NULL with an error set. */
EXTENSION_INTERNAL PyObject *keepalive_of(PyObject *request);
/* A ProcessSet's process_set_id (None: the global set, 0), or -1 with no error set when it has none (not added). */
EXTENSION_INTERNAL int process_set_id_of(PyObject *process_set);
/* ValueError: the tensor's process set was never added (hvd.add_process_set); returns -1. */
EXTENSION_INTERNAL int raise_set_not_added(PyObject *name);
/* A name for an unnamed tensor of this kind (a str) in this process set (or None): see request_fill.c. */
EXTENSION_INTERNAL PyObject *auto_name(PyObject *kind, PyObject *process_set);

/* requests.PreparedRequest: a request filled once, registered with the core (its token), submitted with new buffers
 * each time. */
typedef struct {
  PyObject_HEAD
  hvdlite_request request; /* filled (name NULL until it is) */
  RequestParts parts;
  PyObject *keepalive;     /* the Request's keepalive */
} PreparedRequest;
EXTENSION_INTERNAL extern PyTypeObject PreparedRequestType;
/* The filled C request of a PreparedRequest, or NULL with an error naming where (TypeError for another object,
 * ValueError for one never filled). */
EXTENSION_INTERNAL const hvdlite_request *prepared_request_of(PyObject *prepared, const char *where);
/* A new PreparedRequest for a copy of a filled request (no splits) under name, or NULL with an error set. */
EXTENSION_INTERNAL PyObject *new_prepared_request(const hvdlite_request *request, PyObject *name);

/* requests.PreparedGroup: requests filled once and submitted together, again and again. */
typedef struct {
  PyObject_HEAD
  Py_ssize_t count;
  hvdlite_request *requests; /* count of them (PyMem) */
  RequestParts *parts;       /* one per request (PyMem) */
  PyObject *names;           /* tuple of the requests' names */
  PyObject *owned;           /* tuple of the Requests' keepalives: what a submit without buffers keeps alive */
  PyObject *kept;            /* the outputs array_collectives' point_arrays recycles (a list it makes; NULL before) */
} PreparedGroup;
EXTENSION_INTERNAL extern PyTypeObject PreparedGroupType;
EXTENSION_INTERNAL extern PyTypeObject GroupHandleType;

/* The module functions of this layer (submit_request, submit_and_wait_request, submit_group, auto_name) and their
 * set-up at import (0, or -1 with an error set); DTYPES as a module constant. */
EXTENSION_INTERNAL extern PyMethodDef request_object_functions[];
EXTENSION_INTERNAL extern PyMethodDef request_fill_functions[];
EXTENSION_INTERNAL int request_fill_ready(void);
EXTENSION_INTERNAL int request_fill_constants(PyObject *module);
