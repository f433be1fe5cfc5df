/*
 * tensor_files.c — the tensors of `attn forward` / `attn backward` in .npy or safetensors
 * files: locations (FILE.safetensors[:NAME]), checked loading, conversion to the computation's
 * dtype, and the all-or-nothing writing of every output (tensor_files.h).
 */
#define _POSIX_C_SOURCE 200809L

#include "tensor_files.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "npy_tensor.h"

#define CLI_MAX_OUTPUTS 8

const char cli_tensor_files_help[] =
    "  Each tensor is a .npy file or a tensor of a safetensors file: FILE.safetensors:NAME\n"
    "  (FILE.safetensors alone: the tensor named after the option, e.g. q, k, v, o, lse).\n"
    "  Inputs: float32 or float16 .npy; F32, BF16 or F16 safetensors. Outputs that name one\n"
    "  safetensors file are written into it together (an existing file is replaced).\n"
    "  Written: safetensors keep the computation's dtype (BF16 / F16; LSE always F32);\n"
    "  .npy is float16 for f16 and float32 for f32 and bf16 (bf16 widened exactly: .npy has\n"
    "  no bfloat16).\n";

static const char safetensors_suffix[] = ".safetensors";

bool cli_location_parse(const char *command, const char *option, const char *argument,
                        const char *default_name, cli_location *location) {
    memset(location, 0, sizeof *location);
    const size_t suffix = sizeof safetensors_suffix - 1, length = strlen(argument);
    const char *split = strstr(argument, ".safetensors:");
    size_t path_length = length;
    if (split != NULL) {
        path_length = (size_t)(split - argument) + suffix;
        location->name = argument + path_length + 1;
    } else if (length >= suffix && strcmp(argument + length - suffix, safetensors_suffix) == 0) {
        location->name = default_name;
    }
    if (location->name != NULL && location->name[0] == '\0') {
        cli_error(command, "%s %s: empty tensor name after ':'", option, argument);
        return false;
    }
    location->path = malloc(path_length + 1);
    if (location->path == NULL) {
        cli_error(command, "%s %s: out of memory", option, argument);
        return false;
    }
    memcpy(location->path, argument, path_length);
    location->path[path_length] = '\0';
    return true;
}

void cli_location_free(cli_location *location) {
    free(location->path);
    memset(location, 0, sizeof *location);
}

bool cli_location_valid(const char *command, const char *option, const char *argument) {
    cli_location location;
    bool ok = cli_location_parse(command, option, argument, "default", &location);
    cli_location_free(&location);
    return ok;
}

bool cli_parse_compute_dtype(const char *command, const char *value, attn_dtype *dtype) {
    if (strcmp(value, "f32") == 0) *dtype = ATTN_DTYPE_F32;
    else if (strcmp(value, "bf16") == 0) *dtype = ATTN_DTYPE_BF16;
    else if (strcmp(value, "f16") == 0) *dtype = ATTN_DTYPE_F16;
    else {
        cli_error(command, "--dtype '%s': expected f32, bf16 or f16", value);
        return false;
    }
    return true;
}

/* The first names of a file, "a, b, c" (", ..." when there are more), into `text`. */
static const char *some_names(const attn_safetensors_file *file, char *text, size_t capacity) {
    size_t used = 0;
    text[0] = '\0';
    for (int64_t t = 0; t < file->tensor_count && used < capacity; ++t) {
        if (t == 6) {
            snprintf(text + used, capacity - used, ", ...");
            break;
        }
        used += (size_t)snprintf(text + used, capacity - used, "%s%s", t ? ", " : "",
                                 file->tensors[t].name);
    }
    return text;
}

/* Rank and empty-dimension checks shared by both file kinds; `what` names the tensor. */
static bool check_rank(const char *command, const char *what, int rank, const int64_t *shape,
                       int min_rank, int max_rank) {
    char text[96];
    if (rank < min_rank || rank > max_rank) {
        cli_shape_text(rank, shape, text, sizeof text);
        if (min_rank == max_rank)
            cli_error(command, "%s: shape %s has rank %d, expected rank %d", what, text, rank,
                      min_rank);
        else
            cli_error(command, "%s: shape %s has rank %d, expected rank %d..%d", what, text,
                      rank, min_rank, max_rank);
        return false;
    }
    for (int d = 0; d < rank; ++d)
        if (shape[d] == 0) {
            cli_error(command, "%s: shape %s is empty (dimension %d is 0)", what,
                      cli_shape_text(rank, shape, text, sizeof text), d);
            return false;
        }
    return true;
}

