/*
 * tokenizer/tok_config.c - the token facts every implementation shares (BOS/EOS, the
 * end-of-generation set, special tokens, the piece map, chat templates): reading
 * tokenizer_config.json, the facts Hugging Face keeps beside tokenizer.json (BOS/EOS tokens,
 * whether to add them, the chat templates), plus chat_template.jinja, where newer exports keep
 * the template; finishing them once a loader has filled the vocabulary; and answering for them.
 * The loaders (spm.c, hf_load.c, gguf_vocab.c) call down into this file, never the reverse.
 *
 * Field shapes accepted (anything else in these fields is PL_ERR_FORMAT naming the file and
 * the field; other fields are ignored, added_tokens_decoder too: it repeats tokenizer.json's
 * added tokens, which are what counts):
 *   bos_token, eos_token     a string, null, or an object whose "content" is a string
 *   add_bos_token, add_eos_token   true / false
 *   tokenizer_class          a string
 *   chat_template            a string (the template named "default"), or a list of
 *                            {"name": string, "template": string}
 * A token string that is not a token of the vocabulary keeps its text (templates print it)
 * but has no id; a warning says so.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "util/alloc.h"
#include "util/log.h"

#define MAX_TEMPLATES 1024

pl_status pl_tok_add_template(pl_tokenizer *t, const char *path, const char *name,
                              const char *text, size_t text_len) {
    if (t->n_templates >= MAX_TEMPLATES)
        return pl_fail(PL_ERR_FORMAT, "%s: chat_template: more than %d templates", path,
                       MAX_TEMPLATES);
    for (size_t i = 0; i < t->n_templates; i++)
        if (strcmp(t->templates[i].name, name) == 0)
            return pl_fail(PL_ERR_FORMAT, "%s: chat_template: two templates named \"%s\"", path,
                           name);
    pl_tok_template *arr = pl_reallocarray(t->templates, t->n_templates + 1, sizeof *arr);
    if (!arr) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: chat templates", path);
    t->templates = arr;
    char *n = pl_strdup(name), *x = pl_malloc(text_len + 1);
    if (!n || !x) {
        pl_free(n);
        pl_free(x);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: chat templates", path);
    }
    memcpy(x, text, text_len);
    x[text_len] = '\0';
    arr[t->n_templates++] = (pl_tok_template){n, x};
    return PL_OK;
}

static pl_status read_templates(pl_tokenizer *t, const char *path, json_t *v) {
    if (json_is_string(v))
        return pl_tok_add_template(t, path, "default", json_string_value(v), json_string_length(v));
    if (!json_is_array(v))
        return pl_fail(PL_ERR_FORMAT, "%s: chat_template: expected a string or a list of "
                       "{\"name\", \"template\"}", path);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        json_t *name = json_object_get(e, "name"), *tpl = json_object_get(e, "template");
        if (!json_is_string(name) || !json_is_string(tpl))
            return pl_fail(PL_ERR_FORMAT, "%s: chat_template[%zu]: expected {\"name\": string, "
                           "\"template\": string}", path, i);
        PL_TRY(pl_tok_add_template(t, path, json_string_value(name), json_string_value(tpl),
                            json_string_length(tpl)));
    }
    return PL_OK;
}

/* bos_token / eos_token: sets *id and *text (replacing what the loader found). */
static pl_status read_token(pl_tokenizer *t, const char *path, json_t *root, const char *field,
                            int32_t *id, char **text) {
    json_t *v = json_object_get(root, field);
    if (!v) return PL_OK;
    const char *s = NULL;
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "content");
        if (!json_is_string(c))
            return pl_fail(PL_ERR_FORMAT, "%s: %s.content: expected a string", path, field);
        s = json_string_value(c);
    } else if (json_is_string(v)) {
        s = json_string_value(v);
    } else if (!json_is_null(v)) {
        return pl_fail(PL_ERR_FORMAT, "%s: %s: expected a string, null or {\"content\": ...}",
                       path, field);
    }
    pl_free(*text);
    *text = NULL;
    *id = -1;
    if (!s) return PL_OK;
    if (!(*text = pl_strdup(s))) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: %s", path, field);
    *id = pl_tok_strmap_get(&t->pieces, s, strlen(s));
    if (*id < 0)
        pl_log(PL_LOG_WARN, "%s: %s \"%s\" is not a token of the vocabulary", path, field, s);
    return PL_OK;
}

