/* hvdlite._tensor_calls, requests: PreparedRequest's C base (prepared_request.c) and one-off Requests filled in C
 * (request_objects.c). Built on core_handles.h. Internal to the extension. */
#pragma once
#include "core_handles.h"

/* The base of requests.PreparedRequest, whose submit and run are C methods. */
EXTENSION_INTERNAL extern PyTypeObject PreparedRequestBaseType;
/* The filled C request of a PreparedRequest, or NULL with an error naming where (TypeError for another object,
 * ValueError for one never filled). */
EXTENSION_INTERNAL const hvdlite_request *prepared_request_of(PyObject *prepared, const char *where);

/* process_sets.global_process_set, once requests.py has configured this module (configure_requests). */
EXTENSION_INTERNAL extern PyObject *global_process_set;
/* A ProcessSet's process_set_id, or -1 with no error set when it has none (not added to hvdlite yet). */
EXTENSION_INTERNAL int process_set_id_of(PyObject *process_set);

/* submit_request, submit_and_wait_request and configure_requests, and their set-up at import (0, or -1 with an error set). */
EXTENSION_INTERNAL extern PyMethodDef request_object_functions[];
EXTENSION_INTERNAL int request_objects_ready(void);
