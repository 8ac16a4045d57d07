/* TEST DOUBLE of NCCL (libnccl.so.2) for machines without a GPU, on top of the CUDA double (fake_cuda.c) and
 * MPI. It stands in for NCCL only to check hvdlite's own logic (communicator set-up over MPI, version checks,
 * which reduction each request maps to, fusion, joins, asynchronous errors); it is no evidence that anything
 * works with NCCL or on a GPU.
 *
 * Collectives are enqueued on the caller's (fake) stream and, when that stream runs them, carried out over an
 * MPI communicator: reductions gather every rank's buffer and reduce element by element in double precision, in
 * rank order; a group (ncclGroupStart/End) runs as one operation, its sends and receives posted together. A
 * communicator is made of its members alone (a process set's too): the unique id names its creator, the members
 * meet there and make an MPI communicator of just themselves. Environment: FAKE_NCCL_VERSION (default 22703), FAKE_NCCL_NO_AVG
 * (leave out ncclAvg, as NCCL < 2.10 does), FAKE_NCCL_ASYNC_ERROR_AFTER=N (ncclCommGetAsyncError reports a
 * remote error once N collectives have run). fake_nccl_allreduce_calls() counts all-reduce calls,
 * fake_nccl_calls() every call that moves data. */
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
static long allreduce_calls = 0, all_calls = 0;  /* what the core asked for, grouped or not */

long fake_nccl_allreduce_calls(void) { return allreduce_calls; }
long fake_nccl_calls(void) { return all_calls; }

int ncclGetVersion(int *version) {
  const char *v = getenv("FAKE_NCCL_VERSION");
  *version = v ? atoi(v) : 22703;
  return SUCCESS;
}
const char *ncclGetErrorString(int result) {
  return result == REMOTE_ERROR ? "fake: remote process exited or there was a network error" : "fake NCCL error";
}
/* What a unique id holds: its creator (rank 0 of the communicator to be) by rank in MPI_COMM_WORLD, and a count
 * of the ids it made, which picks the tag its members meet with (MPI guarantees tags up to 32767). */
struct id_fields {
  char magic[16];
  int creator, serial;
};
enum { MEETING_TAGS = 29000, MEETING_TAG_COUNT = 1000 };
static int ids_made = 0;

