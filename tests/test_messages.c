/* Messages that quote input escape what a terminal would obey: a .npy
 * header whose key holds control bytes and invalid UTF-8 is reported with
 * those bytes as \xNN, valid UTF-8 (a path with accents) is kept. */
#include "attn.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 if s holds no control byte, no DEL and only valid UTF-8 */
static int clean(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p < 0x20 || *p == 0x7f) return 0;
        if (*p < 0x80) {
            p++;
            continue;
        }
        int n = (*p & 0xe0) == 0xc0   ? 2
                : (*p & 0xf0) == 0xe0 ? 3
                : (*p & 0xf8) == 0xf0 ? 4
                                      : 0;
        if (n == 0 || *p == 0xc0 || *p == 0xc1) return 0;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xc0) != 0x80) return 0;
        p += n;
    }
    return 1;
}

int main(void) {
    char dir[] = "/tmp/attn_msg_XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char path[256];
    snprintf(path, sizeof path, "%s/bad.npy", dir);
    /* a v1.0 header with the key 'de\x1b[2J\xff\x01' instead of 'descr' */
    const char hdr[] =
        "{'de\x1b[2J\xff\x01': '<f4', 'fortran_order': False, 'shape': (2,), }";
    char buf[128];
    size_t n = strlen(hdr);
    size_t total = 10 + n + 1;
    size_t pad = (64 - total % 64) % 64;
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)((n + 1 + pad) & 255);
    buf[9] = (char)((n + 1 + pad) >> 8);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (f) {
        fwrite(buf, 1, 10, f);
        fwrite(hdr, 1, n, f);
        for (size_t i = 0; i < pad; i++) fputc(' ', f);
        fputc('\n', f);
        float x[2] = {1, 2};
        fwrite(x, sizeof x, 1, f);
        fclose(f);
    }
    attn_npy a;
    attn_status st = attn_npy_read(path, &a);
    CHECK(st == ATTN_E_FORMAT);
    if (st == ATTN_OK) attn_npy_free(&a);
    const char *m = attn_last_error();
    CHECK_MSG(clean(m), "message has raw bytes: %s", m);
    CHECK_MSG(strstr(m, "\\x1b[2J\\xff\\x01") != NULL, "bytes escaped: %s", m);
    /* valid UTF-8 in a path is quoted as it is */
    snprintf(path, sizeof path, "%s/caf\xc3\xa9.npy", dir);
    CHECK(attn_npy_read(path, &a) == ATTN_E_IO);
    m = attn_last_error();
    CHECK_MSG(strstr(m, "caf\xc3\xa9.npy") != NULL && clean(m),
              "UTF-8 kept: %s", m);
    /* an overlong '/' and a lone continuation byte are not UTF-8 */
    snprintf(path, sizeof path, "%s/\xc0\xaf\x80.npy", dir);
    CHECK(attn_npy_read(path, &a) == ATTN_E_IO);
    m = attn_last_error();
    CHECK_MSG(strstr(m, "\\xc0\\xaf\\x80.npy") != NULL && clean(m),
              "escaped: %s", m);
    snprintf(path, sizeof path, "%s/bad.npy", dir);
    unlink(path);
    rmdir(dir);
    return check_done("test_messages");
}
