/* attn chat FILE: a conversation with a chat model of the Llama family.
 * Each turn is the user's line in the model's chat template (attn_chat.h:
 * ChatML), fed into one generation session whose KV cache holds the whole
 * conversation, so a turn runs only its own tokens; the answer streams as
 * it is produced and stops at the template's end-of-turn token. */
#include "cli.h"
#include "attn_chat.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void cmd_chat_help(void) {
    printf(
        "usage: attn chat MODEL [--prompt TEXT] [--system TEXT] [--context 4096]\n"
        "                 [--max-new-tokens 256] [--sample] [--temperature 1]\n"
        "                 [--top-k 0] [--top-p 1] [--seed 0] [--threads 0]\n"
        "\n"
        "Chats with the Llama-family chat model MODEL (a GGUF file, or a folder\n"
        "with tokenizer_config.json's chat_template) in its ChatML template. With\n"
        "--prompt, one turn; otherwise each line read from standard input is a\n"
        "turn (a terminal or a pipe; /reset starts the conversation over, /quit\n"
        "or the end of input ends it). --system gives the system prompt (else\n"
        "the template's default, if it has one). The conversation stays in the\n"
        "KV cache (at most --context tokens): a turn runs only its own tokens.\n"
        "Answers stream as they are produced, greedy by default or sampled as\n"
        "in attn generate, and end at the end-of-turn token <|im_end|>; the\n"
        "speed is printed to standard error after each.\n");
}

typedef struct {
    const char *cmd;
    attn_llama *m;
    const attn_bpe *tok;
    attn_chat_template *tmpl;
    attn_llama_session *s;
    attn_llama_gen_opts o;
    const char *system;
    int32_t end_id; /* <|im_end|>, or the config's eos */
    int ended;      /* the last answer ended with end_id */
    int32_t *ids, *out;
    int64_t ids_cap;
    cli_streamer sm;
} chat;

/* The template of the model at path: a GGUF file's
 * tokenizer.chat_template, a folder's tokenizer_config.json. */
static int load_template(chat *c, const char *path) {
    struct stat sb;
    attn_status st;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char p[4096];
        snprintf(p, sizeof p, "%s/tokenizer_config.json", path);
        st = attn_chat_template_load(p, &c->tmpl);
    } else {
        const char *t = attn_llama_chat_template(c->m);
        if (!t) {
            fprintf(stderr,
                    "attn %s: the file has no tokenizer.chat_template: "
                    "it cannot chat\n",
                    c->cmd);
            return 1;
        }
        st = attn_chat_template_parse(t, strlen(t), &c->tmpl);
    }
    return st ? cli_fail(c->cmd, st, "the chat template") : 0;
}

/* The ids of text (special tokens such as <|im_start|> recognized) into
 * c->ids; *n their count. */
static int encode(chat *c, const char *text, int64_t *n) {
    const size_t len = strlen(text);
    int64_t need = 0;
    attn_status st = attn_bpe_encode(c->tok, text, len, ATTN_BPE_PARSE_SPECIAL,
                                     NULL, 0, &need);
    if (!st && need > c->ids_cap) {
        free(c->ids);
        c->ids_cap = need;
        if (!(c->ids = malloc(sizeof(int32_t) * (size_t)need))) {
            c->ids_cap = 0;
            st = ATTN_E_NOMEM;
        }
    }
    if (!st)
        st = attn_bpe_encode(c->tok, text, len, ATTN_BPE_PARSE_SPECIAL, c->ids,
                             c->ids_cap, n);
    return st ? cli_fail(c->cmd, st, "encoding the turn") : 0;
}

/* The text of one user turn in the template: the whole conversation's
 * text so far continues with it (the first turn carries the system
 * block; a later one first closes the previous answer). */
static char *turn_text(chat *c, const char *user) {
    attn_chat_message msg[2];
    int64_t k = 0;
    const int first = attn_llama_session_length(c->s) == 0;
    if (first && c->system) msg[k++] = (attn_chat_message){"system", c->system};
    msg[k++] = (attn_chat_message){"user", user};
    const int flags =
        ATTN_CHAT_GENERATION_PROMPT | (first ? 0 : ATTN_CHAT_CONTINUE);
    /* after an answer: the end-of-turn token (unless it was generated) and
     * the newline that the template puts after it */
    const char *close = first ? "" : c->ended ? "\n" : "<|im_end|>\n";
    size_t len = 0;
    attn_status st = attn_chat_render(c->tmpl, msg, k, flags, NULL, 0, &len);
    const size_t lc = strlen(close);
    char *text = st ? NULL : malloc(lc + len + 1);
    if (text) {
        memcpy(text, close, lc);
        st = attn_chat_render(c->tmpl, msg, k, flags, text + lc, len + 1, &len);
    }
    if (st || !text) {
        cli_fail(c->cmd, st ? st : ATTN_E_NOMEM, "the chat template");
        free(text);
        return NULL;
    }
    return text;
}

/* One turn: 0, 1 on failure, 3 when it does not fit the context (the
 * conversation is then unchanged). */
