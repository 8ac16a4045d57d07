/* hvdlite._tensor_calls: the per-tensor calls of a training step, made from C.
 *
 * A step submits, waits for and releases one request per gradient. Through cffi's ABI mode each of those costs
 * microseconds of Python (argument conversion, a Python Handle object, casts of addresses), which for a model of
 * a few hundred small tensors is more than their fused all-reduce. This module makes them single C calls; all
 * else stays in cffi (hvdlite/_native.py). It links against libhvdlite_core.so (found beside it) and includes
 * only Python.h, NumPy's C API and the core's header: it knows nothing of any framework.
 *
 * Its parts, each depending only on those above it:
 *   core_handles.c      the Handle type; enqueue, run, wait, release (the core's C API, one call each)
 *   int_handles.c       the NumPy API's int handles: track, synchronize, poll
 *   request_fill.c      the one fill of a requests.Request into the core's struct, and its checks
 *   request_objects.c   one-off Requests and groups: submit, submit_and_wait, submit_group
 *   prepared_request.c  PreparedRequest: a request filled once, submitted with new buffers
 *   prepared_group.c    PreparedGroup: requests filled once, submitted together; the GroupHandle it returns
 *   array_collectives.c hvd.allreduce(_async) and the grouped all-reduce on NumPy arrays
 *     named_allreduce.c   what they keep per name; output_arena.c: where their recycled outputs live
 *   module.c            this file: the module, made of the parts' functions and types
 */
#include "array_collectives.h"
#include "int_handles.h"
#include "requests.h"

static struct PyModuleDef tensor_calls_module = {
    PyModuleDef_HEAD_INIT, "hvdlite._tensor_calls",
    "Per-tensor submit / wait / release of hvdlite's core, and the NumPy all-reduces, as single C calls.", -1, NULL};

PyMODINIT_FUNC PyInit__tensor_calls(void) {
  if (core_handles_ready() != 0 || request_fill_ready() != 0 || PyType_Ready(&PreparedRequestType) < 0 ||
      PyType_Ready(&PreparedGroupType) < 0 || PyType_Ready(&GroupHandleType) < 0 ||
      PyType_Ready(&NamedAllreduceType) < 0 || array_collectives_ready() != 0) {
    return NULL;
  }
  PyObject *module = PyModule_Create(&tensor_calls_module);
  if (module == NULL) return NULL;
  PyMethodDef *parts[] = {core_handle_functions, int_handle_functions, request_fill_functions,
                          request_object_functions, array_collective_functions};
  for (size_t i = 0; i < sizeof parts / sizeof parts[0]; ++i) {
    if (PyModule_AddFunctions(module, parts[i]) != 0) goto failed;
  }
  if (array_collectives_constants(module) != 0 || request_fill_constants(module) != 0 ||
      PyModule_AddType(module, &CoreHandleType) < 0 || PyModule_AddType(module, &PreparedRequestType) < 0 ||
      PyModule_AddType(module, &PreparedGroupType) < 0 || PyModule_AddType(module, &GroupHandleType) < 0 ||
      PyModule_AddType(module, &NamedAllreduceType) < 0) {
    goto failed;
  }
  return module;
failed:
  Py_DECREF(module);
  return NULL;
}
