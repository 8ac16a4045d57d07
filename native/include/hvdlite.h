/* hvdlite: the one C ABI between the Python side and the native core.
 *
 * The core knows nothing about Python or frameworks: callers hand it pointers, dtypes and shapes,
 * get a handle back at once, and collect the result (or the error) through that handle.
 * Every function is safe to call from any thread; only the core's background thread calls MPI.
 * This header is also fed to cffi's cdef, so it holds no preprocessor logic beyond the guards. */
#ifndef HVDLITE_H
#define HVDLITE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. Half types (float16, bfloat16) are reduced through float32. */
enum hvdlite_dtype {
  HVDLITE_UINT8 = 0,
  HVDLITE_INT8 = 1,
  HVDLITE_INT16 = 2,
  HVDLITE_INT32 = 3,
  HVDLITE_INT64 = 4,
  HVDLITE_FLOAT16 = 5,
  HVDLITE_BFLOAT16 = 6,
  HVDLITE_FLOAT32 = 7,
  HVDLITE_FLOAT64 = 8,
  HVDLITE_BOOL = 9,
  HVDLITE_UINT16 = 10
};

/* Reduction operators, numbered as Horovod numbers them. */
enum hvdlite_reduce_op {
  HVDLITE_OP_AVERAGE = 0,
  HVDLITE_OP_SUM = 1,
  HVDLITE_OP_ADASUM = 2,
  HVDLITE_OP_MIN = 3,
  HVDLITE_OP_MAX = 4,
  HVDLITE_OP_PRODUCT = 5
};

enum hvdlite_collective {
  HVDLITE_ALLREDUCE = 0,
  HVDLITE_ALLGATHER = 1,
  HVDLITE_BROADCAST = 2,
  HVDLITE_ALLTOALL = 3,
  HVDLITE_REDUCESCATTER = 4,
  HVDLITE_BARRIER = 5,
  HVDLITE_JOIN = 6
};

/* How a collective's output is sized (hvdlite_collective_info.output). */
enum hvdlite_output_rule {
  HVDLITE_OUTPUT_LIKE_INPUT = 0,   /* the caller's buffer, shaped as the input (allreduce, broadcast) */
  HVDLITE_OUTPUT_RANK_BLOCK = 1,   /* the caller's buffer, this rank's block of the input's first dimension: the first
                                      dim0 % size ranks of the set get one row more (reducescatter) */
  HVDLITE_OUTPUT_GATHERED = 2,     /* rows from other ranks: every rank's (allgather) or those sent here (alltoall);
                                      the core allocates it, except for a GPU request (see hvdlite_request.output) */
  HVDLITE_OUTPUT_NONE = 3          /* no tensor (barrier, join) */
};

/* What one collective's request holds and how its output is sized: one entry per enum hvdlite_collective, read by
 * every adapter and by the core's own checks. Fields a collective does not take are ignored in its requests. */
typedef struct {
  const char *name;        /* "allreduce", ...: in messages, and the stem of automatic tensor names */
  int32_t output;          /* enum hvdlite_output_rule */
  int32_t takes_op;        /* reduce_op, prescale_factor and postscale_factor are read (and must agree) */
  int32_t takes_root;      /* root_rank is read (and must agree) */
  int32_t takes_splits;    /* splits is read */
  int32_t min_ndim;        /* fewer dimensions are refused: 1 where rows are gathered, split or scattered */
} hvdlite_collective_info;

/* The description of collective (enum hvdlite_collective), or NULL for a number that is none. */
const hvdlite_collective_info *hvdlite_collective_describe(int32_t collective);
/* The output's first dimension on rank set_rank of a set of set_size ranks, for an input whose first dimension is
 * first_dim; -1 where the caller cannot know it alone (GATHERED, NONE) or the arguments are out of range. */
int64_t hvdlite_output_first_dim(int32_t collective, int64_t first_dim, int32_t set_size, int32_t set_rank);

/* When async collectives run while ranks still compute: AUTO overlaps them only where every rank of a
 * node has a core of its own beyond its training thread (more cores than local ranks). */
enum hvdlite_overlap {
  HVDLITE_OVERLAP_AUTO = 0,
  HVDLITE_OVERLAP_ON = 1,
  HVDLITE_OVERLAP_OFF = 2
};

/* Whether a negotiation round may ride in the last all-reduce of the round before it (each of its bits one element
 * of that batch, reduced with it), so that a step whose tensors keep coming exchanges no separate round: AUTO
 * across hosts (one host's round costs microseconds), ON, OFF. Every rank must use the same value. */
