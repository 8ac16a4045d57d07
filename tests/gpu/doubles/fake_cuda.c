/* TEST DOUBLE of the CUDA driver (libcuda.so.1) for machines without a GPU. It stands in for CUDA only to check
 * hvdlite's own logic (which stream waits on which event, what is copied where and when); it is no evidence
 * that anything works on a GPU.
 *
 * "Device memory" is host memory. Streams are deferred and run on demand: an operation runs only when something
 * waits for it (cuStreamSynchronize, cuEventSynchronize) or asks (cuEventQuery), and then only what it depends on
 * runs first: the earlier operations of its stream and, for a stream that waits on an event, the operations of
 * the stream the event was recorded on, up to that record. Nothing else does. So a consumer that does not order
 * itself after a producer's event runs before the producer and reads stale memory, as it may on a GPU.
 * Operations run one at a time (one lock).
 *
 * FAKE_CUDA_FAIL_STREAM_CREATE makes cuStreamCreate fail. For tests: fake_cuda_fill_f64 / fake_cuda_copy
 * enqueue a write (a "kernel") on a stream;
 * fake_cuda_enqueue lets the NCCL double put its collectives on a stream. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
enum { OK = 0, INVALID_VALUE = 1, NOT_READY = 600 };

typedef void (*operation_fn)(void *context);

struct operation {
  operation_fn run;  /* null for a wait */
  void *context;
  struct event *wait_for;
  uint64_t wait_generation;
  struct stream *wait_stream;  /* where that generation of the event was recorded */
  struct operation *next;
};

struct stream {
  struct operation *head, *tail;
};

struct event {
  uint64_t recorded;  /* generation of the newest record enqueued */
  uint64_t reached;   /* generation whose record has run */
  struct stream *recorded_on;
};

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;  /* the queues */
static pthread_mutex_t run_lock = PTHREAD_MUTEX_INITIALIZER;    /* one operation at a time */
static struct stream legacy_stream;                              /* the null stream */

static struct stream *resolve(void *handle) { return handle ? (struct stream *)handle : &legacy_stream; }

static void push(struct stream *s, struct operation *op) {
  pthread_mutex_lock(&queue_lock);
  op->next = NULL;
  if (s->tail) s->tail->next = op; else s->head = op;
  s->tail = op;
  pthread_mutex_unlock(&queue_lock);
}

void fake_cuda_enqueue(void *stream, operation_fn run, void *context) {
  struct operation *op = calloc(1, sizeof *op);
  op->run = run;
  op->context = context;
  push(resolve(stream), op);
}

static int event_reached(struct event *e, uint64_t generation);

/* Runs the first operation of s, after what it waits for; 0 when s is empty or its wait can never be met.
 * Callers hold run_lock. */
static int run_head(struct stream *s) {
  pthread_mutex_lock(&queue_lock);
  struct operation *op = s->head;
  pthread_mutex_unlock(&queue_lock);
  if (!op) return 0;
  if (!op->run) {
    while (!event_reached(op->wait_for, op->wait_generation)) {
      if (!op->wait_stream || op->wait_stream == s || !run_head(op->wait_stream)) return 0;
    }
  }
  pthread_mutex_lock(&queue_lock);
  s->head = op->next;
  if (!s->head) s->tail = NULL;
  pthread_mutex_unlock(&queue_lock);
  if (op->run) op->run(op->context);
  free(op);
  return 1;
}

static int event_reached(struct event *e, uint64_t generation) {
  pthread_mutex_lock(&queue_lock);
  int reached = e->reached >= generation;
  pthread_mutex_unlock(&queue_lock);
  return reached;
}

static int stream_empty(struct stream *s) {
  pthread_mutex_lock(&queue_lock);
  int empty = s->head == NULL;
  pthread_mutex_unlock(&queue_lock);
  return empty;
}

CUresult cuInit(unsigned flags) { (void)flags; return OK; }
CUresult cuDeviceGetCount(int *count) {
  const char *n = getenv("FAKE_CUDA_DEVICES");
  *count = n ? atoi(n) : 1;
  return OK;
}
CUresult cuDeviceGet(int *device, int ordinal) { *device = ordinal; return OK; }
static int contexts[16];
CUresult cuDevicePrimaryCtxRetain(void **context, int device) {
  if (device < 0 || device >= 16) return INVALID_VALUE;
  *context = &contexts[device];
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int device) { (void)device; return OK; }
CUresult cuCtxSetCurrent(void *context) { (void)context; return OK; }

CUresult cuStreamCreate(void **stream, unsigned flags) {
  (void)flags;
  if (getenv("FAKE_CUDA_FAIL_STREAM_CREATE")) return 2;  /* out of memory, say */
  *stream = calloc(1, sizeof(struct stream));
  return OK;
}
CUresult cuStreamDestroy_v2(void *stream) { (void)stream; return OK; } /* kept: waits may name it */

