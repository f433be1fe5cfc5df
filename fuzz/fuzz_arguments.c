/*
 * fuzz_arguments.c — libFuzzer target for the CLI's shared option parser (cli/arguments.c):
 * the input is split at NUL bytes into an argv, which is parsed exactly as `attn forward`
 * does (cli_parse_attention_option on each word, the command skipping words that are not
 * shared options, stopping at the first usage error), then freed. The number parsers
 * (cli_parse_bytes, cli_parse_int64, cli_parse_double) also get each word. No files are
 * loaded (cli_attention_arguments_load is not called), so the fuzzer cannot touch the disk.
 * Any crash, overread, leak or UB is a finding; usage errors are expected (each prints one
 * line on stderr, which fuzz/run.sh sends to the target's log).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arguments.h"

#define MAX_WORDS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* A NUL-terminated copy, so the last word is a C string too. */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[MAX_WORDS + 2];
    int argc = 0;
    argv[argc++] = "forward";
    for (size_t start = 0; start <= size && argc < MAX_WORDS + 1;) {
        argv[argc++] = text + start;
        start += strlen(text + start) + 1;
    }
    argv[argc] = NULL;

    cli_attention_arguments arguments;
    cli_attention_arguments_init(&arguments);
    for (int index = 1; index < argc; ++index) {
        cli_parse_result result =
            cli_parse_attention_option(&arguments, "forward", argc, argv, &index);
        if (result == CLI_PARSE_ERROR) break;
        if (index >= argc) abort(); /* the parser must never step past argv */
    }
    cli_attention_arguments_free(&arguments);

    for (int index = 1; index < argc; ++index) {
        size_t bytes;
        int64_t integer;
        double real;
        (void)cli_parse_bytes(argv[index], &bytes);
        (void)cli_parse_int64(argv[index], &integer);
        if (cli_parse_double(argv[index], &real) && !(real - real == 0)) abort(); /* finite */
    }
    free(text);
    return 0;
}