static pl_status read_flag(const char *path, json_t *root, const char *field, bool *value,
                           bool *present) {
    json_t *v = json_object_get(root, field);
    if (present) *present = false;
    if (!v || json_is_null(v)) return PL_OK;
    if (!json_is_boolean(v))
        return pl_fail(PL_ERR_FORMAT, "%s: %s: expected true or false", path, field);
    *value = json_is_true(v);
    if (present) *present = true;
    return PL_OK;
}

/* chat_template.jinja in the folder of the config file, as the default template. */
static pl_status read_jinja(pl_tokenizer *t, const char *config_path) {
    const char *slash = strrchr(config_path, '/');
    size_t dir = slash ? (size_t)(slash - config_path) + 1 : 0;
    char *p = pl_malloc(dir + sizeof "chat_template.jinja");
    if (!p) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s", config_path);
    memcpy(p, config_path, dir);
    memcpy(p + dir, "chat_template.jinja", sizeof "chat_template.jinja");
    pl_status s = PL_OK;
    if (pl_tok_file_exists(p)) {
        char *text = NULL;
        size_t n = 0;
        s = pl_tok_read_file(p, &text, &n);
        if (s == PL_OK) {
            if (memchr(text, '\0', n))
                s = pl_fail(PL_ERR_FORMAT, "%s: a NUL byte in the template", p);
            else
                s = pl_tok_add_template(t, p, "default", text, n);
            pl_free(text);
        }
    }
    pl_free(p);
    return s;
}

pl_status pl_tok_read_config(pl_tokenizer *t, const char *path, char **out_class,
                             bool *out_has_add_bos, bool *out_has_add_eos) {
    if (out_class) *out_class = NULL;
    if (out_has_add_bos) *out_has_add_bos = false;
    if (out_has_add_eos) *out_has_add_eos = false;
    char *bytes = NULL;
    size_t n = 0;
    PL_TRY(pl_tok_read_file(path, &bytes, &n));
    json_error_t err;
    /* Numbers are read as reals: configs hold integers past 64 bits (Llama 3's
     * model_max_length is 1e30), and no field read here is a number. */
    json_t *root = json_loadb(bytes, n, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &err);
    pl_free(bytes);
    if (!root) {
        if (json_error_code(&err) == json_error_out_of_memory)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: parsing", path);
        return pl_fail(PL_ERR_FORMAT, "%s: line %d column %d: %s", path, err.line, err.column,
                       err.text);
    }
    pl_status s = PL_OK;
    if (!json_is_object(root)) {
        s = pl_fail(PL_ERR_FORMAT, "%s: expected a JSON object", path);
        goto done;
    }
    if ((s = pl_tok_index_pieces(t, path)) != PL_OK) goto done;
    if ((s = read_token(t, path, root, "bos_token", &t->bos_id, &t->bos_text)) != PL_OK) goto done;
    if ((s = read_token(t, path, root, "eos_token", &t->eos_id, &t->eos_text)) != PL_OK) goto done;
    if ((s = read_flag(path, root, "add_bos_token", &t->add_bos, out_has_add_bos)) != PL_OK)
        goto done;
    if ((s = read_flag(path, root, "add_eos_token", &t->add_eos, out_has_add_eos)) != PL_OK)
        goto done;
    json_t *cls = json_object_get(root, "tokenizer_class");
    if (cls && !json_is_null(cls)) {
        if (!json_is_string(cls)) {
            s = pl_fail(PL_ERR_FORMAT, "%s: tokenizer_class: expected a string", path);
            goto done;
        }
        if (out_class && !(*out_class = pl_strdup(json_string_value(cls)))) {
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s", path);
            goto done;
        }
    }
    json_t *tpl = json_object_get(root, "chat_template");
    if (tpl && !json_is_null(tpl))
        s = read_templates(t, path, tpl);
    else
        s = read_jinja(t, path);
done:
    json_decref(root);
    if (s != PL_OK && out_class) {
        pl_free(*out_class);
        *out_class = NULL;
    }
    return s;
}

// ---- the token facts -----------------------------------------------------------------------------------