enum hvdlite_carried_rounds {
  HVDLITE_CARRIED_ROUNDS_AUTO = 0,
  HVDLITE_CARRIED_ROUNDS_ON = 1,
  HVDLITE_CARRIED_ROUNDS_OFF = 2
};

/* The core's log levels (hvdlite_config.log_level): lines below the level are not written. */
enum hvdlite_log_level {
  HVDLITE_LOG_TRACE = 0,
  HVDLITE_LOG_DEBUG = 1,
  HVDLITE_LOG_INFO = 2,
  HVDLITE_LOG_WARNING = 3,
  HVDLITE_LOG_ERROR = 4,
  HVDLITE_LOG_FATAL = 5
};

/* AUTO on one host: MPI_Allreduce below auto_ring_min_bytes; from there DIRECT where the ranks may read each
 * other's memory (process_vm_readv), else RING. AUTO across hosts: MPI_Allreduce below
 * auto_cross_host_ring_min_bytes; from there HIERARCHICAL where every host has as many ranks, else RING.
 * HIERARCHICAL forced on a process set other than the global one runs the RING. */
enum hvdlite_allreduce_algorithm {
  HVDLITE_ALGORITHM_AUTO = 0,
  HVDLITE_ALGORITHM_RING = 1,
  HVDLITE_ALGORITHM_MPI = 2,
  HVDLITE_ALGORITHM_DIRECT = 3,
  HVDLITE_ALGORITHM_HIERARCHICAL = 4
};

/* What the ring across hosts runs on: TCP, the core's own connections between the hosts (its waits block in the
 * kernel instead of keeping a core busy; MPI where they cannot be opened), or MPI's point-to-point. */
enum hvdlite_cross_host_transport {
  HVDLITE_CROSS_HOST_TCP = 0,
  HVDLITE_CROSS_HOST_MPI = 1
};

/* Settings resolved by the Python configuration table (hvdlite/config.py) and handed over at init. */
typedef struct {
  int64_t fusion_threshold_bytes;   /* 0 disables fusion */
  double cycle_time_ms;             /* longest idle wait between negotiation rounds */
  int32_t cache_capacity;           /* response cache entries; 0 disables the fast path */
  double stall_check_seconds;       /* warn about stalled tensors after this; 0 disables */
  double stall_shutdown_seconds;    /* fail stalled tensors after this; 0 never */
  double progress_timeout_seconds;  /* end this process when a collective makes no progress this long; 0 never */
  int32_t allreduce_algorithm;      /* enum hvdlite_allreduce_algorithm */
  int64_t ring_segment_bytes;       /* pipelining segment of the ring */
  int64_t auto_ring_min_bytes;      /* auto on one host: ring or direct from this many bytes, MPI below */
  int64_t auto_cross_host_ring_min_bytes; /* auto across hosts, and the hierarchical one's step across hosts:
                                             the ring from this many bytes, MPI below; negative: by layout
                                             (256 KiB where every host has one rank, else 1 MiB) */
  int32_t log_level;                /* enum hvdlite_log_level */
  const char *timeline_path;        /* NULL or "" for none */
  int32_t timeline_mark_cycles;
  int32_t autotune;                 /* tune fusion threshold and cycle time online */
  const char *autotune_log;         /* CSV of autotune trials, NULL or "" for none */
  int64_t eager_max_bytes;          /* small all-reduces carried by the negotiation round; 0 disables */
  int32_t overlap;                  /* enum hvdlite_overlap */
  int32_t autotune_warmup_samples;  /* autotune: first samples scored but not used */
  int32_t autotune_steps_per_sample; /* autotune: negotiation rounds that carried work, per sample */
  int32_t cross_host_transport;     /* enum hvdlite_cross_host_transport */
  const char *network_interfaces;   /* interfaces the TCP ring across hosts may use, comma-separated; NULL or "" any */
  int32_t carried_rounds;           /* enum hvdlite_carried_rounds */
  double deadlock_seconds;          /* every rank waiting this long for collectives the others never submitted:
                                       shut down on every rank, failing them with the stall report; 0 never */
  int32_t round_doubling_min_hosts; /* from this many hosts the negotiation round crosses hosts in log2(hosts) steps
                                       (dissemination over connections at doubling distances), below it around the
                                       ring; with the TCP transport */
} hvdlite_config;

