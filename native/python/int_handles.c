/* hvdlite._tensor_calls, int handles: the integers that Horovod's NumPy-level API returns from its async
 * collectives, and synchronize / poll on them.
 *
 * An int handle names a slot of a C table holding what synchronize needs: a handle (the core's Handle, or any
 * object with wait, release and poll, such as a GroupHandle or a framework's operation) and the result, the
 * output array or a function of the finished handle. The id is the slot's generation times SLOT_LIMIT plus the
 * slot, so an id stays unique while slots are reused, and a synchronized id is unknown (KeyError) ever after.
 * Why a slot and not a dict of ids: a training step tracks and forgets one handle per tensor; the dict's hashing,
 * probing and resizing cost more than a slot's few loads. The table grows to the most handles pending at once,
 * never with the number of steps. GIL held throughout.
 */
#include "int_handles.h"

#include <stdint.h>

#define SLOT_BITS 24
#define SLOT_LIMIT (1LL << SLOT_BITS) /* handles pending at once */

typedef struct {
  uint32_t generation;  /* bumped each time the slot is taken */
  PyObject *handle;     /* what synchronize waits for and releases; NULL while the slot is free */
  PyObject *result;     /* what synchronize returns: a value, or a function of the finished handle */
} Slot;

static Slot *slots;
static int64_t *free_slots; /* a stack of free slot numbers: the one freed last is taken first */
static int64_t slot_count, free_count, slot_capacity;

/* Room for one more slot; 0, or -1 with an error set. */
static int grow(void) {
  if (slot_count < slot_capacity) return 0;
  if (slot_capacity >= SLOT_LIMIT) {
    PyErr_Format(PyExc_RuntimeError, "more than %lld handles pending at once: synchronize some first", SLOT_LIMIT);
    return -1;
  }
  const int64_t capacity = slot_capacity ? slot_capacity * 2 : 256;
  Slot *more_slots = PyMem_Realloc(slots, (size_t)capacity * sizeof(Slot));
  if (more_slots == NULL) return PyErr_NoMemory(), -1;
  slots = more_slots;
  int64_t *more_free = PyMem_Realloc(free_slots, (size_t)capacity * sizeof(int64_t));
  if (more_free == NULL) return PyErr_NoMemory(), -1;
  free_slots = more_free;
  slot_capacity = capacity;
  return 0;
}

/* A free slot for a new handle (not taken yet: take_slot does), or -1 with an error set. */
static int64_t free_slot(void) {
  if (free_count == 0) {
    if (grow() != 0) return -1;
    slots[slot_count] = (Slot){.handle = NULL};
    free_slots[free_count++] = slot_count++;
  }
  return free_slots[free_count - 1];
}

/* Files (handle, result) under a new int handle, which it returns (or NULL with an error set, nothing filed). No
 * Python runs between finding the free slot and taking it. */
static PyObject *file_handle(PyObject *handle, PyObject *result) {
  const int64_t slot = free_slot();
  if (slot < 0) return NULL;
  PyObject *key = PyLong_FromLongLong((long long)(slots[slot].generation + 1ULL) << SLOT_BITS | slot);
  if (key == NULL) return NULL;
  --free_count;
  ++slots[slot].generation;
  slots[slot].handle = Py_NewRef(handle);
  slots[slot].result = Py_NewRef(result);
  return key;
}

PyObject *submit_tracked(const hvdlite_request *request, PyObject *keepalive, PyObject *name, PyObject *result) {
  PyObject *handle = enqueue(request, keepalive, name); /* may run Python: before the slot is found */
  if (handle == NULL) return NULL;
  PyObject *key = file_handle(handle, result);
  Py_DECREF(handle); /* without a key, the unreleased handle keeps the memory until its collective is done */
  return key;
}

/* The slot of a pending int handle, or -1 with KeyError (naming the key) set. */
static int64_t slot_of(PyObject *key) {
  long long id = PyLong_Check(key) ? PyLong_AsLong(key) : -1; /* not AsLongLong: slow for two-digit ints */
  if (id == -1 && PyErr_Occurred()) PyErr_Clear();
  const int64_t slot = id & (SLOT_LIMIT - 1);
  if (id < 0 || slot >= slot_count || slots[slot].handle == NULL ||
      (uint32_t)(id >> SLOT_BITS) != slots[slot].generation) {
    PyErr_SetObject(PyExc_KeyError, key);
    return -1;
  }
  return slot;
}

