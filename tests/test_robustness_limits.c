/*
 * test_robustness_limits.c — resource limits and the CLI's main paths:
 *  - execution.memory_limit_bytes: attn_forward refuses (ATTN_ERROR_MEMORY_LIMIT, message naming
 *    the option) exactly above its working memory, which does not grow with Tk (O(tile)); at the
 *    limit the result equals the unlimited call bitwise; attn_decode refuses too (the reference
 *    has no execution settings, so no limit);
 *  - a .npy file whose header claims 4 TiB but holds 16 bytes: ATTN_ERROR_IO ("truncated") from
 *    attn_npy_read without allocating the claim (under ASan a 4 TiB malloc would abort);
 *  - the CLI (`attn demo`, `attn forward` on valid files, the truncated-claim file, a usage
 *    error): exit codes, one-line messages naming the file, no partial output file (skipped in
 *    a build without the tool).
 * ATTN_CLI_WRAPPER="valgrind -q --error-exitcode=99 ..." runs every CLI invocation under that
 * wrapper (scripts/test.sh's memcheck stage); a wrapper's error exit then fails the checks.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "attn_io.h"
#include "test_support.h"

/* ---- execution.memory_limit_bytes ----------------------------------------------------- */

typedef struct limit_problem {
    test_tensor q, k, v, out;
} limit_problem;

static limit_problem limit_problem_new(int64_t tq, int64_t tk) {
    limit_problem p;
    test_rng rng;
    test_rng_seed(&rng, 7);
    p.q = test_tensor_new(1, tq, 4, 32, TEST_LAYOUT_BTHD);
    p.k = test_tensor_new(1, tk, 2, 32, TEST_LAYOUT_BTHD);
    p.v = test_tensor_new(1, tk, 2, 32, TEST_LAYOUT_BTHD);
    p.out = test_tensor_new(1, tq, 4, 32, TEST_LAYOUT_BTHD);
    test_tensor_fill_normal(&p.q, &rng, 1.0f);
    test_tensor_fill_normal(&p.k, &rng, 1.0f);
    test_tensor_fill_normal(&p.v, &rng, 1.0f);
    return p;
}

static void limit_problem_free(limit_problem *p) {
    test_tensor_free(&p->q); test_tensor_free(&p->k);
    test_tensor_free(&p->v); test_tensor_free(&p->out);
}

static attn_status forward_with_limit(limit_problem *p, size_t limit, attn_error *error) {
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_execution execution = attn_execution_default();
    execution.num_threads = 2;
    execution.memory_limit_bytes = limit;
    return attn_forward(&p->q.view, &p->k.view, &p->v.view, &options, &p->out.view, NULL,
                        &execution, error);
}

/* The smallest limit attn_forward accepts for `p` (binary search; 0 if none up to 1 GiB). */
static size_t smallest_accepted_limit(limit_problem *p) {
    size_t low = 1, high = (size_t)1 << 30;
    if (forward_with_limit(p, high, NULL) != ATTN_OK) return 0;
    while (low < high) {
        size_t middle = low + (high - low) / 2;
        if (forward_with_limit(p, middle, NULL) == ATTN_OK) high = middle;
        else low = middle + 1;
    }
    return low;
}

static void test_memory_limit(void) {
    limit_problem small = limit_problem_new(256, 2048), large = limit_problem_new(256, 8192);
    size_t small_need = smallest_accepted_limit(&small), large_need = smallest_accepted_limit(&large);
    CHECK(small_need > 0 && small_need == large_need,
          "working memory independent of Tk: %zu bytes at Tk = 2048, %zu at Tk = 8192",
          small_need, large_need);
    CHECK(small_need < (size_t)256 * 2048 * sizeof(float),
          "working memory %zu bytes is below one Tq x Tk score matrix", small_need);

    attn_error error;
    attn_status status = forward_with_limit(&large, large_need - 1, &error);
    CHECK_STATUS(status, ATTN_ERROR_MEMORY_LIMIT, &error, "limit one byte below the need");
    CHECK(strstr(error.message, "memory_limit_bytes") != NULL, "message names the option: %s",
          error.message);
    test_tensor unlimited = test_tensor_new(1, 256, 4, 32, TEST_LAYOUT_BTHD);
    CHECK_STATUS(forward_with_limit(&large, 0, &error), ATTN_OK, &error, "no limit");
    memcpy(unlimited.allocation, large.out.allocation, (size_t)large.out.allocation_floats * 4);
    CHECK_STATUS(forward_with_limit(&large, large_need, &error), ATTN_OK, &error, "at the limit");
    CHECK(test_bitwise_equal(&unlimited.view, &large.out.view), "limited result = unlimited");
    CHECK_STATUS(forward_with_limit(&large, 1, &error), ATTN_ERROR_MEMORY_LIMIT, &error,
                 "1-byte limit");

    /* Decoding checks the limit as well. */
    attn_kv_cache_config config = attn_kv_cache_config_default();
    config.sequences = 1;
    config.kv_heads = 2;
    config.key_dim = 32;
    config.value_dim = 32;
    config.capacity = 2048;
    attn_kv_cache *cache = NULL;
    status = attn_kv_cache_create(&config, &cache, &error);
    CHECK_STATUS(status, ATTN_OK, &error, "cache");
    if (status == ATTN_OK) {
        CHECK_STATUS(attn_kv_cache_append(cache, 0, &small.k.view, &small.v.view, &error), ATTN_OK,
                     &error, "append 2048 tokens");
        test_tensor q = test_tensor_new(1, 1, 4, 32, TEST_LAYOUT_BTHD);
        test_tensor out = test_tensor_new(1, 1, 4, 32, TEST_LAYOUT_BTHD);
        attn_execution execution = attn_execution_default();
        execution.memory_limit_bytes = 1;
        CHECK_STATUS(attn_decode(cache, &q.view, NULL, &out.view, NULL, &execution, &error),
                     ATTN_ERROR_MEMORY_LIMIT, &error, "decode with a 1-byte limit");
        execution.memory_limit_bytes = 0;
        CHECK_STATUS(attn_decode(cache, &q.view, NULL, &out.view, NULL, &execution, &error),
                     ATTN_OK, &error, "decode without a limit");
        test_tensor_free(&q);
        test_tensor_free(&out);
        attn_kv_cache_destroy(cache);
    }
    test_tensor_free(&unlimited);
    limit_problem_free(&small);
    limit_problem_free(&large);
}

