/* Status classes and the thread-local detail message. */
#include "internal.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char last_error[512];

static const char *const status_names[ATTN_STATUS_COUNT] = {
    "ok",
    "invalid argument",
    "shape mismatch",
    "unsupported dtype",
    "unsupported",
    "out of memory",
    "I/O error",
    "malformed file",
    "non-finite input",
};

const char *attn_strerror(attn_status status) {
    if ((int)status < 0 || (int)status >= ATTN_STATUS_COUNT)
        return "unknown status";
    return status_names[status];
}

const char *attn_last_error(void) { return last_error; }

void attn_clear_error(void) { last_error[0] = '\0'; }

const char *attn_version(void) { return "0.1.0"; }

attn_status attn__fail(attn_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

void *attn__alloc(size_t n, size_t sz, const char *what) {
    size_t bytes;
    if (!attn__mul_size(n, sz, &bytes) || bytes > SIZE_MAX - 64) {
        attn__fail(ATTN_E_NOMEM, "%s: %zu x %zu bytes overflows", what, n, sz);
        return NULL;
    }
    /* aligned_alloc wants a multiple of the alignment */
    bytes = (bytes + 63) & ~(size_t)63;
    if (bytes == 0) bytes = 64;
    void *p = aligned_alloc(64, bytes);
    if (!p) attn__fail(ATTN_E_NOMEM, "%s: cannot allocate %zu bytes", what, bytes);
    return p;
}

void attn__free(void *p) { free(p); }
