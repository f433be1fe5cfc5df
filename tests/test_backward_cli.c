/*
 * test_backward_cli.c — end-to-end checks of `attn backward` (the binary at ATTN_CLI_PATH):
 * gradients written from .npy files equal attn_backward's on the same data, with the saved
 * forward (--o, --lse) and without it (the command runs the forward), with a causal mask and a
 * bias gradient; --help documents every option; errors exit non-zero with one line naming the
 * file or option and leave no output file.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "attn_io.h"
#include "test_support.h"

static char directory[256];

static const char *path_of(const char *name) {
    static char paths[8][512];
    static int next = 0;
    char *path = paths[next++ % 8];
    snprintf(path, 512, "%s/%s", directory, name);
    return path;
}

static int file_exists(const char *path) {
    struct stat info;
    return stat(path, &info) == 0;
}

/* Runs `attn backward ARGUMENTS` with stdout+stderr into directory/log; returns the exit code. */
static int run_cli(const char *arguments) {
    char command_line[4096];
    snprintf(command_line, sizeof command_line, "cd %s && '%s' backward %s > log 2>&1", directory,
             ATTN_CLI_PATH, arguments);
    const int status = system(command_line);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static char *read_log(void) {
    static char text[65536];
    FILE *file = fopen(path_of("log"), "r");
    size_t length = file ? fread(text, 1, sizeof text - 1, file) : 0;
    if (file) fclose(file);
    text[length] = '\0';
    return text;
}

static void write_array(const char *name, int rank, const int64_t *shape, const float *data) {
    attn_error error;
    CHECK_STATUS(attn_npy_write(path_of(name), ATTN_DTYPE_F32, rank, shape, data, &error), ATTN_OK,
                 &error, "writing %s", name);
}

/* max relative error between a written .npy and `expected` (count floats). */
static double file_error(const char *name, const float *expected, int64_t count) {
    attn_npy_array array;
    attn_error error;
    if (attn_npy_read(path_of(name), 0, &array, &error) != ATTN_OK) return INFINITY;
    double worst = (int64_t)(array.byte_count / sizeof(float)) == count ? 0 : INFINITY;
    for (int64_t e = 0; worst == 0 && e < count; ++e) {
        const double difference = fabs((double)((float *)array.data)[e] - expected[e]);
        if (difference != 0) worst = difference / (1 + fabs((double)expected[e]));
    }
    attn_npy_free(&array);
    return worst;
}

int main(void) {
    snprintf(directory, sizeof directory, "/tmp/attn_test_backward_cli_%ld", (long)getpid());
    mkdir(directory, 0700);
    enum { B = 2, Tq = 9, Tk = 11, Hq = 4, Hkv = 2, Dk = 8, Dv = 6 };
    const int64_t q_shape[4] = {B, Tq, Hq, Dk}, k_shape[4] = {B, Tk, Hkv, Dk};
    const int64_t v_shape[4] = {B, Tk, Hkv, Dv}, o_shape[4] = {B, Tq, Hq, Dv};
    const int64_t lse_shape[3] = {B, Hq, Tq}, bias_shape[2] = {Tq, Tk};
    test_tensor q = test_tensor_new(B, Tq, Hq, Dk, TEST_LAYOUT_BTHD);
    test_tensor k = test_tensor_new(B, Tk, Hkv, Dk, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(B, Tk, Hkv, Dv, TEST_LAYOUT_BTHD);
    test_tensor dout = test_tensor_new(B, Tq, Hq, Dv, TEST_LAYOUT_BTHD);
    test_tensor out = test_tensor_new(B, Tq, Hq, Dv, TEST_LAYOUT_BTHD);
    test_tensor dq = test_tensor_new(B, Tq, Hq, Dk, TEST_LAYOUT_BTHD);
    test_tensor dk = test_tensor_new(B, Tk, Hkv, Dk, TEST_LAYOUT_BTHD);
    test_tensor dv = test_tensor_new(B, Tk, Hkv, Dv, TEST_LAYOUT_BTHD);
    test_tensor lse = test_tensor_new_shape(3, lse_shape);
    const int64_t bias4[4] = {1, 1, Tq, Tk};
    test_tensor bias = test_tensor_new_shape(4, bias4), dbias = test_tensor_new_shape(4, bias4);
    test_rng rng;
    test_rng_seed(&rng, 77);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    test_tensor_fill_normal(&dout, &rng, 1.0f);
    test_tensor_fill_normal(&bias, &rng, 0.5f);
    write_array("q.npy", 4, q_shape, q.allocation);
    write_array("k.npy", 4, k_shape, k.allocation);
    write_array("v.npy", 4, v_shape, v.allocation);
    write_array("do.npy", 4, o_shape, dout.allocation);
    write_array("bias.npy", 2, bias_shape, bias.allocation);

    /* The library's answer: bottom-right causal with a [Tq, Tk] bias. */
    attn_options options = attn_options_default();
    options.causal = 1;
    options.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    options.bias = &bias.view;
    attn_error error;
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, &options, &out.view, &lse.view, NULL, &error),
                 ATTN_OK, &error, "library forward");
    CHECK_STATUS(attn_backward(&q.view, &k.view, &v.view, &out.view, &lse.view, &dout.view,
                               &options, &dq.view, &dk.view, &dv.view, &dbias.view, NULL, &error),
                 ATTN_OK, &error, "library backward");
    write_array("o.npy", 4, o_shape, out.allocation);
    write_array("lse.npy", 3, lse_shape, lse.allocation);

    const char *common = "--q q.npy --k k.npy --v v.npy --do do.npy --causal bottom-right "
                         "--bias bias.npy --dq dq.npy --dk dk.npy --dv dv.npy --dbias db.npy";
    char arguments[2048];
    for (int saved = 0; saved < 2; ++saved) {
        snprintf(arguments, sizeof arguments, "%s%s", common,
                 saved ? " --o o.npy --lse lse.npy" : "");
        const int code = run_cli(arguments);
        CHECK(code == 0, "attn backward (%s forward) exits 0, got %d: %s",
              saved ? "saved" : "recomputed", code, read_log());
        /* Same inputs, same library: bitwise equal with the saved forward. */
        const double tolerance = saved ? 0.0 : 1e-6;
        CHECK(file_error("dq.npy", dq.allocation, dq.allocation_floats) <= tolerance, "dq.npy (%d)", saved);
        CHECK(file_error("dk.npy", dk.allocation, dk.allocation_floats) <= tolerance, "dk.npy (%d)", saved);
        CHECK(file_error("dv.npy", dv.allocation, dv.allocation_floats) <= tolerance, "dv.npy (%d)", saved);
        CHECK(file_error("db.npy", dbias.allocation, dbias.allocation_floats) <= tolerance,
              "db.npy (%d)", saved);
        attn_npy_array written;
        CHECK(attn_npy_read(path_of("db.npy"), 0, &written, &error) == ATTN_OK &&
                  written.rank == 2 && written.shape[0] == Tq && written.shape[1] == Tk,
              "db.npy has the [Tq, Tk] shape of bias.npy");
        attn_npy_free(&written);
    }

    /* --help names every option. */
    CHECK(run_cli("--help") == 0, "--help exits 0");
    const char *help = read_log();
    const char *documented[] = {"--q", "--k", "--v", "--do", "--o", "--lse", "--dq", "--dk",
                                "--dv", "--dbias", "--causal", "--bias", "--mask"};
    for (size_t d = 0; d < sizeof documented / sizeof documented[0]; ++d)
        CHECK(strstr(help, documented[d]) != NULL, "--help documents %s", documented[d]);

    /* Errors: exit code, one line naming the culprit, no output file. */
    struct {
        const char *arguments;
        int expected_code;
        const char *named;
    } errors[] = {
        {"--q q.npy --k k.npy --v v.npy --dq e1.npy --dk e2.npy --dv e3.npy", 2, "--do"},
        {"--q q.npy --k k.npy --v v.npy --do do.npy --o o.npy --dq e1.npy --dk e2.npy --dv e3.npy",
         2, "--lse"},
        {"--q q.npy --k k.npy --v v.npy --do missing.npy --dq e1.npy --dk e2.npy --dv e3.npy", 1,
         "missing.npy"},
        {"--q q.npy --k k.npy --v v.npy --do q.npy --dq e1.npy --dk e2.npy --dv e3.npy", 1,
         "--do q.npy"},
        {"--q q.npy --k k.npy --v v.npy --do do.npy --o o.npy --lse o.npy --dq e1.npy --dk e2.npy "
         "--dv e3.npy", 1, "--lse o.npy"},
        {"--q q.npy --k k.npy --v v.npy --do do.npy --dq e1.npy --dk e2.npy --dv e3.npy "
         "--dbias e4.npy", 2, "--dbias"},
        {"--q q.npy --k k.npy --v v.npy --do do.npy --dq e1.npy --dk e2.npy --dv e1.npy", 2,
         "--dv e1.npy"},
        {"--q q.npy --k k.npy --v v.npy --do do.npy --dq e1.npy --dk e2.npy --dv e3.npy "
         "--softcap -2", 2, "--softcap"},
        {"--q q.npy --k k.npy --v v.npy --do do.npy --dq e1.npy --dk e2.npy --dv e3.npy --frobnicate",
         2, "--frobnicate"},
    };
    for (size_t e = 0; e < sizeof errors / sizeof errors[0]; ++e) {
        const int code = run_cli(errors[e].arguments);
        const char *log = read_log();
        CHECK(code == errors[e].expected_code, "'%s': exit %d, expected %d (%s)",
              errors[e].arguments, code, errors[e].expected_code, log);
        CHECK(strstr(log, errors[e].named) != NULL, "'%s': message names %s: %s",
              errors[e].arguments, errors[e].named, log);
        const char *newline = strchr(log, '\n');
        CHECK(newline != NULL && newline[1] == '\0', "'%s': one line: %s", errors[e].arguments, log);
        const char *outputs[] = {"e1.npy", "e2.npy", "e3.npy", "e4.npy"};
        for (int o = 0; o < 4; ++o)
            CHECK(!file_exists(path_of(outputs[o])), "'%s': no %s written", errors[e].arguments,
                  outputs[o]);
    }

    char cleanup[512];
    snprintf(cleanup, sizeof cleanup, "rm -rf '%s'", directory);
    if (system(cleanup) != 0) fprintf(stderr, "could not remove %s\n", directory);
    test_tensor *all[] = {&q, &k, &v, &dout, &out, &dq, &dk, &dv, &lse, &bias, &dbias};
    for (size_t t = 0; t < sizeof all / sizeof all[0]; ++t) test_tensor_free(all[t]);
    return test_finish();
}
