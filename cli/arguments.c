/*
 * arguments.c — parsing and loading of the attention options shared by `attn forward`,
 * `attn backward` and `attn ring` (see arguments.h).
 */
#include "attn_io.h"
#include "arguments.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "npy_tensor.h"

const char cli_attention_options_help[] =
    "attention options (shared by forward, backward and ring):\n"
    "  --scale S                  softmax scale, finite and > 0 (default 1/sqrt(Dk))\n"
    "  --causal ALIGN             causal mask; ALIGN is bottom-right (FlashAttention: query i\n"
    "                             sits at i + Tk - Tq) or top-left (PyTorch is_causal: at i)\n"
    "  --align ALIGN              alignment for --window, --alibi and --pattern without\n"
    "                             --causal (needed when Tq != Tk; same values as --causal)\n"
    "  --window L,R               sliding window: keys in [p - L, p + R] of the query position\n"
    "                             p; -1 = unbounded on that side (FlashAttention's convention)\n"
    "  --mask M.npy               bool [B|1, Hq|1, Tq, Tk] (or [Tq, Tk]); true = allowed\n"
    "  --bias B.npy               float32 [B|1, Hq|1, Tq, Tk] (or [Tq, Tk]) added to the logits\n"
    "  --alibi                    ALiBi with the standard slopes for Hq heads\n"
    "  --alibi-slopes S.npy       ALiBi with float32 [Hq] slopes (implies --alibi)\n"
    "  --softcap C                logit soft-capping C * tanh(x / C), C > 0 (Gemma-2)\n"
    "  --dropout P                attention dropout (forward and backward): each probability\n"
    "                             dropped with probability P in [0, 1), the rest scaled by\n"
    "                             1 / (1 - P); the mask is a function of the seed, offset and\n"
    "                             position, so backward with the same three regenerates it\n"
    "  --dropout-seed S           dropout's seed, an integer in [0, 2^64) (default 0)\n"
    "  --dropout-offset O         dropout's first counter per row, in [0, 2^64) (default 0)\n"
    "  --empty-rows POLICY        a query with no allowed key: error (default), zero (O = 0,\n"
    "                             LSE = -inf) or nan\n"
    "  --query-lengths L.npy      int32 [B]: valid queries per batch (padded batches)\n"
    "  --key-lengths L.npy        int32 [B]: valid keys per batch\n"
    "  --query-positions P.npy    int64 [Tq]: explicit query positions (replace the alignment)\n"
    "  --key-positions P.npy      int64 [Tk]: explicit key positions\n"
    "  --global-tokens i,j,k      Longformer global tokens: rows and columns i, j, k see and\n"
    "                             are seen by every token\n"
    "  --pattern P                strided:L | fixed:L,C | dilated:R,D (Sparse Transformer\n"
    "                             strided / fixed with C summary columns; dilated window of\n"
    "                             radius R steps of D)\n"
    "  --block-layout L.npy       bool [B|1, Hq|1, ceil(Tq/BQ), ceil(Tk/BK)]: which tiles may\n"
    "                             be computed (FlexAttention BlockMask); needs --block-size\n"
    "  --block-size BQ,BK         tile sizes of --block-layout\n"
    "  --threads N                the most threads (default: all; fewer for small work);\n"
    "                             results are bitwise the same\n"
    "  --kernel K                 auto (default), generic, avx2 or avx512\n"
    "  --memory-limit BYTES       refuse a call whose working memory exceeds BYTES (suffix\n"
    "                             K, M or G = powers of 1024)\n";

/* ---- value parsers ---------------------------------------------------------------------- */

bool cli_parse_int64(const char *text, int64_t *value) {
    if (text == NULL || *text == '\0') return false;
    char *end = NULL;
    errno = 0;
    long long parsed = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') return false;
    *value = (int64_t)parsed;
    return true;
}

/* A decimal integer in [0, 2^64), the whole text. */
static bool parse_uint64(const char *text, uint64_t *value) {
    if (text == NULL || *text < '0' || *text > '9') return false;
    char *end = NULL;
    errno = 0;
    const unsigned long long parsed = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0') return false;
    *value = (uint64_t)parsed;
    return true;
}

