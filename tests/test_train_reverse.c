/*
 * test_train_reverse.c — `attn train` end to end on a short configuration: the reverse task
 * (which needs attention and positions) must reach a training loss below 0.05 and a token
 * accuracy of at least 0.99 on 1024 fresh sequences in 300 steps; the run is deterministic
 * (same summary and bitwise-identical saved weights with 1 and 2 attention threads); the
 * saved file holds the HF-style tensor names with the right shapes.
 */
#include "attn_io.h"
#include "test_support.h"

#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

/* Runs the CLI; returns the summary line's loss and accuracy (and the line itself). */
static int run_train(int steps, const char *extra, const char *save_path, double *loss, double *accuracy,
                     char *line, size_t line_capacity) {
    char command[1024];
    snprintf(command, sizeof command,
             "'%s' train --task reverse --steps %d --seed 3 --quiet --save '%s' %s", ATTN_CLI_PATH,
             steps, save_path, extra);
    FILE *pipe = popen(command, "r");
    if (pipe == NULL) return 0;
    int ok = fgets(line, (int)line_capacity, pipe) != NULL;
    int status = pclose(pipe);
    if (!ok || status != 0) return 0;
    int parsed_steps = 0;
    return sscanf(line, "train: task reverse steps %d loss %lf accuracy %lf", &parsed_steps, loss,
                  accuracy) == 3 && parsed_steps == steps;
}

int main(void) {
    double loss1 = 1e9, accuracy1 = 0, loss2 = 1e9, accuracy2 = 0;
    char line1[256] = "", line2[256] = "";
    /* Per-process names: several builds (normal, sanitizers) may run this test at once. */
    char path1[128], path2[128];
    snprintf(path1, sizeof path1, "/tmp/attn_test_train_%ld_1.safetensors", (long)getpid());
    snprintf(path2, sizeof path2, "/tmp/attn_test_train_%ld_2.safetensors", (long)getpid());
    /* The learning claim: 300 steps, one thread. */
    int ran = run_train(300, "--threads 1", path1, &loss1, &accuracy1, line1, sizeof line1);
    CHECK(ran, "attn train ran and printed its summary: '%s'", line1);
    CHECK(loss1 < 0.05, "training loss %.6f < 0.05 after 300 steps", loss1);
    CHECK(accuracy1 >= 0.99, "token accuracy %.4f >= 0.99 on fresh sequences", accuracy1);
    /* Determinism across thread counts: a short run (2 threads are slow on a loaded machine). */
    int ran1 = run_train(40, "--threads 1", path1, &loss1, &accuracy1, line1, sizeof line1);
    int ran2 = run_train(40, "--threads 2", path2, &loss2, &accuracy2, line2, sizeof line2);
    CHECK(ran1 && ran2, "short runs printed their summaries: '%s' / '%s'", line1, line2);
    CHECK(loss1 == loss2 && accuracy1 == accuracy2, "same loss/accuracy for 1 and 2 threads: "
          "%.6f/%.4f vs %.6f/%.4f", loss1, accuracy1, loss2, accuracy2);

    attn_safetensors_file file1, file2;
    attn_error error;
    attn_status s1 = attn_safetensors_read(path1, 0, &file1, &error);
    CHECK_STATUS(s1, ATTN_OK, &error, "read saved model");
    attn_status s2 = attn_safetensors_read(path2, 0, &file2, &error);
    CHECK_STATUS(s2, ATTN_OK, &error, "read second saved model");
    if (s1 == ATTN_OK && s2 == ATTN_OK) {
        CHECK(file1.byte_count == file2.byte_count &&
                  memcmp(file1.bytes, file2.bytes, file1.byte_count) == 0,
              "saved weights bitwise identical across thread counts");
        const attn_safetensors_tensor *q = attn_safetensors_find(&file1, "layers.0.self_attn.q_proj.weight");
        const attn_safetensors_tensor *e = attn_safetensors_find(&file1, "embed_tokens.weight");
        CHECK(q != NULL && q->rank == 2 && q->shape[0] == 64 && q->shape[1] == 64,
              "q_proj.weight [64, 64]");
        CHECK(e != NULL && e->shape[0] == 16 && e->shape[1] == 64, "embed_tokens.weight [16, 64]");
        CHECK(file1.tensor_count == 3 + 8, "3 model tensors + 8 layer tensors: %lld",
              (long long)file1.tensor_count);
    }
    attn_safetensors_free(&file1);
    attn_safetensors_free(&file2);
    remove(path1);
    remove(path2);
    return test_finish();
}
