/*
 * test_forward_cost.c — tile skipping saves the work, counted deterministically: the tiled
 * forward visits, for each query tile, only the key tiles of attn_mask_candidate_keys and
 * computes only those attn_mask_classify_tile does not call EMPTY. Counting those tiles the
 * same way, causal must compute about half of the tiles of full attention and a sliding
 * window O(T · window) tiles, visiting no more than it computes plus a few per query tile.
 * Wall times of the three calls are printed for information only (the machine is shared, so
 * they are not asserted).
 */
#include <time.h>

#include "mask/mask.h"
#include "test_support.h"

typedef struct tile_counts {
    int64_t visited;  /* key tiles the loop iterates over */
    int64_t computed; /* visited tiles that are not EMPTY */
} tile_counts;

/* The forward's loop structure for one (b, h), tiles of `tile` x `tile`. */
static tile_counts count_tiles(const attn_options *options, int64_t T, int64_t tile) {
    attn_problem problem = {.batch = 1, .query_length = T, .key_length = T, .query_heads = 1,
                            .kv_heads = 1, .group_size = 1, .key_dim = 64, .value_dim = 64,
                            .scale = 0.125f};
    tile_counts counts = {0, 0};
    attn_mask_context context;
    attn_error error;
    CHECK_STATUS(attn_mask_context_init(&context, options, &problem, &error), ATTN_OK, &error, "context");
    for (int64_t i0 = 0; i0 < T; i0 += tile) {
        const int64_t i1 = i0 + tile < T ? i0 + tile : T;
        int64_t key_begin, key_end;
        attn_mask_candidate_keys(&context, 0, i0, i1, &key_begin, &key_end);
        for (int64_t j0 = key_begin / tile * tile; j0 < key_end; j0 += tile) {
            const int64_t j1 = j0 + tile < key_end ? j0 + tile : key_end;
            ++counts.visited;
            counts.computed += attn_mask_classify_tile(&context, 0, 0, i0, i1, j0, j1) != ATTN_TILE_EMPTY;
        }
    }
    attn_mask_context_free(&context);
    return counts;
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double time_forward(int64_t T, const attn_options *options) {
    test_tensor q = test_tensor_new(1, T, 1, 64, TEST_LAYOUT_BTHD), k = test_tensor_new(1, T, 1, 64, TEST_LAYOUT_BTHD);
    test_tensor v = test_tensor_new(1, T, 1, 64, TEST_LAYOUT_BTHD), o = test_tensor_new(1, T, 1, 64, TEST_LAYOUT_BTHD);
    test_rng rng;
    test_rng_seed(&rng, 1);
    test_tensor_fill_normal(&q, &rng, 1.0f);
    test_tensor_fill_normal(&k, &rng, 1.0f);
    test_tensor_fill_normal(&v, &rng, 1.0f);
    attn_error error = {0};
    attn_execution one_thread = attn_execution_default();
    one_thread.num_threads = 1;
    const double start = seconds_now();
    CHECK_STATUS(attn_forward(&q.view, &k.view, &v.view, options, &o.view, NULL, &one_thread, &error), ATTN_OK, &error, "timed forward");
    const double elapsed = seconds_now() - start;
    test_tensor_free(&q);
    test_tensor_free(&k);
    test_tensor_free(&v);
    test_tensor_free(&o);
    return elapsed;
}

int main(void) {
    const int64_t T = 32768, tile = 64, tiles_per_side = T / tile;
    attn_options full = attn_options_default();
    attn_options causal = full;
    causal.causal = 1;
    causal.alignment = ATTN_ALIGN_BOTTOM_RIGHT;
    attn_options window = causal;
    window.window = 1;
    window.window_left = 256;

    const tile_counts full_counts = count_tiles(&full, T, tile);
    const tile_counts causal_counts = count_tiles(&causal, T, tile);
    const tile_counts window_counts = count_tiles(&window, T, tile);
    printf("T = %lld, tiles %lld: full computes %lld tiles, causal %lld (visits %lld), window 256 %lld (visits %lld)\n",
           (long long)T, (long long)tile, (long long)full_counts.computed, (long long)causal_counts.computed,
           (long long)causal_counts.visited, (long long)window_counts.computed, (long long)window_counts.visited);
    CHECK(full_counts.computed == tiles_per_side * tiles_per_side, "full attention computes every tile");
    /* Causal: the lower triangle plus the diagonal, n(n+1)/2 tiles. */
    CHECK(causal_counts.computed == tiles_per_side * (tiles_per_side + 1) / 2,
          "causal computes %lld tiles, expected n(n+1)/2 = %lld", (long long)causal_counts.computed,
          (long long)(tiles_per_side * (tiles_per_side + 1) / 2));
    CHECK(causal_counts.visited == causal_counts.computed, "causal visits no EMPTY tile");
    /* Window 256 left + diagonal: at most 256/64 + 2 = 6 tiles per query tile. */
    CHECK(window_counts.computed <= 6 * tiles_per_side, "window computes %lld tiles, at most %lld",
          (long long)window_counts.computed, (long long)(6 * tiles_per_side));
    CHECK(window_counts.visited <= window_counts.computed + tiles_per_side,
          "window visits %lld tiles for %lld computed", (long long)window_counts.visited,
          (long long)window_counts.computed);

    /* For information: wall times on this machine (1 thread, T = 2048). */
    const double full_time = time_forward(2048, &full);
    const double causal_time = time_forward(2048, &causal);
    const double window_time = time_forward(2048, &window);
    printf("T = 2048, D = 64, 1 thread: full %.4f s, causal %.4f s (%.2f), window 256 %.4f s (%.2f)\n",
           full_time, causal_time, causal_time / full_time, window_time, window_time / full_time);
    return test_finish();
}
