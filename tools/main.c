/*
 * tools/main.c - the pagellm command line (placeholder until the engine lands).
 */
#include <stdio.h>
#include <string.h>

#include "pagellm.h"

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        printf("pagellm %s\n", pl_version());
        return argc < 2 ? 2 : 0;
    }
    fprintf(stderr, "pagellm: unknown command '%s'\n", argv[1]);
    return 2;
}
