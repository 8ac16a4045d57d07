/* hvdlite._hotpath, int handles: the integers that Horovod's NumPy-level API returns from its async collectives,
 * and synchronize / poll on them.
 *
 * An int handle names a slot of a C table holding its pending entry: the Handle of a NumPy all-reduce (its
 * result field holds the output array) or, for the other collectives, a (handle, result) tuple, result being
 * the output array or a function of the finished handle. The id is the slot's generation times SLOT_LIMIT plus
 * the slot, so an id stays unique while slots are reused, and a synchronized id is unknown (KeyError) ever after.
 * Why not a dict of ids: a training step tracks and forgets one handle per tensor; the dict's hashing, probing
 * and resizing cost ~0.1 us a tensor (2-3% of the caller's samples at 256 x 16 KiB), a slot a few loads.
 * The table grows to the most handles pending at once, never with the number of steps. GIL held throughout.
 */
#include "hotpath.h"

#include <stdint.h>

#define SLOT_BITS 24
#define SLOT_LIMIT (1LL << SLOT_BITS) /* handles pending at once */

typedef struct {
  PyObject *entry;     /* NULL while the slot is free */
  uint32_t generation; /* bumped each time the slot is taken */
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

PyObject *track_entry(PyObject *entry) {
  if (free_count == 0) {
    if (grow() != 0) return NULL;
    slots[slot_count] = (Slot){NULL, 0};
    free_slots[free_count++] = slot_count++;
  }
  const int64_t slot = free_slots[free_count - 1];
  const long long id = (long long)(slots[slot].generation + 1ULL) << SLOT_BITS | slot;
  PyObject *key = PyLong_FromLongLong(id);
  if (key == NULL) return NULL;
  --free_count;
  ++slots[slot].generation;
  slots[slot].entry = Py_NewRef(entry);
  return key;
}

/* The slot of a pending int handle, or -1 with KeyError (naming the key) set. */
static int64_t slot_of(PyObject *key) {
  long long id = PyLong_Check(key) ? PyLong_AsLong(key) : -1; /* not AsLongLong: slow for two-digit ints */
  if (id == -1 && PyErr_Occurred()) PyErr_Clear();
  const int64_t slot = id & (SLOT_LIMIT - 1);
  if (id < 0 || slot >= slot_count || slots[slot].entry == NULL ||
      (uint32_t)(id >> SLOT_BITS) != slots[slot].generation) {
    PyErr_SetObject(PyExc_KeyError, key);
    return -1;
  }
  return slot;
}

/* Forgets a pending int handle; its entry (the table's reference, now the caller's), or NULL with KeyError. */
static PyObject *take_entry(PyObject *key) {
  const int64_t slot = slot_of(key);
  if (slot < 0) return NULL;
  PyObject *entry = slots[slot].entry;
  slots[slot].entry = NULL;
  free_slots[free_count++] = slot;
  return entry;
}

/* A pending entry's handle (borrowed): the entry itself, or the first item of its (handle, result) tuple. */
static PyObject *handle_of(PyObject *entry) {
  return PyTuple_CheckExact(entry) ? PyTuple_GET_ITEM(entry, 0) : entry;
}

/* The result a Handle holds for synchronize (the handle's reference moves to the caller), or None. */
static PyObject *take_result(CoreHandle *handle) {
  PyObject *result = handle->result ? handle->result : Py_NewRef(Py_None);
  handle->result = NULL;
  return result;
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
  PyObject *entry = PyTuple_Pack(2, args[0], args[1]);
  if (entry == NULL) return NULL;
  PyObject *key = track_entry(entry);
  Py_DECREF(entry);
  return key;
}

/* Waits for the request behind an int handle, forgets the handle and returns the result; raises KeyError for an
 * unknown handle and HvdliteError when the collective failed. */
PyObject *synchronize_int_handle(PyObject *key, int *unknown) {
  PyObject *entry = take_entry(key);
  *unknown = entry == NULL;
  if (entry == NULL) return NULL;
  PyObject *handle = handle_of(entry);
  const int is_core_handle = PyObject_TypeCheck(handle, &CoreHandleType);
  if (is_core_handle && handle == entry) {
    /* An all-reduce's Handle, holding its output: taken first (finishing drops what the handle holds). */
    PyObject *value = take_result((CoreHandle *)handle);
    if (finish_one((CoreHandle *)handle) != 0) Py_CLEAR(value);
    Py_DECREF(entry);
    return value;
  }
  const int waited = is_core_handle ? wait_one((CoreHandle *)handle) : call_method(handle, "wait");
  PyObject *value = NULL;
  if (waited == 0) {
    PyObject *result = PyTuple_GET_ITEM(entry, 1);
    value = PyCallable_Check(result) ? PyObject_CallOneArg(result, handle) : Py_NewRef(result);
  }
  /* Released whatever happened, keeping the error raised so far. */
  if (is_core_handle) {
    release_one((CoreHandle *)handle);
  } else {
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    if (call_method(handle, "release") != 0 && type != NULL) PyErr_Clear();
    if (type != NULL) PyErr_Restore(type, error, traceback);
    if (PyErr_Occurred()) Py_CLEAR(value);
  }
  Py_DECREF(entry);
  return value;
}

/* synchronize(handle_id): hvd.synchronize of the NumPy API. */
static PyObject *synchronize(PyObject *module, PyObject *key) {
  int unknown;
  return synchronize_int_handle(key, &unknown);
}

/* poll(handle_id): True when the request behind an int handle has finished; KeyError for an unknown handle. */
static PyObject *poll(PyObject *module, PyObject *key) {
  const int64_t slot = slot_of(key);
  if (slot < 0) return NULL;
  return PyObject_CallMethod(handle_of(slots[slot].entry), "poll", NULL);
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
