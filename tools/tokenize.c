/*
 * tools/tokenize.c - `pagellm tokenize` and `pagellm detokenize`: text (or a chat) to token
 * ids and back, with a tokenizer alone or a model's.
 *
 * A tokenizer given alone, or a model directory, is loaded through pl_tokenizer_load: no
 * weights are read. A model file (a llama2.c checkpoint) names its tokenizer only through the
 * engine's rule (tok<vocab>.model beside it), so for those an engine is created: that loads
 * (maps) the weights.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "commands.h"

/* The tokenizer of --tokenizer or --model; *e is set when an engine had to be created for it.
 * Prints the error (naming the flag) and returns false. */
static bool open_tokenizer(const char *cmd, const char *tok_path, const char *model_path,
                           pl_tokenizer **own, pl_engine **e, const pl_tokenizer **out) {
    *own = NULL;
    *e = NULL;
    struct stat st;
    const char *path = tok_path ? tok_path : model_path;
    if (tok_path || (stat(model_path, &st) == 0 && S_ISDIR(st.st_mode))) {
        if (pl_tokenizer_load(path, own) != PL_OK) {
            fprintf(stderr, "pagellm %s: %s %s: %s\n", cmd, tok_path ? "--tokenizer" : "--model",
                    path, pl_last_error_as(PL_NAMING_FLAG));
            return false;
        }
        *out = *own;
        return true;
    }
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model_path;
    c.backend = PL_BACKEND_REF;
    c.n_threads = 1;
    c.max_num_blocks = 2; /* the tokenizer is all this engine is for */
    c.block_size = 16;
    c.max_model_len = 16;
    c.max_total_tokens = 16;
    c.max_batch_size = 1;
    c.max_num_seqs = 1;
    if (pl_engine_create(&c, e) != PL_OK) {
        fprintf(stderr, "pagellm %s: --model %s: %s\n", cmd, model_path, pl_last_error_as(PL_NAMING_FLAG));
        return false;
    }
    *out = pl_engine_tokenizer(*e);
    if (!*out) {
        fprintf(stderr, "pagellm %s: --model %s: the model has no tokenizer (give --tokenizer)\n",
                cmd, model_path);
        pl_engine_destroy(*e);
        *e = NULL;
        return false;
    }
    return true;
}

/* jansson refuses a string that is not UTF-8: say so rather than drop the member. */
static json_t *text_json(const char *s, size_t len) {
    json_t *v = json_stringn(s ? s : "", s ? len : 0);
    return v ? v : json_string("(not valid UTF-8)");
}

/* {"ids": [...], "pieces": [...], "text": ...} on one line. */
static void print_json(const pl_tokenizer *t, const int32_t *ids, size_t n, const char *text,
                       size_t text_len) {
    json_t *r = json_object(), *a = json_array(), *p = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(a, json_integer(ids[i]));
        const char *piece = pl_tokenizer_piece(t, ids[i]);
        json_array_append_new(p, piece ? text_json(piece, strlen(piece)) : json_null());
    }
    json_object_set_new(r, "ids", a);
    json_object_set_new(r, "pieces", p);
    json_object_set_new(r, "text", text_json(text, text_len));
    char *s = json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) printf("%s\n", s);
    free(s);
    json_decref(r);
}

/* ------------------------------------------------------------------------------------------
 * tokenize
 * ---------------------------------------------------------------------------------------- */

static void tokenize_usage(void) {
    printf("usage: pagellm tokenize (--tokenizer PATH | --model PATH)\n"
           "                        (--text TEXT | --file FILE | --messages FILE.json)\n"
           "                        [--no-bos] [--parse-special] [chat flags] [--json]\n\n"
           "Prints the token ids, separated by commas (as --prompt-ids and detokenize --ids\n"
           "take them).\n\n"
           "  --tokenizer PATH      a tokenizer.json (tokenizer_config.json read beside it), a\n"
           "                        directory holding one, or a SentencePiece .model\n"
           "  --model PATH          the model's tokenizer: a Hugging Face directory's (no weights\n"
           "                        are read); for a model file the engine's (this loads it)\n"
           "  --text TEXT           the text to tokenize\n"
           "  --file FILE           the text of a file, byte for byte (- reads standard input)\n"
           "  --messages FILE.json  a chat, a JSON array of {\"role\", \"content\"} messages (-\n"
           "                        reads standard input), rendered with the chat template and\n"
           "                        tokenized as a chat is submitted: special tokens parsed,\n"
           "                        no BOS added (the template writes it)\n"
           "  --no-bos              text: leave out what the tokenizer adds (BOS)\n"
           "  --parse-special       text: special-token text (\"<|eot_id|>\") becomes its id;\n"
           "                        without it, it is tokenized as plain text\n"
           "  --chat-template FILE  messages: this Jinja template (a file, or the template text)\n"
           "                        instead of the tokenizer's\n"
           "  --json                one JSON object: {\"ids\": [...], \"pieces\": [...], \"text\":\n"
           "                        ...}; text is the input, or the rendered chat template\n\n");
    cli_print_chat_flags();
}