bool cli_parse_double(const char *text, double *value) {
    if (text == NULL || *text == '\0') return false;
    char *end = NULL;
    errno = 0;
    double parsed = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(parsed)) return false;
    *value = parsed;
    return true;
}

bool cli_parse_kernel(const char *name, attn_kernel_choice *kernel) {
    static const struct {
        const char *name;
        attn_kernel_choice choice;
    } kernels[] = {{"auto", ATTN_KERNEL_AUTO},     {"generic", ATTN_KERNEL_GENERIC},
                   {"avx2", ATTN_KERNEL_AVX2},     {"avx512", ATTN_KERNEL_AVX512},
                   {"avx512_bf16", ATTN_KERNEL_AVX512_BF16}, {"amx", ATTN_KERNEL_AMX}};
    for (size_t i = 0; name != NULL && i < sizeof kernels / sizeof kernels[0]; ++i)
        if (strcmp(name, kernels[i].name) == 0) {
            *kernel = kernels[i].choice;
            return true;
        }
    return false;
}

bool cli_parse_bytes(const char *text, size_t *bytes) {
    if (text == NULL || *text < '0' || *text > '9') return false;
    char *end = NULL;
    errno = 0;
    unsigned long long parsed = strtoull(text, &end, 10);
    if (errno != 0 || end == text) return false;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, ++end;
    else if (*end == 'M') shift = 20, ++end;
    else if (*end == 'G') shift = 30, ++end;
    if (*end != '\0') return false;
    if (shift > 0 && parsed > (unsigned long long)SIZE_MAX >> shift) return false;
    *bytes = (size_t)(parsed << shift);
    return true;
}

/* Parses "a,b" into two int64; false on anything else. */
static bool parse_pair(const char *text, int64_t *first, int64_t *second) {
    const char *comma = text ? strchr(text, ',') : NULL;
    if (comma == NULL || strchr(comma + 1, ',') != NULL) return false;
    char left[64];
    size_t length = (size_t)(comma - text);
    if (length == 0 || length >= sizeof left) return false;
    memcpy(left, text, length);
    left[length] = '\0';
    return cli_parse_int64(left, first) && cli_parse_int64(comma + 1, second);
}

static bool parse_alignment(const char *text, attn_alignment *alignment) {
    if (strcmp(text, "bottom-right") == 0) *alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    else if (strcmp(text, "top-left") == 0) *alignment = ATTN_ALIGN_TOP_LEFT;
    else return false;
    return true;
}

/* Parses "i,j,k" (non-negative integers) into a new array. */
static bool parse_index_list(const char *text, int64_t **indices, int64_t *count) {
    int64_t commas = 0;
    for (const char *c = text; *c; ++c) commas += *c == ',';
    if (*text == '\0' || commas > 1000000) return false;
    int64_t *list = malloc((size_t)(commas + 1) * sizeof *list);
    if (list == NULL) return false;
    int64_t n = 0;
    const char *start = text;
    for (;;) {
        const char *comma = strchr(start, ',');
        size_t length = comma ? (size_t)(comma - start) : strlen(start);
        char item[32];
        if (length == 0 || length >= sizeof item) break;
        memcpy(item, start, length);
        item[length] = '\0';
        if (!cli_parse_int64(item, &list[n]) || list[n] < 0) break;
        ++n;
        if (comma == NULL) {
            *indices = list;
            *count = n;
            return true;
        }
        start = comma + 1;
    }
    free(list);
    return false;
}