int pl_tok_vocab_size(const pl_tokenizer *t) { return t->n_vocab; }
int pl_tok_bos_id(const pl_tokenizer *t) { return t->bos_id; }
int pl_tok_eos_id(const pl_tokenizer *t) { return t->eos_id; }
const char *pl_tok_bos_text(const pl_tokenizer *t) { return t->bos_text; }
const char *pl_tok_eos_text(const pl_tokenizer *t) { return t->eos_text; }
bool pl_tok_add_bos(const pl_tokenizer *t) { return t->add_bos; }
bool pl_tok_add_eos(const pl_tokenizer *t) { return t->add_eos; }

const int32_t *pl_tok_eog_ids(const pl_tokenizer *t, size_t *out_n) {
    *out_n = t->n_eog;
    return t->eog;
}

bool pl_tok_is_eog(const pl_tokenizer *t, int32_t id) {
    for (size_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

bool pl_tok_is_special(const pl_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->special[id];
}

const char *pl_tok_piece(const pl_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    return t->piece_of[id];
}

int32_t pl_tok_token_id(const pl_tokenizer *t, const char *token) {
    if (!token) return -1;
    return pl_tok_strmap_get(&t->pieces, token, strlen(token));
}

const char *pl_tok_chat_template(const pl_tokenizer *t, const char *name) {
    if (!name) name = "default";
    for (size_t i = 0; i < t->n_templates; i++)
        if (strcmp(t->templates[i].name, name) == 0) return t->templates[i].text;
    return NULL;
}

size_t pl_tok_chat_template_count(const pl_tokenizer *t) { return t->n_templates; }

const char *pl_tok_chat_template_name(const pl_tokenizer *t, size_t i) {
    return i < t->n_templates ? t->templates[i].name : NULL;
}

/* Added or control tokens with these texts end a generation (llama.cpp's list, with "</s>"). */
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>", "</s>",
    "<|end|>", "<end_of_turn>", "<EOT>", "_<EOT>", "<|return|>", "<|call|>",
    "<end_of_utterance>",
};

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

pl_status pl_tok_index_pieces(pl_tokenizer *t, const char *path) {
    if (t->pieces.slots) return PL_OK;
    pl_status s = pl_tok_strmap_init(&t->pieces, (size_t)t->n_vocab);
    /* For a string two ids share, the lower id wins (SentencePiece user pieces; the BPE
     * loader refuses such vocabularies). */
    for (int32_t id = 0; id < t->n_vocab && s == PL_OK; id++)
        s = pl_tok_strmap_put(&t->pieces, t->piece_of[id], strlen(t->piece_of[id]), id, NULL);
    return s == PL_OK ? PL_OK : pl_fail_prefix(s, "tokenizer %s", path);
}

pl_status pl_tok_finish_facts(pl_tokenizer *t, const char *path) {
    PL_TRY(pl_tok_index_pieces(t, path));
    size_t n_max = 1 + sizeof EOG_TEXTS / sizeof EOG_TEXTS[0];
    t->eog = pl_calloc(n_max, sizeof *t->eog);
    if (!t->eog) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s: end-of-generation ids", path);
    size_t n = 0;
    if (t->eos_id >= 0) t->eog[n++] = t->eos_id;
    for (size_t i = 0; i < sizeof EOG_TEXTS / sizeof EOG_TEXTS[0]; i++) {
        int32_t id = pl_tok_strmap_get(&t->pieces, EOG_TEXTS[i], strlen(EOG_TEXTS[i]));
        if (id >= 0 && t->special[id]) t->eog[n++] = id;
    }
    qsort(t->eog, n, sizeof *t->eog, cmp_id);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || t->eog[k - 1] != t->eog[i]) t->eog[k++] = t->eog[i];
    t->n_eog = k;
    /* The strings of BOS/EOS, when the config did not name them. */
    if (t->bos_id >= 0 && !t->bos_text && !(t->bos_text = pl_strdup(t->piece_of[t->bos_id])))
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s", path);
    if (t->eos_id >= 0 && !t->eos_text && !(t->eos_text = pl_strdup(t->piece_of[t->eos_id])))
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s", path);
    return PL_OK;
}

void pl_tok_free_facts(pl_tokenizer *t) {
    pl_free(t->piece_of);
    pl_free(t->special);
    pl_tok_strmap_free(&t->pieces);
    pl_free(t->bos_text);
    pl_free(t->eos_text);
    pl_free(t->eog);
    for (size_t i = 0; i < t->n_templates; i++) {
        pl_free(t->templates[i].name);
        pl_free(t->templates[i].text);
    }
    pl_free(t->templates);
}
