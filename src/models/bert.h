/* Internal layout of a loaded BERT-family model (src/models). */
#ifndef ATTN_BERT_H
#define ATTN_BERT_H

#include "internal.h"
#include "attn_pretrained.h"

#include <stdatomic.h>

struct attn_bert {
    attn_bert_config cfg;
    attn_encoder_config enc; /* the encoder stack it runs on             */
    float *word, *pos, *type, *ln_g, *ln_b; /* embeddings                 */
    float *params; /* attn_encoder_param_count floats           */
    attn_wordpiece *tok;
    attn_bert_mapped *map; /* one row per tensor of the file            */
    int64_t nmap;
    char *names; /* storage of the rows' names               */
    int bf16;    /* attn_bert_set_dtype(ATTN_BF16)                 */
    /* The encoder's weights packed for the f32 linear maps (NULL: none,
     * they run on OpenBLAS); the weights never change after loading. */
    struct attn__packed_set *packed;
    /* The last forward's buffers, kept for the next (attn_bert_forward):
     * fresh pages cost a sixth of a 32 x 128 batch in page faults. A
     * forward that finds them taken (another thread's) allocates its own. */
    float *buf;
    size_t buf_cap; /* floats */
    atomic_flag buf_busy;
};

/* Packs the encoder's weights into m->packed (left NULL where attn has no
 * packed linear maps); called once the weights are loaded. */
void attn__bert_pack(attn_bert *m);

#endif
