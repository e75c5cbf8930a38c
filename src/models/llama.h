/* The Llama-family model's insides (llama_load.c reads it, llama.c runs
 * it). Internal: not installed. */
#ifndef ATTN_LLAMA_INTERNAL_H
#define ATTN_LLAMA_INTERNAL_H

#include "attn_pretrained.h"
#include "attn_transformer.h"
#include "internal.h"

struct attn_llama {
    attn_llama_config cfg;
    attn_decoder_config dec; /* the decoder stack it runs on            */
    float *embed;            /* (V, E)                                  */
    float *params;           /* attn_decoder_param_count floats         */
    float *head;             /* (V, E): embed when tied                 */
    float *own_head;         /* head's storage when not tied, else NULL */
    struct attn_bpe *tok;    /* tokenizer.json, or NULL                 */
};

#endif /* ATTN_LLAMA_INTERNAL_H */
