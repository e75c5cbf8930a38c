/* Internal helpers for the library's little-endian binary files (parameter
 * files, training checkpoints): field packing, CRC32, reading a whole file
 * and writing one atomically. Not installed. */
#ifndef ATTN_BINFILE_H
#define ATTN_BINFILE_H

#include "internal.h"

#include <stdio.h>
#include <string.h>

static inline void attn__put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void attn__put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t attn__get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t attn__get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* n floats as little-endian IEEE words at p (4 n bytes), and back. */
void attn__put_f32s(unsigned char *p, const float *x, int64_t n);
void attn__get_f32s(const unsigned char *p, float *x, int64_t n);

/* CRC-32 (IEEE, as zlib's crc32) of n bytes: parameter files and training
 * checkpoints close with it. */
uint32_t attn__crc32(const unsigned char *p, size_t n);

/* ATTN_E_FORMAT "path: what". */
attn_status attn__bad_file(const char *path, const char *what);

/* Opens path for reading: without blocking (a FIFO would wait for a
 * writer), then refusing anything that is not a regular file (a FIFO, a
 * folder, a device) with ATTN_E_IO "PATH: cannot read: it is a FIFO, not
 * a regular file". Every input reader opens its files through these.
 * *size: the file's size. */
attn_status attn__open_input(const char *path, int *fd, uint64_t *size);
attn_status attn__fopen_input(const char *path, FILE **f, uint64_t *size);

/* Maps path read-only (opened as attn__open_input does): *map (NULL for an
 * empty file) and *size; release with munmap(*map, *size). ATTN_E_NOMEM
 * when it cannot fit the address space, ATTN_E_IO when it cannot map. */
attn_status attn__map_input(const char *path, void **map, size_t *size);

/* Reads the whole of path into *buf (free with attn__free; a NUL follows
 * the bytes), its length in *size. A file shorter than min is
 * ATTN_E_FORMAT "too short to be KIND (truncated?)", e.g. kind "a
 * checkpoint"; one longer than max is ATTN_E_FORMAT "too large to be
 * KIND", before anything is allocated. */
attn_status attn__read_file_max(const char *path, size_t min, size_t max,
                                const char *kind, unsigned char **buf,
                                size_t *size);
attn_status attn__read_file(const char *path, size_t min, const char *kind,
                            unsigned char **buf, size_t *size);

/* One piece of a file being written: n bytes at p. */
typedef struct {
    const void *p;
    size_t n;
} attn__piece;

/* Writes the pieces, in order, to path. A regular file (or a new name) is
 * written through a temporary file in the same folder, fsync'ed, renamed
 * over path, and the folder fsync'ed: a reader sees the old file or the
 * new one, never half a file, and a failure leaves the old file as it
 * was. A replaced file keeps its permission bits; a new one gets 0666
 * less the umask. A symbolic link is followed and its target replaced the
 * same way (the link stays); a dangling link is refused. A character
 * device or a FIFO (/dev/null, a pipe) is written through in place: never
 * unlinked, renamed over or truncated. Anything else (a folder, a block
 * device, a socket) is refused with ATTN_E_IO. Orphan temporaries of the
 * same name left by a killed writer (PATH.tmpXXXXXX, no writer holding
 * its lock) are removed first. */
attn_status attn__write_pieces(const char *path, const attn__piece *pieces,
                               int npieces);

/* Whether attn__write_pieces(path) would be refused for what path is: the
 * same rule, checked before a long computation rather than after it (a
 * folder, a dangling link, a missing or read-only folder: ATTN_E_IO with
 * the writer's message). Writes nothing. */
attn_status attn__check_output(const char *path);

/* The same for a folder a command writes files into: an existing folder
 * that takes files, or a new name in a folder that does. */
attn_status attn__check_output_dir(const char *path);

/* attn__write_pieces with one piece. */
attn_status attn__write_atomic(const char *path, const unsigned char *buf,
                               size_t size);

#endif
