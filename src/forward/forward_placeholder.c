/* PLACEHOLDER-UNBUILT: the engine helper replaces this file. */
#include "../core/internal.h"
attn_status attn_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                         const attn_options *options, attn_tensor *out, attn_tensor *lse,
                         attn_error *error) {
    return attn_fail(error, ATTN_ERROR_UNSUPPORTED, "not built yet");
}
attn_status attn_reference_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                         const attn_options *options, attn_tensor *out, attn_tensor *lse,
                         attn_error *error) {
    return attn_fail(error, ATTN_ERROR_UNSUPPORTED, "not built yet");
}
attn_options attn_options_default(void) { attn_options o = {0}; return o; }
