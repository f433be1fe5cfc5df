/*
 * replay_main.c — a plain driver for the fuzz targets, used without libFuzzer: feeds every file
 * named on the command line (directories are walked one level deep, in sorted order) to the
 * target's LLVMFuzzerTestOneInput. This is how the committed corpora and the regression inputs
 * of fuzz/regressions/ run as ctest tests with any compiler (and under ASan/UBSan in build-asan).
 *
 * usage: fuzz_replay_<name> PATH...   (exit 0 when every input ran; 1 if a path is unreadable;
 *        a bug in the code under test shows up as a sanitizer report or a crash)
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Runs the target on the contents of one file; returns 0 on success, 1 if unreadable. */
static int replay_file(const char *path) {
    FILE *file = fopen(path, "rb");
    if (!file) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    size_t capacity = 4096, size = 0;
    uint8_t *data = malloc(capacity);
    size_t got;
    while (data && (got = fread(data + size, 1, capacity - size, file)) > 0) {
        size += got;
        if (size == capacity) {
            uint8_t *grown = realloc(data, capacity * 2);
            if (!grown) break;
            data = grown;
            capacity *= 2;
        }
    }
    fclose(file);
    if (!data) return 1;
    /* Hand the target an exact-size copy so ASan sees reads past the end of the input. */
    uint8_t *exact = malloc(size ? size : 1);
    if (!exact) {
        free(data);
        return 1;
    }
    memcpy(exact, data, size);
    free(data);
    LLVMFuzzerTestOneInput(exact, size);
    free(exact);
    return 0;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of `directory` in name order; returns the number of failures. */
static int replay_directory(const char *directory, int *count) {
    DIR *listing = opendir(directory);
    if (!listing) return 0; /* a target may have no regressions yet */
    char **names = NULL;
    size_t name_count = 0;
    struct dirent *entry;
    while ((entry = readdir(listing)) != NULL) {
        if (entry->d_name[0] == '.') continue;
        char **grown = realloc(names, (name_count + 1) * sizeof *names);
        if (!grown) break;
        names = grown;
        names[name_count++] = strdup(entry->d_name);
    }
    closedir(listing);
    qsort(names, name_count, sizeof *names, compare_names);
    int failures = 0;
    for (size_t i = 0; i < name_count; ++i) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", directory, names[i]);
        struct stat info;
        if (names[i] && stat(path, &info) == 0 && S_ISREG(info.st_mode)) {
            failures += replay_file(path);
            ++*count;
        }
        free(names[i]);
    }
    free(names);
    return failures;
}

int main(int argc, char **argv) {
    int failures = 0, count = 0;
    for (int a = 1; a < argc; ++a) {
        struct stat info;
        if (stat(argv[a], &info) == 0 && S_ISDIR(info.st_mode)) {
            failures += replay_directory(argv[a], &count);
        } else if (stat(argv[a], &info) == 0) {
            failures += replay_file(argv[a]);
            ++count;
        }
    }
    printf("replayed %d inputs, %d unreadable\n", count, failures);
    return failures == 0 && count > 0 ? 0 : 1;
}
