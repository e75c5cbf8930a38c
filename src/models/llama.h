/* The Llama-family model's insides (llama_load.c reads a folder and holds
 * the one name table, llama_gguf.c reads a GGUF file through that table,
 * llama.c runs it). Internal: not installed. */
#ifndef ATTN_LLAMA_INTERNAL_H
#define ATTN_LLAMA_INTERNAL_H

#include "attn_pretrained.h"
#include "attn_transformer.h"
#include "internal.h"

#include <stddef.h>
#include <stdint.h>

/* A 2-D weight as a GGUF file stores it: rows of cols values, each row
 * row_bytes bytes of whole blocks of the type along the input dimension
 * (cols), in the order of the f32 weight it was dequantized into (the Q
 * and K rows un-permuted as the f32 ones are). data points into the
 * model's own copy (valid while the model is). Dequantizing row r with
 * attn_gguf's block formulas gives row r of the f32 weight bit for bit;
 * where the matrix-vector kernel reads blocks packed (AVX512_VNNI) they
 * are kept packed, the same bytes in another order (attn__q_unpack). */
typedef struct {
    int type; /* ATTN_GGML_* (attn_gguf.h)                     */
    int64_t rows, cols;
    size_t row_bytes;
    const unsigned char *data; /* rows * row_bytes bytes                 */
    int packed; /* data in attn__q_pack's layout (kernels/gemv.h)        */
} attn__llama_qweight;

/* The matrices of a layer, in attn__llama_quant.layers order. */
enum {
    ATTN__LQ_Q,    /* (E, E)    w_q                                      */
    ATTN__LQ_K,    /* (KV, E)   w_k                                      */
    ATTN__LQ_V,    /* (KV, E)   w_v                                      */
    ATTN__LQ_O,    /* (E, E)    w_o                                      */
    ATTN__LQ_GATE, /* (F, E)    rows 0 .. F-1 of w_1                     */
    ATTN__LQ_UP,   /* (F, E)    rows F .. 2F-1 of w_1                    */
    ATTN__LQ_DOWN, /* (E, F)    w_2                                      */
    ATTN__LQ_N
};

/* The quantized weights of a model loaded from a GGUF file, kept beside
 * the f32 ones for matrix-vector products that read the file's bytes. */
typedef struct {
    attn__llama_qweight embed;   /* (V, E) token_embd                      */
    attn__llama_qweight head;    /* (V, E) output; rows 0 when tied        */
    attn__llama_qweight *layers; /* num_layers * ATTN__LQ_N                */
    unsigned char *store;        /* the bytes everything points into       */
} attn__llama_quant;

struct attn_llama {
    attn_llama_config cfg;
    attn_decoder_config dec;  /* the decoder stack it runs on            */
    float *embed;             /* (V, E)                                  */
    float *params;            /* attn_decoder_param_count floats         */
    float *head;              /* (V, E): embed when tied                 */
    float *own_head;          /* head's storage when not tied, else NULL */
    struct attn_bpe *tok;     /* tokenizer.json or GGUF metadata, or NULL */
    attn__llama_quant *quant; /* the GGUF file's weights, or NULL        */
    char *chat_template;      /* tokenizer.chat_template, or NULL        */
};

/* The destinations of the name table (llama_load.c). */
typedef enum {
    DST_EMBED,
    DST_NORM,
    DST_HEAD,
    DST_WQ,
    DST_BQ,
    DST_WK,
    DST_BK,
    DST_WV,
    DST_BV,
    DST_WO,
    DST_LN1,
    DST_LN3,
    DST_GATE,
    DST_UP,
    DST_DOWN
} attn__llama_dst;

/* Where one checkpoint tensor goes. */
typedef struct {
    float *dst; /* rows * cols floats                                    */
    attn__llama_dst kind;
    int64_t layer; /* -1: not per layer                                  */
    int64_t rows, cols;
} attn__llama_slot;

/* Allocates the parameters of m->cfg (zeroed) and sets m->dec, m->head. */
attn_status attn__llama_alloc(attn_llama *m);
/* The number of entries of the seen[] array the two calls below share. */
int64_t attn__llama_slots(const attn_llama *m);
/* The table's slot for the tensor called name (gguf: a GGUF file's names),
 * checking that this config wants it, its shape (ndim, shape row-major)
 * and that it comes once; path names the file in messages. */
attn_status attn__llama_place(attn_llama *m, const char *path, const char *name,
                              int gguf, int ndim, const int64_t *shape,
                              uint8_t *seen, attn__llama_slot *out);
/* ATTN_E_FORMAT naming the first wanted tensor not seen. */
attn_status attn__llama_check_seen(const attn_llama *m, const char *label,
                                   const uint8_t *seen, int gguf);
/* Reads a GGUF file into m (llama_gguf.c), or a file already parsed
 * (label names it in messages); m zeroed, freed by attn_llama_free on
 * failure too. */
attn_status attn__llama_load_gguf(attn_llama *m, const char *path);
struct attn_gguf;
attn_status attn__llama_from_gguf(attn_llama *m, const struct attn_gguf *g,
                                  const char *label);
void attn__llama_quant_free(attn__llama_quant *q);

#endif /* ATTN_LLAMA_INTERNAL_H */
