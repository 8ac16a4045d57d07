/* The recycled outputs' allocator: see output_arena.h. */
#include "output_arena.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CHUNK_BYTES ((size_t)2 << 20)   /* one huge page */
#define ALIGNMENT ((size_t)64)          /* a cache line: what the core's vector copies like best */
#define LARGEST (CHUNK_BYTES / 4)       /* bigger allocations get their own memory */

/* Before each allocation's data, ALIGNMENT bytes. Its size also says where it lives: over LARGEST, its own. */
typedef struct {
  size_t size;
} Header;

/* At the start of each chunk (the first ALIGNMENT bytes). */
typedef struct {
  size_t live; /* allocations not freed yet */
} Chunk;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Chunk *current;     /* where allocations go */
static size_t used;        /* bytes of current taken, its header included */
static Chunk *spare;       /* one empty chunk kept for the next, so that a step's churn maps nothing */
static size_t chunk_count; /* mapped chunks, current and spare included */

static size_t round_up(size_t bytes) { return (bytes + ALIGNMENT - 1) & ~(ALIGNMENT - 1); }

/* A new chunk, CHUNK_BYTES aligned (so that a pointer finds its chunk by masking), advised for huge pages. */
static Chunk *map_chunk(void) {
  if (spare != NULL) {
    Chunk *chunk = spare;
    spare = NULL;
    return chunk;
  }
  uint8_t *mapped = mmap(NULL, 2 * CHUNK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return NULL;
  uint8_t *start = (uint8_t *)(((uintptr_t)mapped + CHUNK_BYTES - 1) & ~(uintptr_t)(CHUNK_BYTES - 1));
  if (start > mapped) munmap(mapped, (size_t)(start - mapped));
  munmap(start + CHUNK_BYTES, (size_t)(mapped + 2 * CHUNK_BYTES - (start + CHUNK_BYTES)));
#ifdef MADV_HUGEPAGE
  madvise(start, CHUNK_BYTES, MADV_HUGEPAGE); /* advice only: without it, 4 KiB pages */
#endif
  ++chunk_count;
  Chunk *chunk = (Chunk *)start;
  chunk->live = 0;
  return chunk;
}

/* An empty chunk that is not current: kept as the spare, or given back. */
static void drop_chunk(Chunk *chunk) {
  if (spare == NULL) {
    spare = chunk;
    return;
  }
  munmap(chunk, CHUNK_BYTES);
  --chunk_count;
}

static Header *allocate_locked(size_t size) {
  const size_t bytes = ALIGNMENT + round_up(size ? size : 1);
  if (size > LARGEST) {
    Header *header = aligned_alloc(ALIGNMENT, bytes);
    if (header != NULL) header->size = size;
    return header;
  }
  if (current == NULL || used + bytes > CHUNK_BYTES) {
    Chunk *fresh = map_chunk();
    if (fresh == NULL) return NULL;
    current = fresh; /* the full one is given back as its last allocation is freed */
    used = ALIGNMENT;
  }
  Header *header = (Header *)((uint8_t *)current + used);
  used += bytes;
  ++current->live;
  header->size = size;
  return header;
}

static void free_locked(Header *header) {
  if (header->size > LARGEST) {
    free(header);
    return;
  }
  Chunk *chunk = (Chunk *)((uintptr_t)header & ~(uintptr_t)(CHUNK_BYTES - 1));
  if (--chunk->live > 0) return;
  if (chunk == current) {
    used = ALIGNMENT; /* empty: the next allocations start again at its beginning */
  } else {
    drop_chunk(chunk);
  }
}

static Header *header_of(void *data) { return (Header *)((uint8_t *)data - ALIGNMENT); }
static void *data_of(Header *header) { return header ? (uint8_t *)header + ALIGNMENT : NULL; }

void *output_arena_malloc(void *ctx, size_t size) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  Header *header = allocate_locked(size);
  pthread_mutex_unlock(&lock);
  return data_of(header);
}

void *output_arena_calloc(void *ctx, size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size) return NULL;
  void *data = output_arena_malloc(ctx, count * size);
  if (data != NULL) memset(data, 0, count * size);
  return data;
}

void *output_arena_realloc(void *ctx, void *data, size_t size) {
  if (data == NULL) return output_arena_malloc(ctx, size);
  const size_t old = header_of(data)->size;
  void *moved = output_arena_malloc(ctx, size);
  if (moved == NULL) return NULL; /* realloc's contract: the old block stays */
  memcpy(moved, data, old < size ? old : size);
  output_arena_free(ctx, data, old);
  return moved;
}

void output_arena_free(void *ctx, void *data, size_t size) {
  (void)ctx;
  (void)size; /* the header knows */
  if (data == NULL) return;
  pthread_mutex_lock(&lock);
  free_locked(header_of(data));
  pthread_mutex_unlock(&lock);
}

size_t output_arena_chunk_bytes(void) {
  pthread_mutex_lock(&lock);
  const size_t bytes = chunk_count * CHUNK_BYTES;
  pthread_mutex_unlock(&lock);
  return bytes;
}