/* Forgets a pending int handle: a copy of its slot (the references now the caller's), or one with no handle and
 * KeyError set. */
static Slot take_filed(PyObject *key) {
  const int64_t slot = slot_of(key);
  if (slot < 0) return (Slot){.handle = NULL};
  const Slot filed = slots[slot];
  slots[slot].handle = NULL;
  slots[slot].result = NULL;
  free_slots[free_count++] = slot;
  return filed;
}

/* Calls handle.method() on a handle that is not a CoreHandle (a GroupHandle); 0, or -1 with an error set. */
static int call_method(PyObject *handle, const char *method) {
  PyObject *returned = PyObject_CallMethod(handle, method, NULL);
  Py_XDECREF(returned);
  return returned != NULL ? 0 : -1;
}

/* track(handle, result): a new int handle for a submitted request (see the top of this file). */
static PyObject *track(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
  if (check_arguments("track", nargs, 2) != 0) return NULL;
  return file_handle(args[0], args[1]);
}

/* Waits for the request behind an int handle, forgets the handle and returns the result; raises KeyError for an
 * unknown handle and HvdliteError when the collective failed. */
static PyObject *synchronize(PyObject *module, PyObject *key) {
  const Slot filed = take_filed(key);
  if (filed.handle == NULL) return NULL;
  const int core_handle = Py_IS_TYPE(filed.handle, &CoreHandleType);
  const int computed = PyCallable_Check(filed.result); /* read from the finished handle, before its release */
  PyObject *value = NULL;
  if (core_handle && !computed) {
    /* The common case (an all-reduce of the NumPy API, its output the result): wait and release in one call. */
    if (finish_one((CoreHandle *)filed.handle) == 0) value = Py_NewRef(filed.result);
  } else {
    const int waited = core_handle ? wait_one((CoreHandle *)filed.handle) : call_method(filed.handle, "wait");
    if (waited == 0) {
      value = computed ? PyObject_CallOneArg(filed.result, filed.handle) : Py_NewRef(filed.result);
    }
    if (core_handle) {
      release_one((CoreHandle *)filed.handle);
    } else {
      /* Released whatever happened, keeping the error raised so far. */
      PyObject *type, *error, *traceback;
      PyErr_Fetch(&type, &error, &traceback);
      if (call_method(filed.handle, "release") != 0 && type != NULL) PyErr_Clear();
      if (type != NULL) PyErr_Restore(type, error, traceback);
      if (PyErr_Occurred()) Py_CLEAR(value);
    }
  }
  Py_DECREF(filed.handle);
  Py_DECREF(filed.result);
  return value;
}

/* poll(handle_id): True when the request behind an int handle has finished; KeyError for an unknown handle. */
static PyObject *poll(PyObject *module, PyObject *key) {
  const int64_t slot = slot_of(key);
  if (slot < 0) return NULL;
  PyObject *handle = slots[slot].handle;
  if (Py_IS_TYPE(handle, &CoreHandleType)) return PyBool_FromLong(hvdlite_poll(((CoreHandle *)handle)->id) == 1);
  return PyObject_CallMethod(handle, "poll", NULL);
}

static PyObject *pending_handles(PyObject *module, PyObject *unused) {
  return PyLong_FromLongLong(slot_count - free_count);
}

PyMethodDef int_handle_functions[] = {
    {"track", (PyCFunction)(void (*)(void))track, METH_FASTCALL, "track(handle, result) -> int handle"},
    {"synchronize", synchronize, METH_O, "synchronize(handle_id) -> result; raises if the collective failed"},
    {"poll", poll, METH_O, "poll(handle_id) -> True once the collective behind handle_id has finished"},
    {"pending_handles", pending_handles, METH_NOARGS,
     "pending_handles() -> how many int handles are not synchronized yet (for tests)"},
    {NULL, NULL, 0, NULL}};
