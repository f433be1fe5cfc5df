/*
 * alibi.c — the standard ALiBi slopes (attn.h, attn_alibi_slopes).
 */
#include <math.h>

#include "../core/internal.h"

/* slopes[k] = 2^(-8(k+1)/n) for k < n: the geometric sequence of n (a power of two) heads. */
static void power_of_two_slopes(int n, int first_output, int step, int count, float *slopes) {
    for (int k = 0; k < count; ++k)
        slopes[first_output + k] = (float)exp2(-8.0 * (double)(1 + k * step) / (double)n);
}

attn_status attn_alibi_slopes(int num_heads, float *slopes, attn_error *error) {
    if (slopes == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "slopes is NULL");
    if (num_heads < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "num_heads = %d: must be >= 1",
                         num_heads);
    int closest_power = 1; /* the largest power of two <= num_heads */
    while (closest_power <= num_heads / 2) closest_power *= 2;
    power_of_two_slopes(closest_power, 0, 1, closest_power, slopes);
    /* The rest: every other slope of 2 * closest_power, i.e. 2^(-8(2m+1)/(2c)), m = 0, 1, ... */
    power_of_two_slopes(2 * closest_power, closest_power, 2, num_heads - closest_power, slopes);
    return ATTN_OK;
}
