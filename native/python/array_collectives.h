/* hvdlite._tensor_calls, NumPy collectives: hvd.allreduce(_async) and the grouped all-reduce on NumPy arrays
 * (array_collectives.c), and what they keep per name (named_allreduce.c). Built on int_handles.h and
 * requests.h. Internal to the extension. */
#pragma once
#include "core_handles.h"

/* One name's prepared all-reduce, as the NumPy API caches it (ops._PREPARED_REQUESTS; see named_allreduce.c). */
#define KEPT_OUTPUTS 2 /* output arrays kept for recycling per request (array_collectives.c, recycled_output) */
#define INLINE_DIMS 8  /* dims held in the entry itself; more stay in the PreparedRequest's memory */
typedef struct {
  PyObject_HEAD
  hvdlite_request request;          /* a copy of the PreparedRequest's C request; shape points at dims if it fits */
  PyObject *outputs[KEPT_OUTPUTS];  /* the last outputs, most recent first, or None */
  PyObject *prepared;               /* the PreparedRequest: the core's token and the memory request points to */
  int64_t dims[INLINE_DIMS];
} NamedAllreduce;
EXTENSION_INTERNAL extern PyTypeObject NamedAllreduceType;

/* The module functions of the NumPy collectives, their set-up at import and their constants (KEPT_OUTPUTS):
 * 0, or -1 with an error set. */
EXTENSION_INTERNAL extern PyMethodDef array_collective_functions[];
EXTENSION_INTERNAL int array_collectives_ready(void);
EXTENSION_INTERNAL int array_collectives_constants(PyObject *module);
