/* PLACEHOLDER-UNBUILT: replaced by the helper that owns this command. */
#include <stdio.h>
#include "cli.h"
int cli_train(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "attn: this command is not built yet\n");
    return 1;
}
