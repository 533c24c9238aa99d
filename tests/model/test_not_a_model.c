/*
 * tests/model/test_not_a_model.c - a file that is no model (a tokenizer, JSON, a PyTorch
 * archive, text) is refused by the loaders' front door as "not a GGUF, safetensors or
 * llama2.c file", with how it starts and what it looks like; a real llama2.c file with a bad
 * header keeps the loader's own message.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "model_fixtures.h"
#include "test_support.h"

static void write_bytes(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void expect_not_a_model(const char *path, const char *start, const char *kind) {
    pl_model *m = NULL;
    pl_status s = pl_model_load(path, NULL, &m);
    cr_assert_eq(s, PL_ERR_FORMAT, "%s: %s (%s)", path, pl_status_name(s), pl_last_error());
    cr_assert_null(m);
    const char *e = pl_last_error();
    cr_assert(strstr(e, path) == e, "the message starts with the file: %s", e);
    cr_assert(strstr(e, "not a GGUF, safetensors or llama2.c file"), "%s", e);
    cr_assert(strstr(e, start), "the message does not show the start '%s': %s", start, e);
    if (kind) cr_assert(strstr(e, kind), "the message does not say '%s': %s", kind, e);
    cr_assert(strstr(e, "read as a llama2.c header"), "the loader's reason is lost: %s", e);
}

Test(not_a_model, files_that_are_no_model_say_so) {
    const char *dir = pl_test_tmpdir();
    char path[600];
    /* a SentencePiece model starts with field 1 of its protobuf: the first piece */
    const unsigned char spm[] = {0x0a, 0x0b, 0x0a, 0x05, '<', 'u', 'n', 'k', '>', 0x15, 0, 0,
                                 0, 0, 0x18, 0x02, 0x0a, 0x07, 0x0a, 0x03, '<', 's', '>',
                                 0x15, 0, 0, 0, 0, 0x18, 0x03, 0, 0};
    snprintf(path, sizeof path, "%s/tok.model", dir);
    write_bytes(path, spm, sizeof spm);
    expect_not_a_model(path, "0a 0b 0a 05 3c 75 6e 6b", "--tokenizer");
    const char json[] = "{\"version\": \"1.0\", \"truncation\": null, \"model\": {}}";
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_bytes(path, json, sizeof json - 1);
    expect_not_a_model(path, "\"{\"version\": \"1.0\"", "JSON");
    const unsigned char zip[32] = {'P', 'K', 3, 4, 20, 0, 0, 0, 8, 0};
    snprintf(path, sizeof path, "%s/pytorch_model.bin", dir);
    write_bytes(path, zip, sizeof zip);
    expect_not_a_model(path, "50 4b 03 04", "zip");
    const char text[] = "Once upon a time there was a tokenizer that was read as a model.";
    snprintf(path, sizeof path, "%s/story.txt", dir);
    write_bytes(path, text, sizeof text - 1);
    expect_not_a_model(path, "Once upon a time", NULL);
    snprintf(path, sizeof path, "%s/empty.bin", dir);
    write_bytes(path, "", 0);
    expect_not_a_model(path, "0 bytes", NULL);
    pl_fixture_remove_dir(dir);
}

Test(not_a_model, a_plausible_llama2c_header_keeps_the_loaders_message) {
    const char *dir = pl_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/short.bin", dir);
    int32_t h[7] = {64, 172, 5, 8, 4, 512, 512}; /* a header, and nothing after it */
    write_bytes(path, h, sizeof h);
    pl_model *m = NULL;
    cr_assert_eq(pl_model_load(path, NULL, &m), PL_ERR_FORMAT);
    cr_assert_null(strstr(pl_last_error(), "not a GGUF"), "%s", pl_last_error());
    cr_assert(strstr(pl_last_error(), "implies"), "%s", pl_last_error());
    pl_fixture_remove_dir(dir);
}