/* One request: what a rank contributes to one named collective. */
typedef struct {
  int32_t collective;        /* enum hvdlite_collective */
  const char *name;          /* identifies the tensor across ranks; unique while in flight */
  int32_t dtype;             /* enum hvdlite_dtype */
  int32_t ndim;
  const int64_t *shape;
  const void *input;
  void *output;              /* caller-allocated for allreduce, broadcast, reducescatter (may equal input);
                                NULL for allgather and alltoall, whose output the core allocates, except for a
                                GPU request: its output is always the caller's, sized from the other ranks'
                                first dimensions (allgather) or splits (alltoall), exchanged beforehand */
  int32_t reduce_op;         /* enum hvdlite_reduce_op */
  double prescale_factor;
  double postscale_factor;
  int32_t root_rank;         /* broadcast: rank within the process set */
  const int32_t *splits;     /* alltoall: rows sent to each rank of the set; NULL means equal */
  int32_t process_set_id;    /* 0 is the global set */
  int64_t prepared;          /* 0, or hvdlite_prepare's token for this very request (see there) */
  int32_t gpu;               /* 1: input and output are memory of GPU gpu_device, written by work enqueued on
                                gpu_stream (a CUstream; NULL for the legacy default stream): NCCL runs the
                                collective after that work (see hvdlite_gpu_load) */
  int32_t gpu_device;
  void *gpu_stream;
} hvdlite_request;

typedef int64_t hvdlite_handle;
typedef int64_t hvdlite_prepared;

/* Lifecycle. comm_address is the address of an MPI_Comm (mpi4py: MPI._addressof(comm)) or NULL for
 * MPI_COMM_WORLD. MPI must already be initialised (by mpi4py). Returns 0, or nonzero with a message. */
int hvdlite_init(const hvdlite_config *config, const void *comm_address, char *error, int error_len);
void hvdlite_shutdown(void);
int hvdlite_is_initialized(void);

int hvdlite_rank(void);
int hvdlite_size(void);
int hvdlite_local_rank(void);
int hvdlite_local_size(void);
int hvdlite_cross_rank(void);
int hvdlite_cross_size(void);
int hvdlite_mpi_threads_supported(void);

/* Process sets: every rank of the job calls add/remove with the same arguments, in the same order.
 * add returns a handle whose result (hvdlite_handle_result) is the new set's id. */
hvdlite_handle hvdlite_add_process_set(const int32_t *ranks, int32_t nranks, char *error, int error_len);
hvdlite_handle hvdlite_remove_process_set(int32_t process_set_id, char *error, int error_len);
/* The same set, asked for by its members only (a framework that makes a group on its members alone): done once
 * they all have asked, the other ranks taking part on their own. A set of these ranks that exists is the result. */
hvdlite_handle hvdlite_add_process_set_of_members(const int32_t *ranks, int32_t nranks, char *error, int error_len);
/* This rank's rank inside the set, or -1 if it is not a member or there is no such set. */
int hvdlite_process_set_rank(int32_t process_set_id);

/* Prepared requests: a request submitted again and again (a gradient every step) is registered once, and
 * its token stored in its `prepared` field; from then on a submission of it reads only input and output (the
 * rest stays as prepared: change nothing else, or prepare again) and the core skips copying, hashing and
 * checking it. Returns the token (> 0), or a negative code as hvdlite_enqueue's with error filled. A token the
 * core no longer knows (unprepared, or prepared before a shutdown) makes the request go by value, as if 0.
 * Unprepare once the request is no longer submitted (one in flight still completes). */
hvdlite_prepared hvdlite_prepare(const hvdlite_request *request, char *error, int error_len);
void hvdlite_unprepare(hvdlite_prepared prepared);

/* Enqueue returns at once. A positive handle on success; on a request that can never run (bad dtype,
 * name already in flight, core not running) it returns a negative code and fills error:
 * -1 invalid argument, -2 duplicate name in flight, -3 not initialised or shut down. */
hvdlite_handle hvdlite_enqueue(const hvdlite_request *request, char *error, int error_len);
/* Enqueues several requests that must be executed together (fused where their types allow).
 * handles receives count handles; returns 0 or a negative code as above (then nothing is enqueued). */
int hvdlite_enqueue_group(const hvdlite_request *requests, int32_t count, hvdlite_handle *handles,
                          char *error, int error_len);

/* Enqueue and wait in one call, for synchronous collectives: the background thread starts the round at
 * once (no coalescing window). A negative code as above when nothing was enqueued; otherwise *handle is
 * set and the result is hvdlite_wait's (0 success, 1 error). Release the handle afterwards. */
int hvdlite_enqueue_and_wait(const hvdlite_request *request, hvdlite_handle *handle, char *error, int error_len);

