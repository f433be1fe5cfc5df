/*
 * adam.c — the Adam optimiser (Kingma & Ba 2015) with PyTorch's bias correction and L2 weight
 * decay; element-wise, so the result never depends on the thread count.
 */
#include "core/internal.h"
#include "attn_layers.h"

#include <math.h>

attn_adam_config attn_adam_default(void) {
    attn_adam_config config = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
    return config;
}

/* parameters, gradients, first_moment, second_moment: float[count]. */
attn_status attn_adam_step(const attn_adam_config *config, int64_t step, float *parameters,
                           const float *gradients, float *first_moment, float *second_moment,
                           int64_t count, attn_error *error) {
    if (config == NULL) return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT, "config = NULL");
    if (parameters == NULL || gradients == NULL || first_moment == NULL || second_moment == NULL)
        return attn_fail(error, ATTN_ERROR_NULL_ARGUMENT,
                         "parameters, gradients, first_moment or second_moment = NULL");
    if (!(config->learning_rate > 0.0f) || !isfinite(config->learning_rate))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.learning_rate = %g: must be finite and > 0",
                         (double)config->learning_rate);
    if (!(config->beta1 >= 0.0f && config->beta1 < 1.0f))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "config.beta1 = %g: must be in [0, 1)",
                         (double)config->beta1);
    if (!(config->beta2 >= 0.0f && config->beta2 < 1.0f))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "config.beta2 = %g: must be in [0, 1)",
                         (double)config->beta2);
    if (!(config->epsilon > 0.0f))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "config.epsilon = %g: must be > 0",
                         (double)config->epsilon);
    if (!(config->weight_decay >= 0.0f) || !isfinite(config->weight_decay))
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT,
                         "config.weight_decay = %g: must be finite and >= 0",
                         (double)config->weight_decay);
    if (step < 1)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "step = %lld: must be >= 1",
                         (long long)step);
    if (count < 0)
        return attn_fail(error, ATTN_ERROR_INVALID_ARGUMENT, "count = %lld: must be >= 0",
                         (long long)count);
    double correction1 = 1.0 - pow(config->beta1, (double)step);
    double correction2 = 1.0 - pow(config->beta2, (double)step);
    float step_size = (float)(config->learning_rate / correction1);
    float inverse_sqrt_correction2 = (float)(1.0 / sqrt(correction2));
    float beta1 = config->beta1, beta2 = config->beta2;
    for (int64_t i = 0; i < count; ++i) {
        float gradient = gradients[i] + config->weight_decay * parameters[i];
        first_moment[i] = beta1 * first_moment[i] + (1.0f - beta1) * gradient;
        second_moment[i] = beta2 * second_moment[i] + (1.0f - beta2) * gradient * gradient;
        float denominator = sqrtf(second_moment[i]) * inverse_sqrt_correction2 + config->epsilon;
        parameters[i] -= step_size * first_moment[i] / denominator;
    }
    return ATTN_OK;
}
