/* The machine's memory read bandwidth, measured so that it is a ceiling:
 * several read methods, each on 1 and 2 threads, over a buffer several
 * times the last-level cache, best of a few reads; and the flush that
 * makes a timed kernel read its data from memory, not from that cache.
 * The decode benchmark and any other memory-bound case divide by it. */
#ifndef BENCH_MEM_H
#define BENCH_MEM_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    double gbps[3];        /* best GB/s on 1 and 2 threads (index 1, 2)  */
    const char *method[3]; /* the method that gave it                    */
    size_t bytes;          /* size of the probe's buffer                 */
    size_t llc_bytes;      /* last-level cache as the system reports it  */
    const uint64_t *buf;   /* the probe's buffer (also the flush's)      */
    size_t flush_words;    /* words read by bench_mem_flush              */
} bench_mem;

/* Allocates the buffer (mb MiB, or 0: the larger of 1 GiB and 4x the
 * last-level cache) and measures; 0 on success, -1 if it cannot allocate.
 * The flush reads max(64 MiB, 2x the last-level cache), at most the
 * buffer. */
int bench_mem_measure(bench_mem *m, int64_t mb);
void bench_mem_free(bench_mem *m);

/* Reads the flush part of the buffer with t threads. */
void bench_mem_flush(const bench_mem *m, int t);

/* The share of the ceiling that gbps is, for a table: "87%", or, past
 * 100%, "112% (above the measured ceiling: the probe is low)". */
void bench_mem_share(double gbps, double ceiling, char *buf, size_t cap);

#endif
