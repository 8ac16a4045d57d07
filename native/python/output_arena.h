/* An allocator for the output arrays that the NumPy collectives recycle (array_collectives.c hands it to NumPy as
 * a memory handler while it makes one): their data packed end to end in 2 MiB chunks advised for huge pages.
 *
 * Why: outputs made one by one, as each name is first seen, land in the malloc heap between the other
 * allocations of that moment (the name's request, its shape, Python's buffers), and a step that reads and writes
 * outputs scattered that way measured slower, in the caller and in the background thread alike, than the same
 * outputs back to back (docs/decisions/per-tensor-calls-in-c.md). Chunks give every recycled output that
 * layout, whatever else the program allocates meanwhile.
 *
 * Each allocation is a 64-byte header (its size, which also says where it lives) and the data, 64-byte aligned.
 * A chunk counts its live allocations; an empty chunk is reused from its start, or kept as the one spare, or
 * unmapped. Allocations over a quarter of a chunk get their own memory (aligned_alloc). Plain C, no Python:
 * NumPy calls these with the GIL held, and a mutex guards them anyway. */
#pragma once
#include <stddef.h>

#ifndef EXTENSION_INTERNAL
#define EXTENSION_INTERNAL __attribute__((visibility("hidden")))
#endif

/* The four functions of a NumPy memory handler (PyDataMem_Handler's allocator); ctx is unused. */
EXTENSION_INTERNAL void *output_arena_malloc(void *ctx, size_t size);
EXTENSION_INTERNAL void *output_arena_calloc(void *ctx, size_t count, size_t size);
EXTENSION_INTERNAL void *output_arena_realloc(void *ctx, void *data, size_t size);
EXTENSION_INTERNAL void output_arena_free(void *ctx, void *data, size_t size);

/* Bytes mapped for chunks now (the spare included); for tests of boundedness. */
EXTENSION_INTERNAL size_t output_arena_chunk_bytes(void);