int ncclGetUniqueId(ncclUniqueId *id) {
  struct id_fields fields = {"fake-nccl-id", 0, ids_made++};
  MPI_Comm_rank(MPI_COMM_WORLD, &fields.creator);
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &fields, sizeof fields);
  return SUCCESS;
}
int ncclCommInitRank(struct comm **out, int nranks, ncclUniqueId id, int rank) {
  struct id_fields fields;
  memcpy(&fields, id.internal, sizeof fields);
  if (strcmp(fields.magic, "fake-nccl-id") != 0) return INVALID_ARGUMENT;  /* the id did not travel intact */
  const int tag = MEETING_TAGS + fields.serial % MEETING_TAG_COUNT;
  int me;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if ((rank == 0) != (me == fields.creator)) return INVALID_USAGE;
  /* The members' ranks in MPI_COMM_WORLD, by their rank in the communicator: gathered by the creator, sent back. */
  int *world = calloc(nranks, sizeof *world);
  if (rank == 0) {
    world[0] = me;
    for (int i = 1; i < nranks; ++i) {
      int member[2];
      MPI_Recv(member, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      world[member[0]] = member[1];
    }
    for (int r = 1; r < nranks; ++r) MPI_Send(world, nranks, MPI_INT, world[r], tag, MPI_COMM_WORLD);
  } else {
    int member[2] = {rank, me};
    MPI_Send(member, 2, MPI_INT, fields.creator, tag, MPI_COMM_WORLD);
    MPI_Recv(world, nranks, MPI_INT, fields.creator, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Group everyone, members;
  MPI_Comm_group(MPI_COMM_WORLD, &everyone);
  MPI_Group_incl(everyone, nranks, world, &members);
  struct comm *c = calloc(1, sizeof *c);
  MPI_Comm_create_group(MPI_COMM_WORLD, members, tag, &c->mpi);
  MPI_Group_free(&members);
  MPI_Group_free(&everyone);
  free(world);
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

/* One collective (or send, or receive) as enqueued. The scalar of a pre-multiplied sum is read at the call, as
 * NCCL does: the operator may go right after. */
enum kind { ALLREDUCE, REDUCE, REDUCESCATTER, BROADCAST, ALLGATHER, SEND, RECV };
struct call {
  enum kind kind;
  const void *send;
  void *receive;
  size_t count;
  int type, op, peer; /* peer: root of a reduce or broadcast, the other rank of a send or receive */
  double scalar;
  struct comm *comm;
};

/* Reduces every rank's count elements of send into out (all ranks compute it). */
static void reduce_all(const struct call *c, const void *send, void *out, size_t count) {
  size_t bytes = count * type_size(c->type);
  char *all = malloc(bytes * c->comm->size + 1);
  MPI_Allgather(send, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, c->comm->mpi);
  for (size_t i = 0; i < count; ++i) {
    double acc = 0;
    for (int r = 0; r < c->comm->size; ++r) {
      double v = get(all + r * bytes, c->type, i);
      if (c->op >= FIRST_CUSTOM) v *= c->scalar;
      if (r == 0) { acc = v; continue; }
      switch (c->op) {
        case PROD: acc *= v; break;
        case MAX: acc = v > acc ? v : acc; break;
        case MIN: acc = v < acc ? v : acc; break;
        default: acc += v;
      }
    }
    if (c->op == AVG) acc /= c->comm->size;
    put(out, c->type, i, acc);
  }
  free(all);
}

static void run_one(struct call *c) {
  size_t bytes = c->count * type_size(c->type);
  struct comm *comm = c->comm;
  switch (c->kind) {
    case ALLREDUCE: reduce_all(c, c->send, c->receive, c->count); break;
    case REDUCE: {
      char *out = malloc(bytes + 1);
      reduce_all(c, c->send, out, c->count);
      if (comm->rank == c->peer) memcpy(c->receive, out, bytes);
      free(out);
      break;
    }
    case REDUCESCATTER: {  /* count: each rank's share */
      char *out = malloc(bytes * comm->size + 1);
      reduce_all(c, c->send, out, c->count * comm->size);
      memcpy(c->receive, out + bytes * comm->rank, bytes);
      free(out);
      break;
    }
    case BROADCAST:
      if (comm->rank == c->peer && c->receive != c->send) memcpy(c->receive, c->send, bytes);
      MPI_Bcast(c->receive, (int)bytes, MPI_BYTE, c->peer, comm->mpi);
      break;
    case ALLGATHER:
      MPI_Allgather(c->send, (int)bytes, MPI_BYTE, c->receive, (int)bytes, MPI_BYTE, comm->mpi);
      break;
    default: break;  /* sends and receives run in run_group */
  }
  comm->collectives_run++;
}

/* A group (ncclGroupStart/End): sends and receives posted together, then the collectives in call order. */
struct group {
  int count;
  struct call calls[256];
};
static int group_depth = 0;
static struct group *open_group = NULL;
static void *group_stream = NULL;

static void run_group(void *context) {
  struct group *g = context;
  MPI_Request requests[256];
  int posted = 0;
  for (int i = 0; i < g->count; ++i) {
    struct call *c = &g->calls[i];
    int bytes = (int)(c->count * type_size(c->type));
    if (c->kind == SEND) MPI_Isend(c->send, bytes, MPI_BYTE, c->peer, 7, c->comm->mpi, &requests[posted++]);
    if (c->kind == RECV) MPI_Irecv(c->receive, bytes, MPI_BYTE, c->peer, 7, c->comm->mpi, &requests[posted++]);
  }
  for (int i = 0; i < g->count; ++i) {
    if (g->calls[i].kind != SEND && g->calls[i].kind != RECV) run_one(&g->calls[i]);
  }
  MPI_Waitall(posted, requests, MPI_STATUSES_IGNORE);
  free(g);
}

static void run_single(void *context) {
  run_one(context);
  free(context);
}

static int submit(struct call call, void *stream) {
  if (call.op >= FIRST_CUSTOM && (call.op - FIRST_CUSTOM >= MAX_CUSTOM || !custom_used[call.op - FIRST_CUSTOM]))
    return INVALID_ARGUMENT;
  if (call.op == AVG && getenv("FAKE_NCCL_NO_AVG")) return INVALID_ARGUMENT;
  call.scalar = call.op >= FIRST_CUSTOM ? custom_scalars[call.op - FIRST_CUSTOM] : 1.0;
  if (call.kind == ALLREDUCE) allreduce_calls++;
  all_calls++;
  if (group_depth > 0) {
    if (open_group->count == 256) return INVALID_USAGE;
    open_group->calls[open_group->count++] = call;
    group_stream = stream;
    return SUCCESS;
  }
  if (call.kind == SEND || call.kind == RECV) return INVALID_USAGE;  /* NCCL would deadlock outside a group */
  struct call *c = malloc(sizeof *c);
  *c = call;
  fake_cuda_enqueue(stream, run_single, c);
  return SUCCESS;
}

int ncclGroupStart(void) {
  if (group_depth++ == 0) open_group = calloc(1, sizeof *open_group);
  return SUCCESS;
}
int ncclGroupEnd(void) {
  if (group_depth == 0) return INVALID_USAGE;
  if (--group_depth > 0) return SUCCESS;
  if (open_group->count) fake_cuda_enqueue(group_stream, run_group, open_group); else free(open_group);
  open_group = NULL;
  return SUCCESS;
}

int ncclAllReduce(const void *send, void *receive, size_t count, int type, int op, struct comm *comm, void *stream) {
  return submit((struct call){ALLREDUCE, send, receive, count, type, op, 0, 0, comm}, stream);
}
int ncclReduce(const void *send, void *receive, size_t count, int type, int op, int root, struct comm *comm,
               void *stream) {
  return submit((struct call){REDUCE, send, receive, count, type, op, root, 0, comm}, stream);
}
int ncclReduceScatter(const void *send, void *receive, size_t count, int type, int op, struct comm *comm, void *stream) {
  return submit((struct call){REDUCESCATTER, send, receive, count, type, op, 0, 0, comm}, stream);
}
int ncclBroadcast(const void *send, void *receive, size_t count, int type, int root, struct comm *comm, void *stream) {
  return submit((struct call){BROADCAST, send, receive, count, type, SUM, root, 0, comm}, stream);
}
int ncclAllGather(const void *send, void *receive, size_t count, int type, struct comm *comm, void *stream) {
  return submit((struct call){ALLGATHER, send, receive, count, type, SUM, 0, 0, comm}, stream);
}
int ncclSend(const void *send, size_t count, int type, int peer, struct comm *comm, void *stream) {
  return submit((struct call){SEND, send, NULL, count, type, SUM, peer, 0, comm}, stream);
}
int ncclRecv(void *receive, size_t count, int type, int peer, struct comm *comm, void *stream) {
  return submit((struct call){RECV, NULL, receive, count, type, SUM, peer, 0, comm}, stream);
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

