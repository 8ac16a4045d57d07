/* TEST DOUBLE of NCCL (libnccl.so.2) for machines without a GPU, on top of the CUDA double (fake_cuda.c) and
 * MPI. It stands in for NCCL only to check hvdlite's own logic (communicator set-up over MPI, version checks,
 * which reduction each request maps to, fusion, joins, asynchronous errors); it is no evidence that anything
 * works with NCCL or on a GPU.
 *
 * Collectives are enqueued on the caller's (fake) stream and, when that stream runs them, carried out over an
 * MPI communicator: all-reduce gathers every rank's buffer and reduces element by element in double precision,
 * in rank order. A communicator is split from MPI_COMM_WORLD, so every rank of the job must create one at the
 * same time (tests use the global process set). Environment: FAKE_NCCL_VERSION (default 22703), FAKE_NCCL_NO_AVG
 * (leave out ncclAvg, as NCCL < 2.10 does), FAKE_NCCL_ASYNC_ERROR_AFTER=N (ncclCommGetAsyncError reports a
 * remote error once N collectives have run). fake_nccl_allreduce_calls() counts all-reduce calls. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef void (*operation_fn)(void *context);
void fake_cuda_enqueue(void *stream, operation_fn run, void *context);

enum { SUCCESS = 0, INVALID_ARGUMENT = 4, INVALID_USAGE = 5, REMOTE_ERROR = 6 };
enum { INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 };
enum { SUM, PROD, MAX, MIN, AVG, FIRST_CUSTOM };

struct comm {
  MPI_Comm mpi;
  int rank, size;
  int collectives_run;
};
typedef struct { char internal[128]; } ncclUniqueId;

#define MAX_CUSTOM 64
static double custom_scalars[MAX_CUSTOM];
static int custom_used[MAX_CUSTOM];
static long allreduce_calls = 0;

long fake_nccl_allreduce_calls(void) { return allreduce_calls; }

int ncclGetVersion(int *version) {
  const char *v = getenv("FAKE_NCCL_VERSION");
  *version = v ? atoi(v) : 22703;
  return SUCCESS;
}
const char *ncclGetErrorString(int result) {
  return result == REMOTE_ERROR ? "fake: remote process exited or there was a network error" : "fake NCCL error";
}
int ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  strcpy(id->internal, "fake-nccl-id");
  return SUCCESS;
}
int ncclCommInitRank(struct comm **out, int nranks, ncclUniqueId id, int rank) {
  if (strcmp(id.internal, "fake-nccl-id") != 0) return INVALID_ARGUMENT;  /* the id did not travel intact */
  struct comm *c = calloc(1, sizeof *c);
  MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &c->mpi);
  MPI_Comm_rank(c->mpi, &c->rank);
  MPI_Comm_size(c->mpi, &c->size);
  if (c->size != nranks || c->rank != rank) return INVALID_USAGE;
  *out = c;
  return SUCCESS;
}
int ncclCommDestroy(struct comm *c) { MPI_Comm_free(&c->mpi); free(c); return SUCCESS; }
int ncclCommAbort(struct comm *c) { (void)c; return SUCCESS; }
int ncclCommGetAsyncError(struct comm *c, int *error) {
  const char *after = getenv("FAKE_NCCL_ASYNC_ERROR_AFTER");
  *error = after && c->collectives_run >= atoi(after) ? REMOTE_ERROR : SUCCESS;
  return SUCCESS;
}

static size_t type_size(int type) {
  switch (type) {
    case INT8: case UINT8: return 1;
    case FLOAT16: case BFLOAT16: return 2;
    case INT32: case UINT32: case FLOAT32: return 4;
    default: return 8;
  }
}

static double half_to_double(uint16_t h) {
  int exponent = (h >> 10) & 31, mantissa = h & 1023;
  double value = exponent == 0 ? ldexp(mantissa, -24) : exponent == 31 ? INFINITY : ldexp(mantissa + 1024, exponent - 25);
  return (h & 0x8000) ? -value : value;
}
static uint16_t double_to_half(double d) {
  float f = (float)d;
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (x >> 16) & 0x8000;
  int exponent = (int)((x >> 23) & 255) - 127 + 15;
  uint32_t mantissa = x & 0x7fffff;
  if (exponent <= 0) return sign;  /* small values flush to zero: fine for these tests' numbers */
  if (exponent >= 31) return sign | 0x7c00;
  uint16_t h = sign | (uint16_t)(exponent << 10) | (uint16_t)(mantissa >> 13);
  if ((mantissa & 0x1fff) > 0x1000 || ((mantissa & 0x1fff) == 0x1000 && (h & 1))) ++h;  /* to nearest even */
  return h;
}
static double get(const void *p, int type, size_t i) {
  switch (type) {
    case INT8: return ((const int8_t *)p)[i];
    case UINT8: return ((const uint8_t *)p)[i];
    case INT32: return ((const int32_t *)p)[i];
    case UINT32: return ((const uint32_t *)p)[i];
    case INT64: return (double)((const int64_t *)p)[i];
    case UINT64: return (double)((const uint64_t *)p)[i];
    case FLOAT16: return half_to_double(((const uint16_t *)p)[i]);
    case FLOAT32: return ((const float *)p)[i];
    case FLOAT64: return ((const double *)p)[i];
    default: { uint32_t x = (uint32_t)((const uint16_t *)p)[i] << 16; float f; memcpy(&f, &x, 4); return f; }
  }
}
static void put(void *p, int type, size_t i, double v) {
  switch (type) {
    case INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case FLOAT16: ((uint16_t *)p)[i] = double_to_half(v); break;
    case FLOAT32: ((float *)p)[i] = (float)v; break;
    case FLOAT64: ((double *)p)[i] = v; break;
    default: {
      float f = (float)v;
      uint32_t x;
      memcpy(&x, &f, 4);
      x += 0x7fff + ((x >> 16) & 1);  /* to nearest even */
      ((uint16_t *)p)[i] = (uint16_t)(x >> 16);
    }
  }
}