/* ---- files whose header claims more than they hold ----------------------------------- */

static char scratch[256];

/* Writes a .npy format-1.0 file with the given header dict and `data_bytes` bytes of data. */
static void write_npy_with_header(const char *path, const char *dict, size_t data_bytes) {
    char header[256];
    int length = snprintf(header, sizeof header, "%s", dict);
    int total = 10 + length + 1;
    int padding = (64 - total % 64) % 64;
    FILE *file = fopen(path, "wb");
    if (!file) return;
    unsigned header_length = (unsigned)(length + padding + 1);
    fwrite("\x93NUMPY\x01\x00", 1, 8, file);
    fputc((int)(header_length & 0xFF), file);
    fputc((int)(header_length >> 8), file);
    fwrite(header, 1, (size_t)length, file);
    for (int n = 0; n < padding; ++n) fputc(' ', file);
    fputc('\n', file);
    for (size_t n = 0; n < data_bytes; ++n) fputc(0, file);
    fclose(file);
}

static void test_npy_claims(void) {
    char path[320];
    snprintf(path, sizeof path, "%s/claims_4tib.npy", scratch);
    /* (1 << 20) x (1 << 20) float32 = 4 TiB claimed, 16 bytes present. */
    write_npy_with_header(path, "{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, "
                                "1048576), }", 16);
    attn_npy_array array;
    attn_error error;
    clock_t start = clock();
    attn_status status = attn_npy_read(path, 0, &array, &error);
    double seconds = (double)(clock() - start) / CLOCKS_PER_SEC;
    CHECK_STATUS(status, ATTN_ERROR_IO, &error, "header claims 4 TiB, file holds 16 bytes");
    CHECK(strstr(error.message, "truncated") != NULL && strstr(error.message, path) != NULL,
          "message names the file and says truncated: %s", error.message);
    CHECK(seconds < 1.0, "refused in %.3f s, before touching the claim", seconds);
    /* With a memory limit below the claim the limit is reported instead. */
    status = attn_npy_read(path, (size_t)1 << 20, &array, &error);
    CHECK_STATUS(status, ATTN_ERROR_MEMORY_LIMIT, &error, "claim above the memory limit");
}

/* ---- the CLI's main paths ------------------------------------------------------------- */

/* Runs `attn ARGUMENTS` (under $ATTN_CLI_WRAPPER when set), stderr to `stderr_path`;
 * returns the exit code (-1 if it did not exit normally). */
