/*
 * call.h — one attention call, prepared once: the caller's options (what to compute) and
 * execution settings (how to run) resolved to their defaults and checked. Every entry point
 * (forward, backward, decode, ring, and the references) starts here, so NULL options, a
 * zero-initialised struct and the window switch mean the same thing everywhere.
 */
#ifndef ATTN_CALL_H
#define ATTN_CALL_H

#include "attn.h"

/* Tile sizes accepted in attn_execution (tile_q, tile_k). */
#define ATTN_MAX_TILE 4096

/*
 * Copies *options into *resolved with the defaults applied (NULL = the zero struct: plain
 * attention), after checking options->version. The window switch is folded in: with
 * window == 0, resolved->window_left = window_right = -1 (unbounded), so code below the
 * entry points reads the window bounds alone (-1 = unbounded side). Idempotent. The other
 * fields are checked against the tensors later (attn_validate_options).
 */
attn_status attn_options_resolve(const attn_options *options, attn_options *resolved,
                                 attn_error *error);

/* Copies *execution into *resolved (NULL = the zero struct: defaults) and checks every
 * field: version, num_threads >= 0, tiles in [0, ATTN_MAX_TILE], a known kernel. */
attn_status attn_execution_resolve(const attn_execution *execution, attn_execution *resolved,
                                   attn_error *error);

#endif /* ATTN_CALL_H */