/* Parses --pattern's value into the options. */
static bool parse_pattern(const char *text, attn_options *options) {
    int64_t a = 0, b = 0;
    if (strncmp(text, "strided:", 8) == 0 && cli_parse_int64(text + 8, &a) && a >= 1) {
        options->pattern = ATTN_PATTERN_STRIDED;
        options->pattern_stride = a;
    } else if (strncmp(text, "fixed:", 6) == 0 && parse_pair(text + 6, &a, &b) && a >= 1 &&
               b >= 1 && b <= a) {
        options->pattern = ATTN_PATTERN_FIXED;
        options->pattern_stride = a;
        options->pattern_summary = b;
    } else if (strncmp(text, "dilated:", 8) == 0 && parse_pair(text + 8, &a, &b) && a >= 0 &&
               b >= 1) {
        options->pattern = ATTN_PATTERN_DILATED;
        options->pattern_radius = a;
        options->pattern_dilation = b;
    } else {
        return false;
    }
    return true;
}

/* ---- parsing ---------------------------------------------------------------------------- */

void cli_attention_arguments_init(cli_attention_arguments *arguments) {
    memset(arguments, 0, sizeof *arguments);
    arguments->options = attn_options_default();
    arguments->execution = attn_execution_default();
}

cli_parse_result cli_parse_attention_option(cli_attention_arguments *arguments,
                                            const char *command, int argc, char **argv,
                                            int *index) {
    const char *name = argv[*index];
    attn_options *options = &arguments->options;

    /* Flags without a value. */
    if (strcmp(name, "--alibi") == 0) {
        options->alibi = 1;
        if (arguments->needs_alignment == NULL) arguments->needs_alignment = "--alibi";
        return CLI_PARSE_CONSUMED;
    }

    static const char *const with_value[] = {
        "--scale", "--causal", "--align", "--window", "--mask", "--bias", "--alibi-slopes",
        "--softcap", "--empty-rows", "--threads", "--query-lengths", "--key-lengths",
        "--global-tokens", "--pattern", "--block-layout", "--block-size", "--query-positions",
        "--key-positions", "--kernel", "--memory-limit", "--dropout", "--dropout-seed",
        "--dropout-offset"};
    bool known = false;
    for (size_t i = 0; i < sizeof with_value / sizeof with_value[0]; ++i)
        known = known || strcmp(name, with_value[i]) == 0;
    if (!known) return CLI_PARSE_NOT_MINE;
    if (*index + 1 >= argc) {
        cli_error(command, "%s needs a value (see attn %s --help)", name, command);
        return CLI_PARSE_ERROR;
    }
    const char *value = argv[++*index];
    double real = 0;
    int64_t a = 0, b = 0;

    if (strcmp(name, "--scale") == 0) {
        if (!cli_parse_double(value, &real) || !(real > 0) || !isfinite((float)real) ||
            (float)real == 0.0f) {
            cli_error(command, "--scale '%s': expected a finite number > 0", value);
            return CLI_PARSE_ERROR;
        }
        options->custom_scale = 1;
        options->scale = (float)real;
    } else if (strcmp(name, "--causal") == 0 || strcmp(name, "--align") == 0) {
        if (!parse_alignment(value, &options->alignment)) {
            cli_error(command, "%s '%s': expected bottom-right or top-left", name, value);
            return CLI_PARSE_ERROR;
        }
        arguments->alignment_given = true;
        if (name[2] == 'c') options->causal = 1;
    } else if (strcmp(name, "--window") == 0) {
        if (!parse_pair(value, &a, &b) || a < -1 || b < -1) {
            cli_error(command, "--window '%s': expected L,R with integers >= -1 (-1 = unbounded)",
                      value);
            return CLI_PARSE_ERROR;
        }
        options->window = 1;
        options->window_left = a;
        options->window_right = b;
        arguments->needs_alignment = "--window";
    } else if (strcmp(name, "--mask") == 0) {
        arguments->mask_path = value;
    } else if (strcmp(name, "--bias") == 0) {
        arguments->bias_path = value;
    } else if (strcmp(name, "--alibi-slopes") == 0) {
        arguments->alibi_slopes_path = value;
        options->alibi = 1;
        if (arguments->needs_alignment == NULL) arguments->needs_alignment = "--alibi";
    } else if (strcmp(name, "--softcap") == 0) {
        if (!cli_parse_double(value, &real) || !(real > 0) || !isfinite((float)real)) {
            cli_error(command, "--softcap '%s': expected a finite number > 0", value);
            return CLI_PARSE_ERROR;
        }
        options->softcap = (float)real;
    } else if (strcmp(name, "--dropout") == 0) {
        if (!cli_parse_double(value, &real) || real < 0 || real >= 1 || (float)real >= 1.0f) {
            cli_error(command, "--dropout '%s': expected a probability in [0, 1)", value);
            return CLI_PARSE_ERROR;
        }
        options->dropout_p = (float)real;
    } else if (strcmp(name, "--dropout-seed") == 0 || strcmp(name, "--dropout-offset") == 0) {
        uint64_t number;
        if (!parse_uint64(value, &number)) {
            cli_error(command, "%s '%s': expected an integer in [0, 2^64)", name, value);
            return CLI_PARSE_ERROR;
        }
        if (strcmp(name, "--dropout-seed") == 0) options->dropout_seed = number;
        else options->dropout_offset = number;
    } else if (strcmp(name, "--empty-rows") == 0) {
        if (strcmp(value, "error") == 0) options->empty_rows = ATTN_EMPTY_ROWS_ERROR;
        else if (strcmp(value, "zero") == 0) options->empty_rows = ATTN_EMPTY_ROWS_ZERO;
        else if (strcmp(value, "nan") == 0) options->empty_rows = ATTN_EMPTY_ROWS_NAN;
        else {
            cli_error(command, "--empty-rows '%s': expected error, zero or nan", value);
            return CLI_PARSE_ERROR;
        }
    } else if (strcmp(name, "--threads") == 0) {
        if (!cli_parse_int64(value, &a) || a < 1 || a > ATTN_MAX_THREADS) {
            cli_error(command, "--threads '%s': expected an integer in 1..%d (the library's "
                      "ATTN_MAX_THREADS)", value, ATTN_MAX_THREADS);
            return CLI_PARSE_ERROR;
        }
        arguments->execution.num_threads = (int)a;
    } else if (strcmp(name, "--query-lengths") == 0) {
        arguments->query_lengths_path = value;
    } else if (strcmp(name, "--key-lengths") == 0) {
        arguments->key_lengths_path = value;
    } else if (strcmp(name, "--query-positions") == 0) {
        arguments->query_positions_path = value;
    } else if (strcmp(name, "--key-positions") == 0) {
        arguments->key_positions_path = value;
    } else if (strcmp(name, "--global-tokens") == 0) {
        free(arguments->global_tokens);
        arguments->global_tokens = NULL;
        if (!parse_index_list(value, &arguments->global_tokens, &options->global_token_count)) {
            cli_error(command, "--global-tokens '%s': expected indices i,j,k (integers >= 0)",
                      value);
            return CLI_PARSE_ERROR;
        }
        options->global_tokens = arguments->global_tokens;
    } else if (strcmp(name, "--pattern") == 0) {
        if (!parse_pattern(value, options)) {
            cli_error(command, "--pattern '%s': expected strided:L (L >= 1), fixed:L,C "
                      "(1 <= C <= L) or dilated:R,D (R >= 0, D >= 1)", value);
            return CLI_PARSE_ERROR;
        }
        arguments->needs_alignment = "--pattern";
    } else if (strcmp(name, "--block-layout") == 0) {
        arguments->block_layout_path = value;
    } else if (strcmp(name, "--block-size") == 0) {
        if (!parse_pair(value, &a, &b) || a < 1 || b < 1) {
            cli_error(command, "--block-size '%s': expected BQ,BK with integers >= 1", value);
            return CLI_PARSE_ERROR;
        }
        options->block_q = a;
        options->block_k = b;
    } else if (strcmp(name, "--kernel") == 0) {
        if (!cli_parse_kernel(value, &arguments->execution.kernel)) {
            cli_error(command, "--kernel '%s': expected " CLI_KERNEL_NAMES, value);
            return CLI_PARSE_ERROR;
        }
    } else if (strcmp(name, "--memory-limit") == 0) {
        if (!cli_parse_bytes(value, &arguments->execution.memory_limit_bytes)) {
            cli_error(command, "--memory-limit '%s': expected a byte count such as 1048576, "
                      "512K, 64M or 2G", value);
            return CLI_PARSE_ERROR;
        }
    }
    return CLI_PARSE_CONSUMED;
}