typedef struct tok_args {
    const char *tok_path, *model_path, *text, *file, *messages, *chat_template;
    bool no_bos, parse_special, json, chat_flags;
} tok_args;

/* Parses argv into a and o; returns -1 to go on, else the exit status. */
static int tokenize_args(int argc, char **argv, tok_args *a, pl_chat_options *o) {
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        int r = cli_chat_flag(o, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) {
            a->chat_flags = true;
            continue;
        }
        bool has_value = i + 1 < argc;
        if (cli_is(s, "--help") || !strcmp(s, "-h")) {
            tokenize_usage();
            return 0;
        } else if (cli_is(s, "--tokenizer") && has_value) {
            a->tok_path = argv[++i];
        } else if ((cli_is(s, "--model") || !strcmp(s, "-m")) && has_value) {
            a->model_path = argv[++i];
        } else if (cli_is(s, "--text") && has_value) {
            a->text = argv[++i];
        } else if (cli_is(s, "--file") && has_value) {
            a->file = argv[++i];
        } else if (cli_is(s, "--messages") && has_value) {
            a->messages = argv[++i];
        } else if (cli_is(s, "--chat-template") && has_value) {
            a->chat_template = argv[++i];
        } else if (cli_is(s, "--no-bos")) {
            a->no_bos = true;
        } else if (cli_is(s, "--parse-special")) {
            a->parse_special = true;
        } else if (cli_is(s, "--json")) {
            a->json = true;
        } else {
            return cli_unknown_flag("tokenize", s, tokenize_usage);
        }
    }
    if ((a->tok_path != NULL) == (a->model_path != NULL)) {
        fprintf(stderr, "pagellm tokenize: give exactly one of --tokenizer and --model\n");
        return 2;
    }
    if ((a->text != NULL) + (a->file != NULL) + (a->messages != NULL) != 1) {
        fprintf(stderr, "pagellm tokenize: give exactly one of --text, --file and --messages\n");
        return 2;
    }
    if (a->messages && (a->no_bos || a->parse_special)) {
        fprintf(stderr, "pagellm tokenize: %s: only for --text and --file (a chat is tokenized "
                "with special tokens parsed and no BOS added)\n",
                a->no_bos ? "--no-bos" : "--parse-special");
        return 2;
    }
    if (!a->messages && (a->chat_flags || a->chat_template)) {
        fprintf(stderr, "pagellm tokenize: the chat flags and --chat-template are only for "
                "--messages\n");
        return 2;
    }
    return -1;
}

/* The text to tokenize and the encode flags: the input, or the rendered chat. */
static int tokenize_input(const tok_args *a, const pl_tokenizer *t, pl_chat_options *o,
                          char **text, size_t *len, unsigned *flags) {
    char err[1024];
    if (a->text) {
        *len = strlen(a->text);
        if (!(*text = strdup(a->text))) return 1;
    } else if (a->file) {
        if (!cli_read_file(a->file, text, len, err, sizeof err)) {
            fprintf(stderr, "pagellm tokenize: --file %s\n", err);
            return 2;
        }
    }
    if (!a->messages) {
        *flags = (a->no_bos ? 0 : PL_ENCODE_ADD_SPECIAL) |
                 (a->parse_special ? PL_ENCODE_PARSE_SPECIAL : 0);
        return 0;
    }
    char *msgs, *tmpl = NULL;
    if (!cli_messages_load(a->messages, &msgs, err, sizeof err)) {
        fprintf(stderr, "pagellm tokenize: --messages %s\n", err);
        return 2;
    }
    if (a->chat_template && !cli_template_arg("--chat-template", a->chat_template, &tmpl, err,
                                              sizeof err)) {
        fprintf(stderr, "pagellm tokenize: %s\n", err);
        free(msgs);
        return 2;
    }
    o->chat_template = tmpl;
    pl_status s = pl_tokenizer_apply_chat_template(t, msgs, o, text, len);
    o->chat_template = NULL;
    free(tmpl);
    free(msgs);
    if (s != PL_OK) {
        fprintf(stderr, "pagellm tokenize: --messages %s: %s (%s)\n", a->messages,
                pl_last_error_as(PL_NAMING_FLAG), pl_status_name(s));
        return 1;
    }
    *flags = PL_ENCODE_PARSE_SPECIAL;
    return 0;
}

