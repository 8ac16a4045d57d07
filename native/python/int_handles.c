/* hvdlite._hotpath, int handles: the integers that Horovod's NumPy-level API returns from its async collectives,
 * and synchronize / poll on them.
 *
 * An int handle names a slot of a C table holding what synchronize needs. A NumPy (or torch CPU) all-reduce is
 * filed inline: the core's handle id, the input and name kept until it finishes, and the output array that
 * synchronize returns. The other collectives file an entry: a (handle, result) tuple, result being the output
 * array or a function of the finished handle. The id is the slot's generation times SLOT_LIMIT plus the slot,
 * so an id stays unique while slots are reused, and a synchronized id is unknown (KeyError) ever after.
 * Why a slot and not a dict of ids: a training step tracks and forgets one handle per tensor; the dict's hashing,
 * probing and resizing cost ~0.1 us a tensor (2-3% of the caller's samples at 256 x 16 KiB), a slot a few loads.
 * Why inline: a Handle object per tensor cost its allocation, and at synchronize a cache miss on it (the step's
 * data went through the cache meanwhile) and its deallocation. The table grows to the most handles pending at
 * once, never with the number of steps. GIL held throughout.
 */
#include "hotpath.h"

#include <stdint.h>

#define SLOT_BITS 24
#define SLOT_LIMIT (1LL << SLOT_BITS) /* handles pending at once */

enum { SLOT_FREE, SLOT_ENTRY, SLOT_INLINE };

typedef struct {
  uint8_t kind;         /* SLOT_FREE, SLOT_ENTRY or SLOT_INLINE */
  uint32_t generation;  /* bumped each time the slot is taken */
  hvdlite_handle id;    /* inline: the core's handle */
  PyObject *entry;      /* entry: a Handle or a (handle, result) tuple. Inline: the input, kept until finished */
  PyObject *name;       /* inline: the request's name, for errors */
  PyObject *result;     /* inline: what synchronize returns */
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
    slots[slot_count] = (Slot){.kind = SLOT_FREE};
    free_slots[free_count++] = slot_count++;
  }
  return free_slots[free_count - 1];
}

/* Takes free_slot()'s slot for kind; its int handle, or NULL with an error (the slot then stays free). */
static PyObject *take_slot(int64_t slot, uint8_t kind) {
  const long long id = (long long)(slots[slot].generation + 1ULL) << SLOT_BITS | slot;
  PyObject *key = PyLong_FromLongLong(id);
  if (key == NULL) return NULL;
  --free_count;
  ++slots[slot].generation;
  slots[slot].kind = kind;
  return key;
}

static PyObject *track_entry(PyObject *entry) {
  const int64_t slot = free_slot();
  PyObject *key = slot < 0 ? NULL : take_slot(slot, SLOT_ENTRY);
  if (key != NULL) slots[slot].entry = Py_NewRef(entry);
  return key;
}

PyObject *submit_tracked(const hvdlite_request *request, PyObject *keepalive, PyObject *name, PyObject *result) {
  const hvdlite_handle id = enqueue_id(request);  /* may run Python (dropped handles' memory is let go) */
  if (id < 0) return NULL;
  const int64_t slot = free_slot();  /* then no Python runs until the slot is taken */
  PyObject *key = slot < 0 ? NULL : take_slot(slot, SLOT_INLINE);
  if (key == NULL) {
    /* No int for it: nobody can synchronize it. Wait here rather than leave the core writing into result. */
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    if (finish_id(id, name) != 0) PyErr_Clear();
    PyErr_Restore(type, error, traceback);
    return NULL;
  }
  Slot *filed = &slots[slot];
  filed->id = id;
  filed->entry = Py_NewRef(keepalive);
  filed->name = Py_NewRef(name);
  filed->result = Py_NewRef(result);
  return key;
}

/* The slot of a pending int handle, or -1 with KeyError (naming the key) set. */
static int64_t slot_of(PyObject *key) {
  long long id = PyLong_Check(key) ? PyLong_AsLong(key) : -1; /* not AsLongLong: slow for two-digit ints */
  if (id == -1 && PyErr_Occurred()) PyErr_Clear();
  const int64_t slot = id & (SLOT_LIMIT - 1);
  if (id < 0 || slot >= slot_count || slots[slot].kind == SLOT_FREE ||
      (uint32_t)(id >> SLOT_BITS) != slots[slot].generation) {
    PyErr_SetObject(PyExc_KeyError, key);
    return -1;
  }
  return slot;
}

/* Forgets a pending int handle: a copy of its slot (the references now the caller's), or kind SLOT_FREE with
 * KeyError set. */
static Slot take_filed(PyObject *key) {
  const int64_t slot = slot_of(key);
  if (slot < 0) return (Slot){.kind = SLOT_FREE};
  const Slot filed = slots[slot];
  slots[slot].kind = SLOT_FREE;
  free_slots[free_count++] = slot;
  return filed;
}

/* A pending entry's handle (borrowed): the entry itself, or the first item of its (handle, result) tuple. */
static PyObject *handle_of(PyObject *entry) {
  return PyTuple_CheckExact(entry) ? PyTuple_GET_ITEM(entry, 0) : entry;
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
  const Slot filed = take_filed(key);
  *unknown = filed.kind == SLOT_FREE;
  if (filed.kind == SLOT_FREE) return NULL;
  if (filed.kind == SLOT_INLINE) {
    PyObject *value = finish_id(filed.id, filed.name) == 0 ? filed.result : NULL;
    if (value == NULL) Py_DECREF(filed.result);
    Py_DECREF(filed.entry); /* the input: the core is done with it */
    Py_DECREF(filed.name);
    return value;
  }
  PyObject *entry = filed.entry, *handle = handle_of(entry);
  const int is_core_handle = PyObject_TypeCheck(handle, &CoreHandleType);
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
  if (slots[slot].kind == SLOT_INLINE) return PyBool_FromLong(hvdlite_poll(slots[slot].id) == 1);
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