/* ---- loading ---------------------------------------------------------------------------- */

/* Checks that a rank-4 view of a [B|1, Hq|1, rows, columns] file matches. */
static bool check_broadcast_shape(const char *command, const char *option, const char *path,
                                  const attn_npy_array *array, const int64_t expected[4]) {
    attn_tensor view = cli_tensor_rank4(array);
    bool ok = (view.shape[0] == 1 || view.shape[0] == expected[0]) &&
              (view.shape[1] == 1 || view.shape[1] == expected[1]) &&
              view.shape[2] == expected[2] && view.shape[3] == expected[3];
    if (!ok) {
        char got[96];
        cli_error(command, "%s %s: shape %s does not broadcast to [B|1, Hq|1, %lld, %lld] with "
                  "[B, Hq] = [%lld, %lld]", option, path,
                  cli_shape_text(array->rank, array->shape, got, sizeof got),
                  (long long)expected[2], (long long)expected[3], (long long)expected[0],
                  (long long)expected[1]);
    }
    return ok;
}

/* Loads a rank-1 file of `length` elements of `dtype`. */
static bool load_vector(const char *command, const char *option, const char *path,
                        attn_dtype dtype, int64_t length, const char *hint,
                        attn_npy_array *array) {
    if (!cli_load_npy(command, option, path, dtype, 1, 1, hint, array)) return false;
    if (array->shape[0] != length) {
        cli_error(command, "%s %s: shape [%lld], expected [%lld]", option, path,
                  (long long)array->shape[0], (long long)length);
        attn_npy_free(array);
        return false;
    }
    return true;
}