static int tokenize(int argc, char **argv, pl_chat_options *o) {
    tok_args a = {0};
    int rc = tokenize_args(argc, argv, &a, o);
    if (rc >= 0) return rc;
    pl_tokenizer *own;
    pl_engine *e;
    const pl_tokenizer *t;
    if (!open_tokenizer("tokenize", a.tok_path, a.model_path, &own, &e, &t)) return 1;
    char *text = NULL;
    size_t len = 0;
    unsigned flags = 0;
    rc = tokenize_input(&a, t, o, &text, &len, &flags);
    int32_t *ids = NULL;
    size_t n = 0;
    if (rc == 0) {
        pl_status s = pl_tokenizer_encode(t, text, len, flags, &ids, &n);
        if (s != PL_OK) {
            fprintf(stderr, "pagellm tokenize: %s: %s\n",
                    a.text ? "--text" : a.file ? a.file : "the rendered chat", pl_last_error_as(PL_NAMING_FLAG));
            rc = 1;
        }
    }
    if (rc == 0 && a.json) {
        print_json(t, ids, n, text, len);
    } else if (rc == 0) {
        for (size_t i = 0; i < n; i++) printf(i ? ",%d" : "%d", ids[i]);
        putchar('\n');
    }
    pl_free_ids(ids);
    /* the rendered chat is the library's, the input ours */
    if (a.messages) pl_free_text(text);
    else free(text);
    pl_tokenizer_free(own);
    pl_engine_destroy(e);
    return rc;
}

int cmd_tokenize(int argc, char **argv) {
    pl_chat_options o;
    pl_chat_options_default(&o);
    int rc = tokenize(argc, argv, &o);
    pl_chat_options_deinit(&o);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * detokenize
 * ---------------------------------------------------------------------------------------- */

static void detokenize_usage(void) {
    printf("usage: pagellm detokenize (--tokenizer PATH | --model PATH) (--ids 1,2,3 | --file FILE)\n"
           "                          [--skip-special] [--json]\n\n"
           "Prints the text of the ids, followed by a newline.\n\n"
           "  --tokenizer PATH  as for tokenize\n"
           "  --model PATH      as for tokenize\n"
           "  --ids 1,2,3       the ids, separated by commas or spaces\n"
           "  --file FILE       ids separated by commas, spaces or newlines, or a JSON array of\n"
           "                    them (- reads standard input)\n"
           "  --skip-special    special tokens (BOS, <|eot_id|>) give no text\n"
           "  --json            one JSON object: {\"ids\": [...], \"pieces\": [...], \"text\": ...}\n");
}

int cmd_detokenize(int argc, char **argv) {
    const char *tok_path = NULL, *model_path = NULL, *ids_arg = NULL, *file = NULL;
    bool skip = false, json = false;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        bool has_value = i + 1 < argc;
        if (cli_is(s, "--help") || !strcmp(s, "-h")) {
            detokenize_usage();
            return 0;
        } else if (cli_is(s, "--tokenizer") && has_value) {
            tok_path = argv[++i];
        } else if ((cli_is(s, "--model") || !strcmp(s, "-m")) && has_value) {
            model_path = argv[++i];
        } else if (cli_is(s, "--ids") && has_value) {
            ids_arg = argv[++i];
        } else if (cli_is(s, "--file") && has_value) {
            file = argv[++i];
        } else if (cli_is(s, "--skip-special")) {
            skip = true;
        } else if (cli_is(s, "--json")) {
            json = true;
        } else {
            return cli_unknown_flag("detokenize", s, detokenize_usage);
        }
    }
    if ((tok_path != NULL) == (model_path != NULL)) {
        fprintf(stderr, "pagellm detokenize: give exactly one of --tokenizer and --model\n");
        return 2;
    }
    if ((ids_arg != NULL) == (file != NULL)) {
        fprintf(stderr, "pagellm detokenize: give exactly one of --ids and --file\n");
        return 2;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    if (file) {
        char *text, err[600];
        size_t len;
        if (!cli_read_file(file, &text, &len, err, sizeof err)) {
            fprintf(stderr, "pagellm detokenize: --file %s\n", err);
            return 2;
        }
        bool ok = cli_id_list(file, text, &ids, &n);
        free(text);
        if (!ok) return 2;
    } else if (!cli_id_list("--ids", ids_arg, &ids, &n)) {
        return 2;
    }
    pl_tokenizer *own;
    pl_engine *e;
    const pl_tokenizer *t;
    if (!open_tokenizer("detokenize", tok_path, model_path, &own, &e, &t)) {
        free(ids);
        return 1;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = 0;
    pl_status s = pl_tokenizer_decode(t, ids, n, skip ? PL_DECODE_SKIP_SPECIAL : 0, &text, &len);
    if (s != PL_OK) {
        fprintf(stderr, "pagellm detokenize: %s: %s\n", file ? file : "--ids", pl_last_error_as(PL_NAMING_FLAG));
        rc = 1;
    } else if (json) {
        print_json(t, ids, n, text, len);
    } else {
        fwrite(text, 1, len, stdout);
        putchar('\n');
    }
    pl_free_text(text);
    free(ids);
    pl_tokenizer_free(own);
    pl_engine_destroy(e);
    return rc;
}