/* 1 done (successfully or not), 0 pending, -1 unknown handle. */
int hvdlite_poll(hvdlite_handle handle);
/* 1 when every handle is done (unknown ones count as done), else 0. */
int hvdlite_all_done(const hvdlite_handle *handles, int32_t count);
/* hvdlite_wait_all's result where it would return at once (all done, or one unknown), else -2 (pending):
 * lets a caller keep its interpreter lock for a wait that does not block. */
int hvdlite_wait_all_done(const hvdlite_handle *handles, int32_t count);
/* Blocks until done (callers release the GIL). 0 on success, 1 on error, -1 unknown handle. */
int hvdlite_wait(hvdlite_handle handle);
/* Waits for every handle (a group): -1 if one is unknown, else 0 when all succeeded, or 1 + the index of
 * the first that failed (read its error, then release them all). */
int hvdlite_wait_all(const hvdlite_handle *handles, int32_t count);
/* hvdlite_wait_all that gives up after timeout_seconds (a negative one: never), then returning -2 (pending). */
int hvdlite_wait_all_for(const hvdlite_handle *handles, int32_t count, double timeout_seconds);
/* Waits until one of the handles is done (succeeded or failed) or unknown and returns the first such index; -2
 * (pending) once timeout_seconds have passed (a negative one: never). For a receive from whichever peer sends
 * first: read the handle's state with hvdlite_poll and hvdlite_handle_error. */
int hvdlite_wait_any_for(const hvdlite_handle *handles, int32_t count, double timeout_seconds);
/* Copies the error message of a failed handle; returns its length (0 when there is none). */
int hvdlite_handle_error(hvdlite_handle handle, char *buffer, int buffer_len);
/* Integer result of the handle: join -> last rank to join; add_process_set -> new id. */
int64_t hvdlite_handle_result(hvdlite_handle handle);
/* Output allocated by the core (allgather, alltoall): shape and bytes, valid until release. */
int hvdlite_handle_output_ndim(hvdlite_handle handle);
int hvdlite_handle_output_shape(hvdlite_handle handle, int64_t *shape, int32_t capacity);
const void *hvdlite_handle_output_data(hvdlite_handle handle, int64_t *nbytes);
/* alltoall: rows received from each rank. Returns the count written or -1. */
int hvdlite_handle_received_splits(hvdlite_handle handle, int32_t *splits, int32_t capacity);
void hvdlite_release(hvdlite_handle handle);
/* Releases a handle that has succeeded and returns 0, under one lock (a finished wait and its release take two);
 * else leaves it and returns what hvdlite_wait_all_done would: -2 pending, 1 failed, -1 unknown. */
int hvdlite_release_if_succeeded(hvdlite_handle handle);
void hvdlite_release_all(const hvdlite_handle *handles, int32_t count);

/* Timeline at run time; path is only written on the coordinator (rank 0 of the global set). */
int hvdlite_start_timeline(const char *path, int mark_cycles);
int hvdlite_stop_timeline(void);

/* Copies the last log line the core wrote at warning level or above (for tests); returns its length. */
int hvdlite_last_warning(char *buffer, int buffer_len);

/* GPU libraries: the CUDA driver (libcuda.so.1) and NCCL (libnccl.so.2), opened at run time, never needed to
 * build or import hvdlite. The first call loads them (later calls report that first result): NCCL from
 * nccl_library alone when it is non-empty, else a copy already loaded in the process, the folders of
 * nccl_search_dirs (':'-separated), and the default search. Reasons say why something was not loaded. */
typedef struct hvdlite_gpu_status {
  int32_t driver_loaded; /* opened, every function found, cuInit succeeded */
  int32_t device_count;
  int32_t nccl_loaded;   /* opened and every function found */
  int32_t nccl_version;  /* ncclGetVersion's code */
  char nccl_version_text[32];
  char driver_reason[512];
  char nccl_path[1024];
  char nccl_reason[4096];
} hvdlite_gpu_status;
void hvdlite_gpu_load(const char *nccl_library, const char *nccl_search_dirs, hvdlite_gpu_status *status);

/* A GPU request's handle, once done (hvdlite_wait), has its collective enqueued on the core's stream, not
 * finished. hvdlite_gpu_stream_wait makes stream (a CUstream of the tensor's GPU) wait for it without the host
 * waiting; hvdlite_gpu_host_wait blocks until it has finished. Both return 0, or -1 with a message (a handle
 * with no GPU work: 0, nothing to wait for). */
int hvdlite_gpu_stream_wait(hvdlite_handle handle, void *stream, char *error, int error_len);
int hvdlite_gpu_host_wait(hvdlite_handle handle, char *error, int error_len);

#ifdef __cplusplus
}
#endif

#endif /* HVDLITE_H */