static bool load_safetensors(const char *command, const cli_location *location, int min_rank,
                             int max_rank, bool allow_16bit, cli_input *input) {
    attn_error error;
    char what[512];
    snprintf(what, sizeof what, "%s %s", input->option, input->argument);
    if (!cli_input_file(command, input->option, location->path, false)) return false;
    if (attn_safetensors_read(location->path, 0, &input->file, &error) != ATTN_OK) {
        cli_error(command, "%s %s", input->option, error.message);
        return false;
    }
    const attn_safetensors_tensor *t = attn_safetensors_find(&input->file, location->name);
    if (t == NULL) {
        char names[256];
        cli_error(command, "%s: no tensor '%s' in %s (its %lld tensor%s: %s)", what,
                  location->name, location->path, (long long)input->file.tensor_count,
                  input->file.tensor_count == 1 ? "" : "s",
                  some_names(&input->file, names, sizeof names));
        return false;
    }
    const bool float_type = t->dtype == ATTN_DTYPE_F32 ||
                            (allow_16bit && (t->dtype == ATTN_DTYPE_BF16 || t->dtype == ATTN_DTYPE_F16));
    if (!float_type) {
        cli_error(command, "%s: tensor '%s' has dtype %s, expected F32%s", what, t->name,
                  t->stored_dtype, allow_16bit ? ", BF16 or F16" : "");
        return false;
    }
    char tensor_what[800];
    snprintf(tensor_what, sizeof tensor_what, "%s: tensor '%s'", what, t->name);
    if (!check_rank(command, tensor_what, t->rank, t->shape, min_rank, max_rank)) return false;
    attn_tensor view;
    if (attn_safetensors_tensor_as(&input->file, t->name, t->dtype, t->rank, t->shape, &view,
                                   &input->owned, &error) != ATTN_OK) {
        cli_error(command, "%s: %s", what, error.message);
        return false;
    }
    input->rank = t->rank;
    memcpy(input->shape, t->shape, sizeof input->shape);
    int64_t shape[4] = {1, 1, 1, 1};
    for (int d = 0; d < t->rank; ++d) shape[4 - t->rank + d] = t->shape[d];
    input->stored = attn_tensor_contiguous(view.data, t->dtype, 4, shape);
    return true;
}

bool cli_input_load(const char *command, const char *option, const char *argument,
                    const char *default_name, int min_rank, int max_rank, bool allow_16bit,
                    cli_input *input) {
    memset(input, 0, sizeof *input);
    input->option = option;
    input->argument = argument;
    cli_location location;
    if (!cli_location_parse(command, option, argument, default_name, &location)) return false;
    bool ok;
    if (location.name != NULL) {
        ok = load_safetensors(command, &location, min_rank, max_rank, allow_16bit, input);
    } else {
        ok = allow_16bit ? cli_load_npy_float(command, option, argument, min_rank, max_rank,
                                              &input->array)
                         : cli_load_npy(command, option, argument, ATTN_DTYPE_F32, min_rank,
                                        max_rank, "(write it with astype(np.float32))",
                                        &input->array);
        if (ok) {
            input->rank = input->array.rank;
            memcpy(input->shape, input->array.shape, sizeof input->shape);
            input->stored = cli_tensor_rank4(&input->array);
        }
    }
    cli_location_free(&location);
    return ok;
}

bool cli_input_as(const char *command, cli_input *input, attn_dtype dtype, attn_tensor *view) {
    *view = input->stored;
    if (input->stored.dtype == dtype) return true;
    size_t count = 1;
    for (int d = 0; d < 4; ++d) count *= (size_t)view->shape[d];
    free(input->converted);
    input->converted = malloc(count * attn_dtype_size(dtype));
    if (input->converted == NULL) {
        cli_error(command, "%s %s: out of memory converting it", input->option, input->argument);
        return false;
    }
    attn_tensor destination = attn_tensor_contiguous(input->converted, dtype, 4, view->shape);
    attn_error error;
    if (attn_tensor_convert(&input->stored, &destination, &error) != ATTN_OK) {
        cli_error(command, "%s %s: %s", input->option, input->argument, error.message);
        return false;
    }
    *view = destination;
    return true;
}

void cli_input_free(cli_input *input) {
    attn_npy_free(&input->array);
    attn_safetensors_free(&input->file);
    free(input->owned);
    free(input->converted);
    memset(input, 0, sizeof *input);
}

/* ---- outputs ------------------------------------------------------------------------- */

/* The locations of the requested outputs (unrequested: path NULL); false after a message. */
static bool output_locations(const char *command, const cli_output *outputs, int count,
                             cli_location *locations) {
    memset(locations, 0, (size_t)count * sizeof *locations);
    for (int i = 0; i < count; ++i)
        if (outputs[i].argument != NULL &&
            !cli_location_parse(command, outputs[i].option, outputs[i].argument,
                                outputs[i].default_name, &locations[i]))
            return false;
    return true;
}