/* Lengths must lie in [0, limit]; names the first bad entry. */
static bool check_lengths(const char *command, const char *option, const char *path,
                          const attn_npy_array *array, int64_t limit, const char *limit_name) {
    const int32_t *lengths = array->data;
    for (int64_t b = 0; b < array->shape[0]; ++b)
        if (lengths[b] < 0 || lengths[b] > limit) {
            cli_error(command, "%s %s: entry %lld = %d: must be in [0, %s = %lld]", option, path,
                      (long long)b, lengths[b], limit_name, (long long)limit);
            return false;
        }
    return true;
}

bool cli_attention_arguments_load(cli_attention_arguments *arguments, const char *command,
                                  int64_t batch, int64_t query_length, int64_t key_length,
                                  int64_t query_heads) {
    attn_options *options = &arguments->options;
    const int64_t score_shape[4] = {batch, query_heads, query_length, key_length};

    if (arguments->mask_path != NULL) {
        if (!cli_load_npy(command, "--mask", arguments->mask_path, ATTN_DTYPE_BOOL, 2, 4,
                          "(write it with astype(bool))", &arguments->mask_array) ||
            !check_broadcast_shape(command, "--mask", arguments->mask_path,
                                   &arguments->mask_array, score_shape))
            return false;
        arguments->mask_tensor = cli_tensor_rank4(&arguments->mask_array);
        options->mask = &arguments->mask_tensor;
    }
    if (arguments->bias_path != NULL) {
        if (!cli_load_npy(command, "--bias", arguments->bias_path, ATTN_DTYPE_F32, 2, 4,
                          "(write it with astype(np.float32))", &arguments->bias_array) ||
            !check_broadcast_shape(command, "--bias", arguments->bias_path,
                                   &arguments->bias_array, score_shape))
            return false;
        arguments->bias_tensor = cli_tensor_rank4(&arguments->bias_array);
        options->bias = &arguments->bias_tensor;
    }
    if (arguments->alibi_slopes_path != NULL) {
        if (!load_vector(command, "--alibi-slopes", arguments->alibi_slopes_path, ATTN_DTYPE_F32,
                         query_heads, "(one float32 slope per query head)",
                         &arguments->alibi_slopes_array))
            return false;
        options->alibi_slopes = arguments->alibi_slopes_array.data;
    }
    if (arguments->query_lengths_path != NULL) {
        if (!load_vector(command, "--query-lengths", arguments->query_lengths_path, ATTN_DTYPE_I32,
                         batch, "(write it with astype(np.int32))",
                         &arguments->query_lengths_array) ||
            !check_lengths(command, "--query-lengths", arguments->query_lengths_path,
                           &arguments->query_lengths_array, query_length, "Tq"))
            return false;
        options->query_lengths = arguments->query_lengths_array.data;
    }
    if (arguments->key_lengths_path != NULL) {
        if (!load_vector(command, "--key-lengths", arguments->key_lengths_path, ATTN_DTYPE_I32,
                         batch, "(write it with astype(np.int32))",
                         &arguments->key_lengths_array) ||
            !check_lengths(command, "--key-lengths", arguments->key_lengths_path,
                           &arguments->key_lengths_array, key_length, "Tk"))
            return false;
        options->key_lengths = arguments->key_lengths_array.data;
    }
    if (arguments->query_positions_path != NULL) {
        if (!load_vector(command, "--query-positions", arguments->query_positions_path,
                         ATTN_DTYPE_I64, query_length, "(write it with astype(np.int64))",
                         &arguments->query_positions_array))
            return false;
        options->query_positions = arguments->query_positions_array.data;
    }
    if (arguments->key_positions_path != NULL) {
        if (!load_vector(command, "--key-positions", arguments->key_positions_path, ATTN_DTYPE_I64,
                         key_length, "(write it with astype(np.int64))",
                         &arguments->key_positions_array))
            return false;
        options->key_positions = arguments->key_positions_array.data;
    }
    if ((options->block_q > 0) != (arguments->block_layout_path != NULL)) {
        cli_error(command, "%s", arguments->block_layout_path != NULL
                                     ? "--block-layout needs --block-size BQ,BK"
                                     : "--block-size is only used with --block-layout L.npy");
        return false;
    }
    if (arguments->block_layout_path != NULL) {
        const int64_t tile_shape[4] = {batch, query_heads,
                                       (query_length + options->block_q - 1) / options->block_q,
                                       (key_length + options->block_k - 1) / options->block_k};
        if (!cli_load_npy(command, "--block-layout", arguments->block_layout_path,
                          ATTN_DTYPE_BOOL, 2, 4, "(write it with astype(bool))",
                          &arguments->block_layout_array) ||
            !check_broadcast_shape(command, "--block-layout", arguments->block_layout_path,
                                   &arguments->block_layout_array, tile_shape))
            return false;
        arguments->block_layout_tensor = cli_tensor_rank4(&arguments->block_layout_array);
        options->block_layout = &arguments->block_layout_tensor;
    }

    /* Alignment: named for causal; for the other position-dependent options it only matters
     * when Tq != Tk and the positions are not given explicitly. */
    bool positions_given = options->query_positions != NULL && options->key_positions != NULL;
    if (!arguments->alignment_given && arguments->needs_alignment != NULL) {
        if (query_length != key_length && !positions_given) {
            cli_error(command, "%s needs an alignment because Tq = %lld != Tk = %lld: add --align "
                      "bottom-right or --align top-left", arguments->needs_alignment,
                      (long long)query_length, (long long)key_length);
            return false;
        }
        options->alignment = ATTN_ALIGN_BOTTOM_RIGHT; /* same as top-left here */
    }
    return true;
}

void cli_attention_arguments_free(cli_attention_arguments *arguments) {
    free(arguments->global_tokens);
    attn_npy_free(&arguments->mask_array);
    attn_npy_free(&arguments->bias_array);
    attn_npy_free(&arguments->alibi_slopes_array);
    attn_npy_free(&arguments->query_lengths_array);
    attn_npy_free(&arguments->key_lengths_array);
    attn_npy_free(&arguments->query_positions_array);
    attn_npy_free(&arguments->key_positions_array);
    attn_npy_free(&arguments->block_layout_array);
    cli_attention_arguments_init(arguments);
}
