/*
 * model/tokenizer_beside.c - finding the tokenizer that sits beside a model file.
 *
 * Each loader knows which names its format's tokenizers go by (a Hugging Face directory's
 * tokenizer.json or tokenizer.model; llama2.c's tok<vocab>.model or tokenizer.model) and
 * asks here for the first that is a readable regular file. Nothing is opened: the engine
 * loads the file and reports what is wrong with it.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model_internal.h"
#include "util/alloc.h"

pl_status pl_model_find_tokenizer(pl_model *m, const char *dir, const char *const *names) {
    for (size_t i = 0; names[i]; i++) {
        size_t n = strlen(dir) + strlen(names[i]) + 2;
        char *p = pl_malloc(n);
        if (!p) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", m->name);
        snprintf(p, n, "%s/%s", dir, names[i]);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0) {
            pl_free(m->tokenizer_path);
            m->tokenizer_path = p;
            return PL_OK;
        }
        pl_free(p);
    }
    return PL_OK;
}
