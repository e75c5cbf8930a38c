/* attn_doc_ids_from_cu_seqlens: FlashAttention-style cumulative starts to
 * attn_mask document ids (empty documents, one document, the errors with
 * their messages, ids untouched on error), and attention with those ids
 * against attn_sdpa_forward run document by document (the packed batch of
 * varlen attention is the documents' separate attentions). */
#include "attn.h"
#include "check.h"

#include <string.h>

static void test_ids(void) {
    int64_t ids[8];
    const int64_t cu[5] = {0, 2, 2, 7, 8};
    CHECK_STATUS(attn_doc_ids_from_cu_seqlens(cu, 4, 8, ids), ATTN_OK);
    const int64_t want[8] = {0, 0, 2, 2, 2, 2, 2, 3};
    CHECK(memcmp(ids, want, sizeof want) == 0);
    const int64_t one[2] = {0, 5};
    CHECK_STATUS(attn_doc_ids_from_cu_seqlens(one, 1, 5, ids), ATTN_OK);
    CHECK(ids[0] == 0 && ids[4] == 0);
    const int64_t empty[2] = {0, 0}; /* L = 0: nothing to write */
    CHECK_STATUS(attn_doc_ids_from_cu_seqlens(empty, 1, 0, ids), ATTN_OK);

    struct {
        int64_t cu[4], n, L;
        attn_status st;
        const char *msg;
    } bad[] = {
        {{1, 3, 8},
         2,
         8,
         ATTN_E_INVALID,
         "cu_seqlens[0] is 1; the first document starts at 0"},
        {{0, 5, 3, 8},
         3,
         8,
         ATTN_E_INVALID,
         "cu_seqlens decreases: cu[2] = 3 after cu[1] = 5"},
        {{0, 3, 7},
         2,
         8,
         ATTN_E_SHAPE,
         "cu_seqlens ends at cu[2] = 7 but the sequence has 8 positions"},
        {{0}, 0, 8, ATTN_E_INVALID, "n is 0; at least one document"},
        {{0}, -3, 8, ATTN_E_INVALID, "n is -3"},
    };
    for (size_t c = 0; c < sizeof bad / sizeof bad[0]; c++) {
        for (int i = 0; i < 8; i++) ids[i] = 42;
        CHECK_STATUS(
            attn_doc_ids_from_cu_seqlens(bad[c].cu, bad[c].n, bad[c].L, ids),
            bad[c].st);
        CHECK_MSG(strstr(attn_last_error(), bad[c].msg) != NULL,
                  "case %zu: '%s'", c, attn_last_error());
        CHECK(ids[0] == 42 && ids[7] == 42); /* nothing written */
    }
    CHECK_STATUS(attn_doc_ids_from_cu_seqlens(NULL, 1, 1, ids), ATTN_E_INVALID);
    CHECK_STATUS(attn_doc_ids_from_cu_seqlens(cu, 4, 8, NULL), ATTN_E_INVALID);
}

/* Causal attention over a packed sequence of odd-length documents equals
 * each document's attention on its own, rows and lse. */
static void test_packed(void) {
    enum { H = 3, D = 5, L = 37 };
    const int64_t cu[6] = {0, 1, 18, 18, 29, 37};
    float q[H * L * D], k[H * L * D], v[H * L * D], o[H * L * D], od[H * L * D],
        l[H * L], ld[H * L];
    unsigned long long s = 5;
    for (int i = 0; i < H * L * D; i++) {
        q[i] = (float)test_rand(&s);
        k[i] = (float)test_rand(&s);
        v[i] = (float)test_rand(&s);
    }
    int64_t ids[L];
    CHECK_STATUS(attn_doc_ids_from_cu_seqlens(cu, 5, L, ids), ATTN_OK);
    for (int impl = ATTN_IMPL_REF; impl <= ATTN_IMPL_FLASH; impl++) {
        attn_sdpa_opts op;
        attn_sdpa_opts_init(&op);
        op.impl = (attn_impl)impl;
        op.mask.causal = 1;
        op.mask.doc_q = ids;
        op.mask.n_doc_q = L;
        attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, H, L, D);
        attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, H, L, D);
        attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, H, L, D);
        attn_tensor O = attn_tensor_4d(o, ATTN_F32, 1, H, L, D);
        CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &op, &O, NULL, l), ATTN_OK);
        /* each document alone: views of its rows */
        attn_sdpa_opts od1;
        attn_sdpa_opts_init(&od1);
        od1.impl = (attn_impl)impl;
        od1.mask.causal = 1;
        for (int d = 0; d < 5; d++) {
            const int64_t a = cu[d], n = cu[d + 1] - cu[d];
            if (n == 0) continue;
            attn_tensor Qd = Q, Kd = K, Vd = V, Od = O;
            Qd.data = q + a * D, Kd.data = k + a * D, Vd.data = v + a * D;
            Od.data = od + a * D;
            Qd.shape[2] = Kd.shape[2] = Vd.shape[2] = Od.shape[2] = n;
            float lt[H * L];
            CHECK_STATUS(attn_sdpa_forward(&Qd, &Kd, &Vd, &od1, &Od, NULL, lt),
                         ATTN_OK);
            for (int h = 0; h < H; h++)
                for (int64_t i = 0; i < n; i++)
                    ld[h * L + a + i] = lt[h * n + i];
        }
        double e = 0, el = 0;
        for (int i = 0; i < H * L * D; i++) e = fmax(e, fabs(o[i] - od[i]));
        for (int i = 0; i < H * L; i++) el = fmax(el, fabs(l[i] - ld[i]));
        CHECK_MSG(e < 1e-6 && el < 1e-5, "impl %d: packed vs one by one %g, %g",
                  impl, e, el);
    }
}

int main(void) {
    test_ids();
    test_packed();
    return check_done("test_cu_seqlens");
}
