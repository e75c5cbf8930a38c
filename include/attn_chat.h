/* Chat templates: the text a chat model expects for a list of messages.
 * attn has no template engine: it recognizes the ChatML template (the
 * form transformers writes for ChatML models, with or without a default
 * system prompt) by its structure and renders it itself. Any other
 * template is refused, quoting its start.
 *
 * Recognized: after removing whitespace outside string literals inside
 * the {% %} and {{ }} tags (string literals compared by value, in ' or "
 * quotes, escapes \n \t \' \" \\ decoded), with no text between the tags,
 * the template is
 *
 *   {% for message in messages %}
 *   [{% if loop.first and messages[0]['role'] != 'system' %}
 *    {{ '<|im_start|>system\nDEFAULT<|im_end|>\n' }}{% endif %}]
 *   {{ '<|im_start|>' + message['role'] + '\n' + message['content'] +
 *      '<|im_end|>' + '\n' }}
 *   {% endfor %}
 *   {% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}
 *
 * (the bracketed block optional; SmolLM2's template has it). Rendering:
 * "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, preceded by the
 * default system block when there is one and the first message's role is
 * not "system", followed by "<|im_start|>assistant\n" when asked: exactly
 * what the template gives under Jinja (transformers' apply_chat_template).
 */
#ifndef ATTN_CHAT_H
#define ATTN_CHAT_H

#include "attn.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content; /* NUL-terminated UTF-8               */
} attn_chat_message;

typedef struct attn_chat_template attn_chat_template;

/* Recognizes text[0 .. len) (see above) into *out (NULL on failure).
 * Errors: ATTN_E_INVALID (NULL), ATTN_E_UNSUPPORTED (another template,
 * quoted escaped and cut), ATTN_E_NOMEM. */
ATTN_API attn_status attn_chat_template_parse(const char *text, size_t len,
                                              attn_chat_template **out);
ATTN_API void attn_chat_template_free(attn_chat_template *t);
/* The default system prompt's content, or NULL when the template has none
 * (valid while t is). */
ATTN_API const char *
attn_chat_template_default_system(const attn_chat_template *t);

/* The chat_template of a transformers tokenizer_config.json (a string;
 * see above). Errors: ATTN_E_IO (unreadable), ATTN_E_FORMAT (not JSON),
 * ATTN_E_UNSUPPORTED (no chat_template, a list of named templates, or a
 * template not recognized), ATTN_E_NOMEM. */
ATTN_API attn_status attn_chat_template_load(const char *path,
                                             attn_chat_template **out);

/* Flags of attn_chat_render. */
enum {
    ATTN_CHAT_GENERATION_PROMPT = 1, /* add_generation_prompt           */
    ATTN_CHAT_CONTINUE = 2 /* the messages continue a conversation already
                              rendered: no default system block before
                              them (what the rest of the whole
                              conversation's text is)                   */
};

/* The text of msgs[0 .. n) (n >= 1, as transformers asks) into out (cap bytes; NULL with cap 0
 * to ask), NUL-terminated; *len receives its length without the NUL.
 * Errors: ATTN_E_INVALID (NULL where a pointer is needed, a role or
 * content NULL, naming the message), ATTN_E_SHAPE (cap too small: *len
 * still says how much is needed). */
ATTN_API attn_status attn_chat_render(const attn_chat_template *t,
                                      const attn_chat_message *msgs, int64_t n,
                                      int flags, char *out, size_t cap,
                                      size_t *len);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_CHAT_H */