static int turn(chat *c, const char *user) {
    char *text = turn_text(c, user);
    if (!text) return 1;
    int64_t n = 0;
    int rc = encode(c, text, &n);
    free(text);
    if (rc) return 1;
    const int64_t len = attn_llama_session_length(c->s),
                  cap = attn_llama_session_capacity(c->s);
    if (n + 1 > cap - len) {
        fprintf(stderr,
                "attn %s: this turn (%lld tokens) does not fit the context: "
                "%lld of its %lld tokens are used (start over with /reset, "
                "or give a larger --context)\n",
                c->cmd, (long long)n, (long long)len, (long long)cap);
        return 3;
    }
    const double t0 = cli_now_s();
    attn_status st = attn_llama_session_feed(c->s, c->ids, n, NULL);
    if (st) return cli_fail(c->cmd, st, "feeding the turn");
    const double t1 = cli_now_s();
    attn_llama_gen_opts o = c->o;
    o.eos_token_id = c->end_id;
    if (o.max_new_tokens > cap - len - n) o.max_new_tokens = cap - len - n;
    int64_t nout = 0;
    attn_bpe_stream_init(&c->sm.st);
    st = attn_llama_session_generate(c->s, &o, c->out, c->o.max_new_tokens,
                                     &nout, cli_llama_on_token, &c->sm);
    const double t2 = cli_now_s();
    size_t l = 0;
    if (attn_bpe_stream_end(&c->sm.st, c->sm.buf, c->sm.cap, &l) == ATTN_OK)
        fwrite(c->sm.buf, 1, l, stdout);
    printf("\n");
    fflush(stdout);
    if (st) return cli_fail(c->cmd, st, "generating");
    c->ended = nout > 0 && c->out[nout - 1] == c->end_id;
    fprintf(stderr,
            "[%lld prompt tokens at %.1f tokens/s, %lld new at %.1f "
            "tokens/s; %lld of %lld context tokens used%s]\n",
            (long long)n, t1 > t0 ? (double)n / (t1 - t0) : 0.0,
            (long long)nout, t2 > t1 ? (double)nout / (t2 - t1) : 0.0,
            (long long)attn_llama_session_length(c->s), (long long)cap,
            c->ended                     ? ""
            : nout < c->o.max_new_tokens ? "; the context is full"
                                         : "; cut at --max-new-tokens");
    return 0;
}

/* Lines of stdin as turns. */
static int interactive(chat *c) {
    const int tty = isatty(0);
    char *line = NULL;
    size_t lcap = 0;
    int rc = 0;
    for (;;) {
        if (tty) {
            fputs("> ", stderr);
            fflush(stderr);
        }
        const ssize_t got = getline(&line, &lcap, stdin);
        if (got < 0) break;
        size_t k = (size_t)got;
        while (k && (line[k - 1] == '\n' || line[k - 1] == '\r')) line[--k] = 0;
        if (k == 0) continue;
        if (strcmp(line, "/quit") == 0) break;
        if (strcmp(line, "/reset") == 0) {
            attn_status st = attn_llama_session_reset(c->s);
            if (st) {
                rc = cli_fail(c->cmd, st, "reset");
                break;
            }
            c->ended = 0;
            fprintf(stderr, "[the conversation starts over]\n");
            continue;
        }
        const int r = turn(c, line);
        if (r == 1) {
            rc = 1;
            break;
        }
        if (r == 3) rc = 1; /* said; the next line may fit after /reset */
    }
    free(line);
    return rc;
}

int cmd_chat(const char *cmd, int argc, char **argv) {
    chat c;
    memset(&c, 0, sizeof c);
    c.cmd = cmd;
    attn_llama_gen_opts_init(&c.o);
    c.o.max_new_tokens = 256;
    const char *path = NULL, *prompt = NULL;
    int64_t context = 4096;
    cli_opt opts[CLI_LLAMA_GEN_NOPTS + 3] = {
        CLI_STR("--prompt", &prompt), CLI_STR("--system", &c.system),
        CLI_I64("--context", &context, 2, INT64_MAX)};
    cli_llama_gen_table(&c.o, opts + 3);
    if (cli_parse_args(c.cmd, argc, argv, opts, sizeof opts / sizeof opts[0],
                       &path, 1))
        return 2;
    if (!path) return cli_usage_error(c.cmd, "need MODEL");
    attn_status st = attn_llama_load(path, &c.m);
    if (st) return cli_fail(c.cmd, st, "load");
    int rc = 0;
    c.tok = attn_llama_tokenizer(c.m);
    if (!c.tok)
        rc = cli_usage_error(c.cmd, "the model has no tokenizer: it cannot "
                                    "chat");
    if (!rc) rc = load_template(&c, path);
    const attn_llama_config *cfg = attn_llama_get_config(c.m);
    if (context > cfg->max_position) context = cfg->max_position;
    if (!rc && attn_bpe_id(c.tok, "<|im_end|>", &c.end_id) != ATTN_OK)
        c.end_id = (int32_t)cfg->eos_token_id;
    if (!rc &&
        (st = attn_llama_session_create(c.m, context, c.o.threads, &c.s)))
        rc = cli_fail(c.cmd, st, "the session");
    c.sm.tok = c.tok;
    c.sm.cap = c.tok ? attn_bpe_stream_max(c.tok) + 8 : 0;
    if (!rc &&
        (!(c.out = malloc(sizeof(int32_t) * (size_t)c.o.max_new_tokens)) ||
         !(c.sm.buf = malloc(c.sm.cap))))
        rc = cli_fail(c.cmd, ATTN_E_NOMEM, "buffers");
    if (!rc) rc = prompt ? turn(&c, prompt) != 0 : interactive(&c);
    attn_llama_session_free(c.s);
    attn_chat_template_free(c.tmpl);
    free(c.ids);
    free(c.out);
    free(c.sm.buf);
    attn_llama_free(c.m);
    return rc;
}
