/* Status classes and the thread-local detail message. */
#include "internal.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <string.h>
#if defined(__GLIBC__) || defined(__linux__)
#include <malloc.h> /* malloc_usable_size: the bytes a block really holds */
#define ATTN_HAVE_USABLE_SIZE 1
#endif

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

const char *attn_version(void) { return ATTN_VERSION_STRING; }

/* Length of the UTF-8 character at the NUL-terminated s, 0 if invalid. */
static size_t utf8_len(const unsigned char *s) {
    uint32_t cp;
    return attn__utf8_next(s, SIZE_MAX, &cp);
}

int attn__utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        const size_t n = utf8_len(p);
        if (!n) return 0;
        p += n;
    }
    return 1;
}

size_t attn__escape(const char *in, char *out, size_t cap) {
    size_t o = 0;
    if (cap == 0) return 0;
    const unsigned char *s = (const unsigned char *)in;
    while (*s) {
        size_t n = utf8_len(s);
        if (n == 1 && *s >= 0x20 && *s != 0x7f) {
            if (o + 1 >= cap) break;
            out[o++] = (char)*s++;
        } else if (n > 1) {
            if (o + n >= cap) break;
            memcpy(out + o, s, n);
            o += n;
            s += n;
        } else {
            /* control byte, DEL or a byte that is not valid UTF-8 */
            if (o + 4 >= cap) break;
            static const char hex[] = "0123456789abcdef";
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hex[*s >> 4];
            out[o++] = hex[*s & 15];
            s++;
        }
    }
    out[o] = '\0';
    return o;
}

attn_status attn__fail(attn_status status, const char *fmt, ...) {
    /* messages quote input (paths, header keys, names): bytes that would
     * reach a terminal as control codes or invalid UTF-8 are written as
     * \xNN */
    char raw[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    attn__escape(raw, last_error, sizeof last_error);
    return status;
}

/* Bytes held through attn__alloc now and at the peak (the benchmark's
 * "extra memory"): counted with the allocator's own block sizes, so a free
 * subtracts exactly what the allocation added. */
static _Atomic size_t alloc_now, alloc_peak;

static void count_alloc(void *p) {
#ifdef ATTN_HAVE_USABLE_SIZE
    size_t now = atomic_fetch_add(&alloc_now, malloc_usable_size(p)) +
                 malloc_usable_size(p);
    size_t peak = atomic_load(&alloc_peak);
    while (now > peak &&
           !atomic_compare_exchange_weak(&alloc_peak, &peak, now)) {
    }
#else
    (void)p;
#endif
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
    if (!p)
        attn__fail(ATTN_E_NOMEM, "%s: cannot allocate %zu bytes", what, bytes);
    else
        count_alloc(p);
    return p;
}

void attn__free(void *p) {
    if (!p) return;
#ifdef ATTN_HAVE_USABLE_SIZE
    atomic_fetch_sub(&alloc_now, malloc_usable_size(p));
#endif
    free(p);
}

void attn__free_each(void *const *p, size_t n) {
    for (size_t i = 0; i < n; i++) attn__free(p[i]);
}

attn_status attn__nonnull(const char *names, const void *const *p, size_t n) {
    for (size_t i = 0; i < n; i++, names += strcspn(names, ",")) {
        names += strspn(names, ", ");
        if (!p[i])
            return attn__fail(ATTN_E_INVALID, "%.*s is NULL",
                              (int)strcspn(names, ","), names);
    }
    return ATTN_OK;
}

int attn__name_index(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(name, names[i]) == 0) return i;
    return -1;
}

attn_status attn__ids_check(const int32_t *ids, int64_t n, int64_t vocab,
                            const char *name) {
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return attn__fail(ATTN_E_INVALID, "%s[%lld] is %d; ids are 0..%lld",
                              name, (long long)i, ids[i], (long long)vocab - 1);
    return ATTN_OK;
}

attn_status attn__lengths_check(const int64_t *lengths, int64_t B, int64_t L,
                                const char *name, const char *bound) {
    for (int64_t b = 0; lengths && b < B; b++)
        if (lengths[b] < 1 || lengths[b] > L)
            return attn__fail(
                ATTN_E_SHAPE, "%s[%lld] is %lld; it must be in [1, %s%lld]",
                name, (long long)b, (long long)lengths[b], bound, (long long)L);
    return ATTN_OK;
}

size_t attn__alloc_peak(void) { return atomic_load(&alloc_peak); }
size_t attn__alloc_current(void) { return atomic_load(&alloc_now); }
void attn__alloc_peak_reset(void) {
    atomic_store(&alloc_peak, atomic_load(&alloc_now));
}