/* The scalar of a pre-multiplied sum is read at the call, as NCCL does: the operator may go right after. */
struct allreduce { const void *send; void *receive; size_t count; int type, op; double scalar; struct comm *comm; };
static void run_allreduce(void *context) {
  struct allreduce *a = context;
  size_t bytes = a->count * type_size(a->type);
  char *all = malloc(bytes * a->comm->size + 1);
  MPI_Allgather(a->send, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, a->comm->mpi);
  double scalar = a->scalar;
  for (size_t i = 0; i < a->count; ++i) {
    double acc = 0;
    for (int r = 0; r < a->comm->size; ++r) {
      double v = get(all + r * bytes, a->type, i);
      if (a->op >= FIRST_CUSTOM) v *= scalar;
      if (r == 0) { acc = v; continue; }
      switch (a->op) {
        case PROD: acc *= v; break;
        case MAX: acc = v > acc ? v : acc; break;
        case MIN: acc = v < acc ? v : acc; break;
        default: acc += v;
      }
    }
    if (a->op == AVG) acc /= a->comm->size;
    put(a->receive, a->type, i, acc);
  }
  free(all);
  a->comm->collectives_run++;
  free(a);
}
int ncclAllReduce(const void *send, void *receive, size_t count, int type, int op, struct comm *comm, void *stream) {
  if (op == AVG && getenv("FAKE_NCCL_NO_AVG")) return INVALID_ARGUMENT;
  if (op >= FIRST_CUSTOM && (op - FIRST_CUSTOM >= MAX_CUSTOM || !custom_used[op - FIRST_CUSTOM])) return INVALID_ARGUMENT;
  struct allreduce *a = malloc(sizeof *a);
  *a = (struct allreduce){send, receive, count, type, op, op >= FIRST_CUSTOM ? custom_scalars[op - FIRST_CUSTOM] : 1.0, comm};
  allreduce_calls++;
  fake_cuda_enqueue(stream, run_allreduce, a);
  return SUCCESS;
}

struct broadcast { const void *send; void *receive; size_t bytes; int root; struct comm *comm; };
static void run_broadcast(void *context) {
  struct broadcast *b = context;
  if (b->comm->rank == b->root && b->receive != b->send) memcpy(b->receive, b->send, b->bytes);
  MPI_Bcast(b->receive, (int)b->bytes, MPI_BYTE, b->root, b->comm->mpi);
  b->comm->collectives_run++;
  free(b);
}
int ncclBroadcast(const void *send, void *receive, size_t count, int type, int root, struct comm *comm, void *stream) {
  struct broadcast *b = malloc(sizeof *b);
  *b = (struct broadcast){send, receive, count * type_size(type), root, comm};
  fake_cuda_enqueue(stream, run_broadcast, b);
  return SUCCESS;
}

int ncclRedOpCreatePreMulSum(int *op, void *scalar, int type, int residence, struct comm *comm) {
  (void)comm;
  if (residence != 1) return INVALID_ARGUMENT;  /* hvdlite passes the scalar by value (host, immediate) */
  for (int i = 0; i < MAX_CUSTOM; ++i) {
    if (custom_used[i]) continue;
    custom_used[i] = 1;
    custom_scalars[i] = get(scalar, type, 0);
    *op = FIRST_CUSTOM + i;
    return SUCCESS;
  }
  return INVALID_USAGE;
}
int ncclRedOpDestroy(int op, struct comm *comm) {
  (void)comm;
  if (op < FIRST_CUSTOM || op - FIRST_CUSTOM >= MAX_CUSTOM) return INVALID_ARGUMENT;
  custom_used[op - FIRST_CUSTOM] = 0;
  return SUCCESS;
}

/* Not used by hvdlite's GPU path yet. */
int ncclAllGather(void) { return INVALID_USAGE; }
int ncclReduceScatter(void) { return INVALID_USAGE; }
int ncclSend(void) { return INVALID_USAGE; }
int ncclRecv(void) { return INVALID_USAGE; }
int ncclGroupStart(void) { return SUCCESS; }
int ncclGroupEnd(void) { return SUCCESS; }
