/*
 * test_layer_adam.c — attn_adam_step against a double-precision transcription of PyTorch's
 * torch.optim.Adam (bias correction, L2 weight decay) over several steps, a quadratic that Adam
 * must minimise, and argument errors.
 */
#include "attn_layers.h"
#include "test_support.h"

#include <math.h>
#include <string.h>

int main(void) {
    enum { N = 37, STEPS = 25 };
    test_rng rng;
    test_rng_seed(&rng, 61);
    const float decays[2] = {0.0f, 0.01f};
    for (int c = 0; c < 2; ++c) {
        attn_adam_config config = attn_adam_default();
        config.learning_rate = 0.01f;
        config.weight_decay = decays[c];
        float p[N], g[N], m[N] = {0}, v[N] = {0};
        double pd[N], md[N] = {0}, vd[N] = {0};
        test_fill_normal(&rng, p, N, 1.0f);
        for (int i = 0; i < N; ++i) pd[i] = p[i];
        double worst = 0.0;
        for (int step = 1; step <= STEPS; ++step) {
            test_fill_normal(&rng, g, N, 1.0f);
            attn_error error;
            CHECK_STATUS(attn_adam_step(&config, step, p, g, m, v, N, &error), ATTN_OK, &error,
                         "step %d", step);
            for (int i = 0; i < N; ++i) {
                double grad = g[i] + (double)config.weight_decay * pd[i];
                md[i] = 0.9 * md[i] + 0.1 * grad;
                vd[i] = 0.999 * vd[i] + 0.001 * grad * grad;
                double m_hat = md[i] / (1 - pow(0.9, step)), v_hat = vd[i] / (1 - pow(0.999, step));
                pd[i] -= 0.01 * m_hat / (sqrt(v_hat) + 1e-8);
                worst = fmax(worst, fabs(p[i] - pd[i]));
            }
        }
        CHECK(worst < 1e-5, "weight_decay %g: %d steps vs double Adam, max |dp| %.3g",
              (double)decays[c], STEPS, worst);
    }
    /* Minimises f(p) = sum (p - 3)^2 from 0. */
    float p[4] = {0}, g[4], m[4] = {0}, v[4] = {0};
    attn_adam_config config = attn_adam_default();
    config.learning_rate = 0.1f;
    for (int step = 1; step <= 500; ++step) {
        for (int i = 0; i < 4; ++i) g[i] = 2.0f * (p[i] - 3.0f);
        attn_adam_step(&config, step, p, g, m, v, 4, NULL);
    }
    CHECK(fabsf(p[0] - 3.0f) < 1e-2 && fabsf(p[3] - 3.0f) < 1e-2, "Adam reaches the minimum: %g",
          (double)p[0]);
    attn_error error;
    config.beta1 = 1.0f;
    CHECK_STATUS(attn_adam_step(&config, 1, p, g, m, v, 4, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "beta1 = 1");
    CHECK(strstr(error.message, "config.beta1 = 1") != NULL, "message: %s", error.message);
    config = attn_adam_default();
    CHECK_STATUS(attn_adam_step(&config, 0, p, g, m, v, 4, &error), ATTN_ERROR_INVALID_ARGUMENT,
                 &error, "step 0");
    CHECK_STATUS(attn_adam_step(&config, 1, NULL, g, m, v, 4, &error), ATTN_ERROR_NULL_ARGUMENT,
                 &error, "NULL parameters");
    return test_finish();
}
