/* hvdlite._tensor_calls, one-off requests: hvdlite.requests.submit, submit_and_wait and submit_group.
 *
 * The adapters' one-off collectives (torch's hvd.allreduce, broadcast, allgather, a grouped all-reduce...) build a
 * Request per call; filling its C struct through cffi, field by field, cost more than a small all-reduce. Here it is
 * filled once (request_fill.c) into a struct on the stack, enqueued, and what it pointed to is dropped: the core has
 * copied it.
 */
#include "requests.h"

/* The request filled and given to start (enqueue or submit_and_wait_filled): its Handle, or NULL with an error. */
static PyObject *start_request(PyObject *request,
                               PyObject *(*start)(const hvdlite_request *, PyObject *keepalive, PyObject *name)) {
  hvdlite_request c;
  RequestParts parts;
  PyObject *keepalive = keepalive_of(request);
  if (keepalive == NULL) return NULL;
  PyObject *handle = NULL;
  if (fill_request(request, &c, &parts) == 0) {
    handle = start(&c, keepalive, parts.name);
    release_parts(&parts);
  }
  Py_DECREF(keepalive);
  return handle;
}

/* submit_request(request) -> its Handle at once. */
static PyObject *submit_request(PyObject *module, PyObject *request) { return start_request(request, enqueue); }

/* submit_and_wait_request(request) -> its finished Handle (submitted and waited for). */
static PyObject *submit_and_wait_request(PyObject *module, PyObject *request) {
  return start_request(request, submit_and_wait_filled);
}

/* Handles for ids, one per request (each keeping its Request's keepalive), as a list; NULL with an error set. */
static PyObject *handles_of(PyObject *const *requests, const RequestParts *parts, const hvdlite_handle *ids,
                            Py_ssize_t count) {
  PyObject *handles = PyList_New(count);
  for (Py_ssize_t i = 0; handles != NULL && i < count; ++i) {
    PyObject *keepalive = keepalive_of(requests[i]);
    PyObject *handle = keepalive != NULL ? handle_for(ids[i], keepalive, parts[i].name) : NULL;
    Py_XDECREF(keepalive);
    if (handle == NULL) {
      for (Py_ssize_t j = i; j < count; ++j) orphan(ids[j], requests[j]); /* the Request holds its keepalive */
      Py_CLEAR(handles);
    } else {
      PyList_SET_ITEM(handles, i, handle);
    }
  }
  return handles;
}

/* submit_group(requests) -> their Handles: submitted in one call, run together (fused where their types allow). */
static PyObject *submit_group(PyObject *module, PyObject *sequence) {
  PyObject *fast = PySequence_Fast(sequence, "submit_group needs a sequence of Requests");
  if (fast == NULL) return NULL;
  const Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
  PyObject *const *requests = PySequence_Fast_ITEMS(fast);
  hvdlite_request *filled = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof *filled);
  RequestParts *parts = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof *parts);
  hvdlite_handle *ids = PyMem_Calloc((size_t)(count > 0 ? count : 1), sizeof *ids);
  PyObject *handles = NULL;
  Py_ssize_t done = 0;
  if (filled == NULL || parts == NULL || ids == NULL) {
    PyErr_NoMemory();
    goto finally;
  }
  for (; done < count; ++done) {
    if (fill_request(requests[done], &filled[done], &parts[done]) != 0) goto finally;
  }
  char error[ERROR_BYTES];
  error[0] = '\0';
  const int code = count > 0 ? hvdlite_enqueue_group(filled, (int32_t)count, ids, error, ERROR_BYTES) : 0;
  if (code != 0) {
    raise_refusal(code, error);
    goto finally;
  }
  handles = handles_of(requests, parts, ids, count);
finally:
  for (Py_ssize_t i = 0; parts != NULL && i < done; ++i) release_parts(&parts[i]);
  PyMem_Free(filled);
  PyMem_Free(parts);
  PyMem_Free(ids);
  Py_DECREF(fast);
  return handles;
}

PyMethodDef request_object_functions[] = {
    {"submit_request", submit_request, METH_O, "submit_request(request) -> its Handle, at once."},
    {"submit_and_wait_request", submit_and_wait_request, METH_O,
     "submit_and_wait_request(request) -> its finished Handle; raises (releasing it) when the collective failed."},
    {"submit_group", submit_group, METH_O,
     "submit_group(requests) -> their Handles: submitted in one call, run together (fused where their types allow)."},
    {NULL, NULL, 0, NULL}};