bool cli_outputs_distinct(const char *command, const cli_output *outputs, int count) {
    cli_location locations[CLI_MAX_OUTPUTS];
    if (count > CLI_MAX_OUTPUTS) return false;
    bool ok = output_locations(command, outputs, count, locations);
    for (int b = 0; ok && b < count; ++b)
        for (int a = 0; ok && a < b; ++a) {
            if (locations[a].path == NULL || locations[b].path == NULL ||
                strcmp(locations[a].path, locations[b].path) != 0)
                continue;
            const bool both_safetensors = locations[a].name && locations[b].name;
            if (both_safetensors && strcmp(locations[a].name, locations[b].name) != 0) continue;
            cli_error(command, "%s %s: the same %s as %s %s", outputs[b].option,
                      outputs[b].argument, both_safetensors ? "tensor" : "file",
                      outputs[a].option, outputs[a].argument);
            ok = false;
        }
    for (int i = 0; i < count; ++i) cli_location_free(&locations[i]);
    return ok;
}

/* Writes outputs[first] and, for a safetensors file, every later output naming the same
 * file (marking them in `done`) to `partial`. */
static bool write_file(const char *command, const cli_output *outputs, int count, int first,
                       const cli_location *locations, const char *partial, bool *done) {
    const cli_output *o = &outputs[first];
    attn_error error;
    if (locations[first].name == NULL) { /* .npy: float32 or float16 */
        float *widened = NULL;
        const void *data = o->data;
        attn_dtype dtype = o->dtype;
        if (dtype == ATTN_DTYPE_BF16) {
            attn_tensor source = attn_tensor_contiguous((void *)(uintptr_t)o->data, dtype,
                                                        o->rank, o->shape);
            size_t count_elements = 1;
            for (int d = 0; d < o->rank; ++d) count_elements *= (size_t)o->shape[d];
            widened = malloc(count_elements * sizeof(float));
            if (widened == NULL) {
                cli_error(command, "%s %s: out of memory", o->option, o->argument);
                return false;
            }
            attn_tensor destination = attn_tensor_contiguous(widened, ATTN_DTYPE_F32, o->rank,
                                                             o->shape);
            attn_tensor_convert(&source, &destination, NULL); /* exact */
            data = widened, dtype = ATTN_DTYPE_F32;
        }
        attn_status status = attn_npy_write(partial, dtype, o->rank, o->shape, data, &error);
        free(widened);
        if (status != ATTN_OK) {
            cli_error(command, "%s %s: %s", o->option, o->argument, error.message);
            return false;
        }
        done[first] = true;
        return true;
    }
    attn_safetensors_tensor tensors[CLI_MAX_OUTPUTS];
    int n = 0;
    for (int i = first; i < count; ++i) {
        if (locations[i].name == NULL || strcmp(locations[i].path, locations[first].path) != 0)
            continue;
        attn_safetensors_tensor *t = &tensors[n++];
        memset(t, 0, sizeof *t);
        if (strlen(locations[i].name) >= sizeof t->name) {
            cli_error(command, "%s %s: tensor name longer than %d bytes", outputs[i].option,
                      outputs[i].argument, ATTN_SAFETENSORS_NAME_CAPACITY - 1);
            return false;
        }
        strcpy(t->name, locations[i].name);
        t->dtype = outputs[i].dtype;
        t->rank = outputs[i].rank;
        memcpy(t->shape, outputs[i].shape, sizeof t->shape);
        t->data = outputs[i].data;
        done[i] = true;
    }
    if (attn_safetensors_write(partial, tensors, n, NULL, 0, &error) != ATTN_OK) {
        cli_error(command, "%s %s: %s", o->option, o->argument, error.message);
        return false;
    }
    return true;
}

bool cli_outputs_write(const char *command, const cli_output *outputs, int count) {
    cli_location locations[CLI_MAX_OUTPUTS];
    char *partial[CLI_MAX_OUTPUTS] = {0};
    bool done[CLI_MAX_OUTPUTS] = {0}, renamed[CLI_MAX_OUTPUTS] = {0};
    if (count > CLI_MAX_OUTPUTS) return false;
    bool ok = output_locations(command, outputs, count, locations);
    for (int i = 0; ok && i < count; ++i) {
        if (locations[i].path == NULL || done[i]) continue;
        partial[i] = cli_partial_name(locations[i].path);
        if (partial[i] == NULL) {
            cli_error(command, "%s %s: out of memory", outputs[i].option, outputs[i].argument);
            ok = false;
            break;
        }
        ok = write_file(command, outputs, count, i, locations, partial[i], done);
    }
    for (int i = 0; ok && i < count; ++i) { /* every file complete: rename them into place */
        if (partial[i] == NULL) continue;
        if (rename(partial[i], locations[i].path) != 0) {
            cli_error(command, "%s %s: cannot rename the finished file into place",
                      outputs[i].option, outputs[i].argument);
            ok = false;
            for (int r = 0; r < i; ++r) /* no partial result: remove what was renamed */
                if (renamed[r]) unlink(locations[r].path);
            break;
        }
        renamed[i] = true;
    }
    for (int i = 0; i < count; ++i) {
        if (partial[i] != NULL && !renamed[i]) unlink(partial[i]);
        free(partial[i]);
        cli_location_free(&locations[i]);
    }
    return ok;
}
