/* Chat templates (attn_chat.h): SmolLM2's template and the plain ChatML
 * one recognized however spaced and quoted, rendered as Jinja renders
 * them (tests/data/chat/chatml.json holds transformers' own renderings,
 * compared by python/tests/test_chat.py); other templates refused quoting
 * them; the render's buffer protocol. */
#include "attn_chat.h"
#include "check.h"

#include <string.h>

static const char SMOL[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] "
    "!= 'system' %}{{ '<|im_start|>system\\nYou are a helpful AI assistant "
    "named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' }}{% endif %}";
static const char CHATML[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' "
    "+ message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
/* the same as CHATML, spaced and quoted otherwise */
static const char CHATML2[] =
    "{%for message in messages%}{{ \"<|im_start|>\"+message[\"role\"]+\"\\n\""
    "\n  + message['content'] + \"<|im_end|>\" + '\\n' }}{%  endfor %}{%if "
    "add_generation_prompt%}{{\"<|im_start|>assistant\n\"}}{% endif%}";

static attn_chat_template *parse(const char *s) {
    attn_chat_template *t = NULL;
    CHECK_STATUS(attn_chat_template_parse(s, strlen(s), &t), ATTN_OK);
    return t;
}

static void refused(const char *s, size_t len, const char *quoted) {
    attn_chat_template *t = (attn_chat_template *)1;
    CHECK_STATUS(attn_chat_template_parse(s, len, &t), ATTN_E_UNSUPPORTED);
    CHECK(t == NULL);
    CHECK_MSG(strstr(attn_last_error(), quoted) != NULL, "message '%s'",
              attn_last_error());
}

static void render_is(const attn_chat_template *t, const attn_chat_message *m,
                      int64_t n, int flags, const char *want) {
    char out[1024];
    size_t len = 0;
    CHECK_STATUS(attn_chat_render(t, m, n, flags, out, sizeof out, &len),
                 ATTN_OK);
    CHECK_MSG(len == strlen(want) && strcmp(out, want) == 0, "got '%s'", out);
}

int main(void) {
    attn_chat_template *smol = parse(SMOL), *cm = parse(CHATML),
                       *cm2 = parse(CHATML2);
    if (!smol || !cm || !cm2) return check_done("test_chat_template");
    CHECK(strcmp(attn_chat_template_default_system(smol),
                 "You are a helpful AI assistant named SmolLM, trained by "
                 "Hugging Face") == 0);
    CHECK(attn_chat_template_default_system(cm) == NULL);
    const attn_chat_message u[] = {
        {"user", "What is 2+2?"}, {"assistant", "4."}, {"user", "Sure?"}};
    const char *sys = "<|im_start|>system\nYou are a helpful AI assistant "
                      "named SmolLM, trained by Hugging Face<|im_end|>\n";
    char want[1024];
    snprintf(want, sizeof want,
             "%s<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
             "<|im_start|>assistant\n",
             sys);
    render_is(smol, u, 1, ATTN_CHAT_GENERATION_PROMPT, want);
    render_is(cm, u, 1, ATTN_CHAT_GENERATION_PROMPT, want + strlen(sys));
    render_is(cm2, u, 1, ATTN_CHAT_GENERATION_PROMPT, want + strlen(sys));
    render_is(smol, u + 2, 1, ATTN_CHAT_GENERATION_PROMPT | ATTN_CHAT_CONTINUE,
              "<|im_start|>user\nSure?<|im_end|>\n<|im_start|>assistant\n");
    const attn_chat_message s[] = {{"system", "Be brief."}, {"user", "Hi"}};
    render_is(smol, s, 2, 0,
              "<|im_start|>system\nBe brief.<|im_end|>\n"
              "<|im_start|>user\nHi<|im_end|>\n");
    /* the buffer protocol: ask, then too small */
    size_t len = 0;
    CHECK_STATUS(attn_chat_render(cm, u, 3, 0, NULL, 0, &len), ATTN_OK);
    CHECK(len == strlen("<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                        "<|im_start|>assistant\n4.<|im_end|>\n"
                        "<|im_start|>user\nSure?<|im_end|>\n"));
    char small[8];
    size_t len2 = 0;
    CHECK_STATUS(attn_chat_render(cm, u, 3, 0, small, sizeof small, &len2),
                 ATTN_E_SHAPE);
    CHECK(len2 == len);
    const attn_chat_message bad[] = {{"user", NULL}};
    CHECK_STATUS(attn_chat_render(cm, bad, 1, 0, NULL, 0, &len),
                 ATTN_E_INVALID);
    CHECK_STATUS(attn_chat_render(cm, u, 0, 0, NULL, 0, &len), ATTN_E_INVALID);
    /* refusals: other templates, cut ones, text between tags, tricks */
    refused("{{ bos_token }}{% for m in messages %}", 38, "bos_token");
    refused(CHATML, strlen(CHATML) - 1, "message['role']");
    refused(CHATML, 40, "{% for message");
    char buf[2048];
    snprintf(buf, sizeof buf, "%s\n", CHATML);
    refused(buf, strlen(buf), "{% for");
    snprintf(buf, sizeof buf, "%.*s{{ 'x' }}%s", 30, CHATML, CHATML + 30);
    refused(buf, strlen(buf), "{% for");
    /* a default system literal that is two literals joined */
    const char *two =
        "{% for message in messages %}{% if loop.first and messages[0]['role']"
        " != 'system' %}{{ '<|im_start|>system\\nA' + 'B<|im_end|>\\n' }}{% "
        "endif %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if "
        "add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    refused(two, strlen(two), "{% for");
    /* a NUL inside, an unknown escape, control bytes quoted escaped */
    refused(CHATML, sizeof CHATML, "{% for");
    refused("{{ '\\q' }}", 10, "\\x5cq");
    refused("\x01{% x %}", 8, "\\x01");
    attn_chat_template *t = NULL;
    CHECK_STATUS(attn_chat_template_parse(NULL, 0, &t), ATTN_E_INVALID);
    attn_chat_template_free(smol);
    attn_chat_template_free(cm);
    attn_chat_template_free(cm2);
    attn_chat_template_free(NULL);
    return check_done("test_chat_template");
}