CUresult cuStreamWaitEvent(void *stream, void *event, unsigned flags) {
  (void)flags;
  struct event *e = event;
  struct operation *op = calloc(1, sizeof *op);
  op->wait_for = e;
  pthread_mutex_lock(&queue_lock);
  op->wait_generation = e->recorded;
  op->wait_stream = e->recorded_on;
  pthread_mutex_unlock(&queue_lock);
  push(resolve(stream), op);
  return OK;
}

CUresult cuStreamSynchronize(void *stream) {
  pthread_mutex_lock(&run_lock);
  while (run_head(resolve(stream))) {}
  int done = stream_empty(resolve(stream));
  pthread_mutex_unlock(&run_lock);
  return done ? OK : INVALID_VALUE;  /* a wait that can never be met */
}

CUresult cuEventCreate(void **event, unsigned flags) {
  (void)flags;
  *event = calloc(1, sizeof(struct event));
  return OK;
}
CUresult cuEventDestroy_v2(void *event) { free(event); return OK; }

struct record { struct event *event; uint64_t generation; };
static void run_record(void *context) {
  struct record *r = context;
  pthread_mutex_lock(&queue_lock);
  if (r->event->reached < r->generation) r->event->reached = r->generation;
  pthread_mutex_unlock(&queue_lock);
  free(r);
}

CUresult cuEventRecord(void *event, void *stream) {
  struct record *r = malloc(sizeof *r);
  r->event = event;
  pthread_mutex_lock(&queue_lock);
  r->generation = ++r->event->recorded;
  r->event->recorded_on = resolve(stream);
  pthread_mutex_unlock(&queue_lock);
  fake_cuda_enqueue(stream, run_record, r);
  return OK;
}

/* Runs what event's newest record depends on, up to that record; whether it has run. Without wait, nothing runs
 * while another thread runs an operation (a collective may be running): cuEventQuery never blocks. */
static int run_to_event(struct event *e, int wait) {
  pthread_mutex_lock(&queue_lock);
  uint64_t generation = e->recorded;
  struct stream *on = e->recorded_on;
  pthread_mutex_unlock(&queue_lock);
  if (wait ? pthread_mutex_lock(&run_lock) == 0 : pthread_mutex_trylock(&run_lock) == 0) {
    while (!event_reached(e, generation) && on && run_head(on)) {}
    pthread_mutex_unlock(&run_lock);
  }
  return event_reached(e, generation);
}

CUresult cuEventSynchronize(void *event) { return run_to_event(event, 1) ? OK : INVALID_VALUE; }
CUresult cuEventQuery(void *event) { return run_to_event(event, 0) ? OK : NOT_READY; }

CUresult cuMemAlloc_v2(uint64_t *pointer, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) return 2;
  *pointer = (uint64_t)(uintptr_t)p;
  return OK;
}
CUresult cuMemFree_v2(uint64_t pointer) { free((void *)(uintptr_t)pointer); return OK; }

struct copy { void *to; const void *from; size_t bytes; int value; };
static void run_copy(void *context) {
  struct copy *c = context;
  if (c->from) memcpy(c->to, c->from, c->bytes); else memset(c->to, c->value, c->bytes);
  free(c);
}
CUresult cuMemcpyAsync(uint64_t to, uint64_t from, size_t bytes, void *stream) {
  struct copy *c = malloc(sizeof *c);
  *c = (struct copy){(void *)(uintptr_t)to, (const void *)(uintptr_t)from, bytes, 0};
  fake_cuda_enqueue(stream, run_copy, c);
  return OK;
}
CUresult cuMemsetD8Async(uint64_t to, unsigned char value, size_t bytes, void *stream) {
  struct copy *c = malloc(sizeof *c);
  *c = (struct copy){(void *)(uintptr_t)to, NULL, bytes, value};
  fake_cuda_enqueue(stream, run_copy, c);
  return OK;
}
CUresult cuPointerGetAttribute(void *data, int attribute, uint64_t pointer) {
  (void)attribute; (void)pointer;
  *(int *)data = 0;
  return OK;
}
CUresult cuGetErrorString(CUresult error, const char **text) {
  *text = error == NOT_READY ? "fake: not ready" : "fake CUDA error";
  return OK;
}

/* Test hooks. */
struct fill { double *to; double value; size_t count; };
static void run_fill(void *context) {
  struct fill *f = context;
  for (size_t i = 0; i < f->count; ++i) f->to[i] = f->value;
  free(f);
}
void fake_cuda_fill_f64(void *stream, double *to, double value, size_t count) {
  struct fill *f = malloc(sizeof *f);
  *f = (struct fill){to, value, count};
  fake_cuda_enqueue(stream, run_fill, f);
}
void fake_cuda_copy(void *stream, void *to, const void *from, size_t bytes) {
  cuMemcpyAsync((uint64_t)(uintptr_t)to, (uint64_t)(uintptr_t)from, bytes, stream);
}
