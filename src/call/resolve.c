/*
 * resolve.c — the defaults of attn_options and attn_execution (attn.h) and their resolution
 * at the start of every call (call.h).
 */
#include "call.h"

#include <stddef.h>
#include <string.h>

#include "../core/internal.h"
#include "../kernels/registry.h"

attn_options attn_options_default(void) {
    attn_options options;
    memset(&options, 0, sizeof options);
    options.version = ATTN_OPTIONS_VERSION;
    options.window_left = -1; /* used only when `window` is switched on */
    options.window_right = -1;
    return options;
}

attn_execution attn_execution_default(void) {
    attn_execution execution;
    memset(&execution, 0, sizeof execution);
    execution.version = ATTN_EXECUTION_VERSION;
    return execution;
}

attn_status attn_options_resolve(const attn_options *options, attn_options *resolved,
                                 attn_error *error) {
    if (options == NULL) {
        memset(resolved, 0, sizeof *resolved);
    } else {
        if (options->version < 0 || options->version > ATTN_OPTIONS_VERSION)
            return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                             "options.version = %d: must be 0, 1, 2 or ATTN_OPTIONS_VERSION (%d)",
                             options->version, ATTN_OPTIONS_VERSION);
        /* versions 1 and 2: the layouts before `sinks` and before dropout, whose bytes past
           them are not read */
        const size_t bytes = options->version == 1   ? offsetof(attn_options, sinks)
                             : options->version == 2 ? offsetof(attn_options, dropout_p)
                                                     : sizeof *options;
        memset(resolved, 0, sizeof *resolved);
        memcpy(resolved, options, bytes);
    }
    resolved->version = ATTN_OPTIONS_VERSION;
    if (!resolved->window) {
        resolved->window_left = -1;
        resolved->window_right = -1;
    }
    return ATTN_OK;
}

attn_status attn_execution_resolve(const attn_execution *execution, attn_execution *resolved,
                                   attn_error *error) {
    if (execution == NULL) {
        memset(resolved, 0, sizeof *resolved);
        resolved->version = ATTN_EXECUTION_VERSION;
        return ATTN_OK;
    }
    if (execution->version != 0 && execution->version != ATTN_EXECUTION_VERSION)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "execution.version = %d: must be 0 or ATTN_EXECUTION_VERSION (%d)",
                         execution->version, ATTN_EXECUTION_VERSION);
    /* An upper bound too: each thread a call asks for may become one of the pool's. */
    if (execution->num_threads < 0 || execution->num_threads > ATTN_MAX_THREADS)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "execution.num_threads = %d: must be in [0, %d] (0 = the default)",
                         execution->num_threads, ATTN_MAX_THREADS);
    if (execution->tile_q < 0 || execution->tile_q > ATTN_MAX_TILE)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "execution.tile_q = %d: must be in [0, %d] (0 = tuned default)",
                         execution->tile_q, ATTN_MAX_TILE);
    if (execution->tile_k < 0 || execution->tile_k > ATTN_MAX_TILE)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "execution.tile_k = %d: must be in [0, %d] (0 = tuned default)",
                         execution->tile_k, ATTN_MAX_TILE);
    if (attn_kernel_choice_name(execution->kernel) == NULL)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "execution.kernel = %d: unknown",
                         (int)execution->kernel);
    *resolved = *execution;
    resolved->version = ATTN_EXECUTION_VERSION;
    return ATTN_OK;
}

const char *attn_options_padded_batch_field(const attn_options *options) {
    return options->mask != NULL              ? "mask"
           : options->bias != NULL            ? "bias"
           : options->query_lengths != NULL   ? "query_lengths"
           : options->key_lengths != NULL     ? "key_lengths"
           : options->query_positions != NULL ? "query_positions"
           : options->key_positions != NULL   ? "key_positions"
           : options->global_tokens != NULL   ? "global_tokens"
           : options->block_layout != NULL    ? "block_layout"
                                              : NULL;
}
