/* Model and training configuration: defaults, presets, validation, derived sizes. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"

void mw_config_default(mw_config *c) {
    memset(c, 0, sizeof *c);
    mw_config_preset(c, "gpt2-tiny");
    c->batch = 4;
    c->seq = 64;
    c->accum = 1;
    c->steps = 100;
    c->warmup = 10;
    c->lr = 3e-4;
    c->min_lr_frac = 0.1;
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->eps = 1e-8;
    c->weight_decay = 0.1;
    c->grad_clip = 1.0;
    c->seed = 1337;
    c->eval_every = 0;
    c->eval_batches = 8;
    c->save_every = 0;
    c->keep = 3;
}

static const struct {
    const char *name;
    int L, H, C, V, ctx;
} presets[] = {
    {"gpt2-tiny", 4, 4, 128, 256, 256},     {"gpt2", 12, 12, 768, 50257, 1024},
    {"gpt2-medium", 24, 16, 1024, 50257, 1024}, {"gpt2-large", 36, 20, 1280, 50257, 1024},
    {"gpt2-xl", 48, 25, 1600, 50257, 1024},
};

mw_status mw_config_preset(mw_config *c, const char *name) {
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (strcmp(presets[i].name, name) == 0) {
            c->n_layer = presets[i].L;
            c->n_head = presets[i].H;
            c->n_embd = presets[i].C;
            c->vocab = presets[i].V;
            c->ctx = presets[i].ctx;
            return MW_OK;
        }
    return mw_fail(MW_ERR_ARG,
                   "unknown preset '%s' (known: gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl)",
                   name);
}

mw_status mw_config_validate(const mw_config *c) {
#define NEED(cond, ...)                                                                            \
    if (!(cond)) return mw_fail(MW_ERR_ARG, __VA_ARGS__)
    NEED(c->n_layer >= 1 && c->n_layer <= 4096, "--layers must be in 1..4096 (got %d)", c->n_layer);
    NEED(c->n_head >= 1, "--heads must be >= 1 (got %d)", c->n_head);
    NEED(c->n_embd >= 1 && c->n_embd <= 65536, "--dim must be in 1..65536 (got %d)", c->n_embd);
    NEED(c->n_embd % c->n_head == 0, "--dim (%d) must be a multiple of --heads (%d)", c->n_embd,
         c->n_head);
    NEED(c->vocab >= 2 && c->vocab <= (1 << 24), "--vocab must be in 2..16777216 (got %d)", c->vocab);
    NEED(c->ctx >= 1 && c->ctx <= (1 << 20), "--ctx must be in 1..1048576 (got %d)", c->ctx);
    NEED(c->seq >= 1 && c->seq <= c->ctx, "--seq must be in 1..ctx=%d (got %d)", c->ctx, c->seq);
    NEED(c->batch >= 1, "--batch must be >= 1 (got %d)", c->batch);
    NEED((double)c->batch * c->seq <= (1 << 24), "--batch x --seq must be at most 16777216");
    NEED(c->accum >= 1, "--accum must be >= 1 (got %d)", c->accum);
    NEED(c->steps >= 1, "--steps must be >= 1 (got %d)", c->steps);
    NEED(c->warmup >= 0, "--warmup must be >= 0 (got %d)", c->warmup);
    NEED(c->lr > 0 && isfinite(c->lr), "--lr must be > 0");
    NEED(c->min_lr_frac >= 0 && c->min_lr_frac <= 1, "--min-lr-frac must be in [0,1]");
    NEED(c->beta1 >= 0 && c->beta1 < 1 && c->beta2 >= 0 && c->beta2 < 1,
         "--beta1/--beta2 must be in [0,1)");
    NEED(c->eps > 0, "--eps must be > 0");
    NEED(c->weight_decay >= 0 && isfinite(c->weight_decay), "--weight-decay must be >= 0");
    NEED(c->grad_clip >= 0 && isfinite(c->grad_clip), "--grad-clip must be >= 0 (0: off)");
    NEED(c->threads >= 0 && c->threads <= 1024, "--threads must be in 0..1024");
    NEED(c->eval_every >= 0 && c->eval_batches >= 1, "--eval-every must be >= 0, --eval-batches >= 1");
    NEED(c->save_every >= 0 && c->keep >= 1, "--save-every must be >= 0 and --keep >= 1");
    NEED(c->recompute != MW_RECOMPUTE_BLOCKS ||
             strnlen(c->recompute_blocks, sizeof c->recompute_blocks) < sizeof c->recompute_blocks,
         "--recompute blocks:... is not terminated");
    NEED(c->recompute != MW_RECOMPUTE_BLOCKS ||
             strspn(c->recompute_blocks, "nsf") == strnlen(c->recompute_blocks, sizeof c->recompute_blocks),
         "--recompute blocks:... takes the letters n, s and f only");
    NEED(c->recompute != MW_RECOMPUTE_BLOCKS || (int)strnlen(c->recompute_blocks, sizeof c->recompute_blocks) == c->n_layer,
         "--recompute blocks:... needs one letter per block: %d letters for %d blocks",
         (int)strnlen(c->recompute_blocks, sizeof c->recompute_blocks), c->n_layer);
    NEED(c->recompute >= MW_RECOMPUTE_NONE && c->recompute <= MW_RECOMPUTE_BLOCKS,
         "unknown --recompute policy %d", c->recompute);
    NEED(c->recompute_every >= 0 && c->recompute_every <= c->n_layer,
         "--recompute every:K needs K in 1..--layers=%d (got %d)", c->n_layer, c->recompute_every);
    NEED(c->inference >= 0 && c->inference <= MW_INFERENCE_EVAL, "unknown inference mode %d", c->inference);
    NEED(c->recompute != MW_RECOMPUTE_AUTO || c->budget > 0 || c->inference,
         "--recompute auto chooses per block what fits --budget: give a --budget");
#undef NEED
    return MW_OK;
}

size_t mw_config_num_params(const mw_config *c) {
    size_t C = c->n_embd;
    return (size_t)c->vocab * C + (size_t)c->ctx * C + (size_t)c->n_layer * (12 * C * C + 13 * C) +
           2 * C;
}

double mw_config_flops_per_token(const mw_config *c) {
    double C = c->n_embd, n_mm = c->n_layer * 12.0 * C * C + (double)c->vocab * C;
    return 6.0 * n_mm + 12.0 * c->n_layer * C * c->seq;
}

int mw_set_threads(int threads) {
    if (threads <= 0) threads = omp_get_num_procs();
    omp_set_num_threads(threads);
    return threads;
}

double mw_lr_at(const mw_config *c, int s) {
    double max_lr = c->lr, min_lr = c->lr * c->min_lr_frac;
    if (s < c->warmup) return max_lr * (s + 1) / c->warmup;
    double p = c->steps > c->warmup ? (double)(s - c->warmup) / (c->steps - c->warmup) : 0.0;
    if (p > 1.0) p = 1.0;
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + cos(3.14159265358979323846 * p));
}

mw_status mw_recompute_parse(mw_config *c, const char *s) {
    static const char *names[] = {"none", "selective", "full", NULL, "auto"};
    for (int i = 0; i < 5; i++)
        if (names[i] && strcmp(s, names[i]) == 0) {
            c->recompute = i;
            c->recompute_every = 0;
            return MW_OK;
        }
    if (strncmp(s, "blocks:", 7) == 0) {
        const char *b = s + 7;
        size_t n = strlen(b);
        if (n < 1 || n > MW_MAX_BLOCK_POLICIES || strspn(b, "nsf") != n)
            return mw_fail(MW_ERR_ARG, "--recompute blocks: takes 1 to %d letters n, s or f, one per "
                                       "block (got '%s')", MW_MAX_BLOCK_POLICIES, b);
        c->recompute = MW_RECOMPUTE_BLOCKS;
        c->recompute_every = 0;
        memcpy(c->recompute_blocks, b, n + 1);
        return MW_OK;
    }
    if (strncmp(s, "every:", 6) == 0) {
        const char *k = s + 6;
        char *end;
        long v = strcmp(k, "sqrt") == 0 ? 0 : strtol(k, &end, 10);
        if (strcmp(k, "sqrt") == 0 || (*k >= '0' && *k <= '9' && *end == 0 && v >= 1 && v <= 4096)) {
            c->recompute = MW_RECOMPUTE_EVERY;
            c->recompute_every = (int)v;
            return MW_OK;
        }
    }
    return mw_fail(MW_ERR_ARG,
                   "--recompute must be none, selective, full, every:K (K >= 1), every:sqrt, auto or "
                   "blocks:LETTERS (got '%s')", s);
}