static int run_cli(const char *arguments, const char *stderr_path) {
    const char *wrapper = getenv("ATTN_CLI_WRAPPER");
    char command[2048];
    snprintf(command, sizeof command, "%s %s %s >%s/stdout.txt 2>%s", wrapper ? wrapper : "",
             ATTN_CLI_PATH, arguments, scratch, stderr_path);
    int status = system(command);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The first line of a small text file (empty string if missing). */
static void first_line(const char *path, char *line, size_t capacity) {
    line[0] = '\0';
    FILE *file = fopen(path, "r");
    if (!file) return;
    if (fgets(line, (int)capacity, file) == NULL) line[0] = '\0';
    fclose(file);
}

static int count_lines(const char *path) {
    FILE *file = fopen(path, "r");
    if (!file) return -1;
    int lines = 0, c;
    while ((c = fgetc(file)) != EOF) lines += c == '\n';
    fclose(file);
    return lines;
}

static void write_f32(const char *path, int64_t b, int64_t t, int64_t h, int64_t d, float *data) {
    int64_t shape[4] = {b, t, h, d};
    CHECK_STATUS(attn_npy_write(path, ATTN_DTYPE_F32, 4, shape, data, NULL), ATTN_OK, NULL,
                 "write %s", path);
}

static void test_cli_paths(void) {
    char arguments[1536], errors[320], line[512], path[320];
    snprintf(errors, sizeof errors, "%s/stderr.txt", scratch);

    /* demo: the worked example end to end, heat maps included. */
    snprintf(arguments, sizeof arguments, "demo --out %s/demo", scratch);
    CHECK(run_cli(arguments, errors) == 0, "attn demo exits 0");
    snprintf(path, sizeof path, "%s/demo", scratch);
    struct stat info;
    CHECK(stat(path, &info) == 0 && S_ISDIR(info.st_mode), "demo wrote its heat-map folder");

    /* forward on valid files: the output equals the library's. */
    test_rng rng;
    test_rng_seed(&rng, 21);
    float q[2 * 5 * 4 * 8], k[2 * 7 * 2 * 8], v[2 * 7 * 2 * 8], expected[2 * 5 * 4 * 8];
    test_fill_normal(&rng, q, 320, 1.0f);
    test_fill_normal(&rng, k, 224, 1.0f);
    test_fill_normal(&rng, v, 224, 1.0f);
    char q_path[320], k_path[320], v_path[320], out_path[320];
    snprintf(q_path, sizeof q_path, "%s/q.npy", scratch);
    snprintf(k_path, sizeof k_path, "%s/k.npy", scratch);
    snprintf(v_path, sizeof v_path, "%s/v.npy", scratch);
    snprintf(out_path, sizeof out_path, "%s/out.npy", scratch);
    write_f32(q_path, 2, 5, 4, 8, q);
    write_f32(k_path, 2, 7, 2, 8, k);
    write_f32(v_path, 2, 7, 2, 8, v);
    attn_tensor qt = attn_tensor_f32_4d(q, 2, 5, 4, 8), kt = attn_tensor_f32_4d(k, 2, 7, 2, 8);
    attn_tensor vt = attn_tensor_f32_4d(v, 2, 7, 2, 8), et = attn_tensor_f32_4d(expected, 2, 5, 4, 8);
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    CHECK_STATUS(attn_forward(&qt, &kt, &vt, &options, &et, NULL, NULL, NULL), ATTN_OK, NULL,
                 "library forward");
    snprintf(arguments, sizeof arguments,
             "forward --q %s --k %s --v %s --out %s --causal bottom-right", q_path, k_path,
             v_path, out_path);
    int code = run_cli(arguments, errors);
    first_line(errors, line, sizeof line);
    CHECK(code == 0, "attn forward exits 0 (got %d): %s", code, line);
    attn_npy_array result;
    memset(&result, 0, sizeof result);
    if (attn_npy_read(out_path, 0, &result, NULL) == ATTN_OK) {
        attn_tensor rt = attn_tensor_f32_4d(result.data, 2, 5, 4, 8);
        CHECK(result.rank == 4 && test_max_relative_error(&rt, &et) <= 1e-6,
              "CLI output equals attn_forward");
        attn_npy_free(&result);
    } else {
        CHECK(0, "attn forward wrote %s", out_path);
    }

    /* a K file whose header claims 4 TiB: exit 1, one line naming it, no output file. */
    unlink(out_path);
    char claim_path[320];
    snprintf(claim_path, sizeof claim_path, "%s/claims_4tib.npy", scratch);
    snprintf(arguments, sizeof arguments, "forward --q %s --k %s --v %s --out %s", q_path,
             claim_path, v_path, out_path);
    code = run_cli(arguments, errors);
    first_line(errors, line, sizeof line);
    CHECK(code == 1, "truncated --k file: exit 1 (got %d)", code);
    CHECK(strstr(line, claim_path) != NULL && strstr(line, "truncated") != NULL &&
              count_lines(errors) == 1,
          "one line naming the file and 'truncated': %s", line);
    CHECK(stat(out_path, &info) != 0, "no output file after an error");

    /* a usage error: exit 2, one line naming the option. */
    snprintf(arguments, sizeof arguments,
             "forward --q %s --k %s --v %s --out %s --causal sideways", q_path, k_path, v_path,
             out_path);
    code = run_cli(arguments, errors);
    first_line(errors, line, sizeof line);
    CHECK(code == 2 && strstr(line, "--causal") != NULL && count_lines(errors) == 1,
          "bad --causal value: exit 2 (got %d) and one line naming it: %s", code, line);
}

int main(void) {
    snprintf(scratch, sizeof scratch, "/tmp/attn_test_robustness_limits_%d", (int)getpid());
    mkdir(scratch, 0700);
    test_memory_limit();
    test_npy_claims();
    if (ATTN_CLI_PATH[0] != '\0')
        test_cli_paths();
    else
        printf("the CLI's paths: skipped (built without the attn tool)\n");
    char command[400];
    snprintf(command, sizeof command, "rm -rf %s", scratch);
    if (system(command) != 0) fprintf(stderr, "could not remove %s\n", scratch);
    return test_finish();
}
