/* hvdlite._tensor_calls, int handles: the integers the NumPy (and torch) API's async collectives return, and
 * synchronize / poll on them (int_handles.c). Built on core_handles.h. Internal to the extension. */
#pragma once
#include "core_handles.h"

/* Enqueues a filled request and files its Handle under a new int handle, which it returns (or NULL with an
 * error): synchronize then returns result. keepalive and name are held by the Handle until then. */
EXTENSION_INTERNAL PyObject *submit_tracked(const hvdlite_request *request, PyObject *keepalive, PyObject *name,
                                            PyObject *result);

/* track, synchronize, poll and pending_handles. */
EXTENSION_INTERNAL extern PyMethodDef int_handle_functions[];
