/* The training loop: micro-batches, accumulation, clipping, AdamW, evaluation. */
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../core/status.h"
#include "../graph/model.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

uint64_t mw_peak_rss(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_maxrss * 1024;
}

static mw_status check_vocab(const mw_model *m, const mw_data *d, const char *what) {
    const mw_config *c = mw_model_config(m);
    if (mw_data_vocab(d) > (uint32_t)c->vocab)
        return mw_fail(MW_ERR_ARG, "the %s tokens use a vocabulary of %u but the model has --vocab %d",
                       what, mw_data_vocab(d), c->vocab);
    return MW_OK;
}

/* Every target after the last whole batch (n_batches reaching past the whole batches): one more
 * batch whose rows are the windows left, the last one shorter; the rows and positions past the
 * data repeat token 0 and are not scored (causal attention: no scored position sees them). */
static mw_status eval_rest(mw_model *m, mw_data *d, uint64_t from, uint64_t n, double *sum) {
    const mw_config *c = mw_model_config(m);
    const int B = c->batch, T = c->seq, N = B * T;
    int32_t *in = mw_model_staging(m), *tg = in + N, *win = tg + N;
    memset(in, 0, sizeof(int32_t) * 2 * (size_t)N);
    for (int b = 0; b < B && (uint64_t)b * T < n; b++) {
        const uint64_t left = n - (uint64_t)b * T;
        const size_t len = left < (uint64_t)T ? (size_t)left : (size_t)T; /* targets in this row */
        MW_TRY(mw_data_read(d, from + (uint64_t)b * T, len + 1, win));
        memcpy(in + (size_t)b * T, win, sizeof(int32_t) * len);
        memcpy(tg + (size_t)b * T, win + 1, sizeof(int32_t) * len);
    }
    float l;
    MW_TRY(mw_model_forward(m, in, tg, &l));
    const float *losses = mw_model_losses(m); /* (B,T) */
    double s = 0.0;
    for (uint64_t i = 0; i < n; i++) s += losses[i]; /* row b's first positions are b*T.. */
    *sum = s;
    return MW_OK;
}

mw_status mw_evaluate_tokens(mw_model *m, mw_data *d, int n_batches, float *loss, uint64_t *tokens) {
    const mw_config *c = mw_model_config(m);
    const int B = c->batch, T = c->seq, N = B * T;
    MW_TRY(check_vocab(m, d, "validation"));
    const uint64_t count = mw_data_count(d), targets = count > 0 ? count - 1 : 0, whole = targets / N;
    if (targets == 0)
        return mw_fail(MW_ERR_ARG, "the validation file holds %llu token%s: nothing to score (each token is scored "
                                   "from those before it)", (unsigned long long)count, count == 1 ? "" : "s");
    uint64_t rest = 0; /* targets scored by a last partial batch */
    if (n_batches < 0) n_batches = 0;
    if ((uint64_t)n_batches > whole) n_batches = (int)whole, rest = targets - whole * N;
    int32_t *in = mw_model_staging(m), *tg = in + N, *win = tg + N;
    double sum = 0.0;
    const int total = n_batches + (rest > 0);
    mw_model_progress(m, 0, total);
    for (int i = 0; i < n_batches; i++) {
        for (int b = 0; b < B; b++) {
            MW_TRY(mw_data_read(d, ((uint64_t)i * B + b) * T, (size_t)T + 1, win));
            memcpy(in + (size_t)b * T, win, sizeof(int32_t) * T);
            memcpy(tg + (size_t)b * T, win + 1, sizeof(int32_t) * T);
        }
        float l;
        MW_TRY(mw_model_forward(m, in, tg, &l));
        sum += l;
        mw_model_progress(m, i + 1, total);
    }
    if (rest && c->pp > 1)
        return mw_fail(MW_ERR_ARG, "the validation split holds fewer than --eval-batches %d whole batches: under --pp the "
                                   "last batch's per-position losses are the last stage's alone; give --eval-batches %llu",
                       n_batches + 1, (unsigned long long)whole);
    if (rest) {
        double s;
        MW_TRY(eval_rest(m, d, (uint64_t)n_batches * N, rest, &s));
        *loss = (float)((sum * N + s) / ((double)n_batches * N + (double)rest));
        mw_model_progress(m, total, total);
    } else {
        if (n_batches == 0) return mw_fail(MW_ERR_ARG, "no batch to evaluate (--eval-batches 0)");
        *loss = (float)(sum / n_batches); /* whole batches alone: the mean of their means */
    }
    if (tokens) *tokens = (uint64_t)n_batches * N + rest;
    return MW_OK;
}

mw_status mw_evaluate(mw_model *m, mw_data *d, int n_batches, float *loss) {
    return mw_evaluate_tokens(m, d, n_batches, loss, NULL);
}

static mw_status train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r);

/* d = k1 - k0, field by field */
static void clock_diff(mw_model_clock *d, const mw_model_clock *k0, const mw_model_clock *k1) {
    d->compute_ms = k1->compute_ms - k0->compute_ms;
    d->io_read_ms = k1->io_read_ms - k0->io_read_ms;
    d->io_write_ms = k1->io_write_ms - k0->io_write_ms;
    d->io_busy_ms = k1->io_busy_ms - k0->io_busy_ms;
    d->io_wait_ms = k1->io_wait_ms - k0->io_wait_ms;
}

mw_status mw_train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r) {
    mw_model_clock k0, k1;
    mw_model_times(m, &k0);
    mw_status st = train_step(m, s, next, ctx, r);
    mw_model_times(m, &k1);
    clock_diff(&r->clock, &k0, &k1);
    return st;
}

static mw_status train_step(mw_model *m, int s, mw_batch_fn next, void *ctx, mw_step_report *r) {
    const mw_config *c = mw_model_config(m);
    if (c->pp > 1) return mw_pipe_train_step(m, s, next, ctx, r);
    if (c->dp) return mw_zero_train_step(m, s, next, ctx, r);
    const int N = c->batch * c->seq;
    int32_t *in = mw_model_staging(m), *tg = in + N, *win = tg + N;
    double t0 = now_ms(), loss = 0.0;
    mw_model_set_step(m, s);
    for (int k = 0; k < c->accum; k++) {
        float l;
        MW_TRY(next(ctx, in, tg, win));
        MW_TRY(mw_model_forward_backward(m, in, tg, 1.0f / c->accum, &l));
        loss += l;
    }
    memset(r, 0, sizeof *r);
    r->step = s + 1;
    r->loss = (float)(loss / c->accum);
    r->lr = mw_lr_at(c, s);
    mw_model_clock k0, k1; /* the norm's and the optimizer's passes: their part of the step */
    mw_model_times(m, &k0);
    const double t1 = now_ms();
    MW_TRY(mw_graph_grad_norm(m, &r->grad_norm));
    MW_TRY(mw_model_adamw_step(m, r->lr, r->grad_norm, s + 1));
    const double t2 = now_ms();
    mw_model_times(m, &k1);
    clock_diff(&r->opt_clock, &k0, &k1);
    r->ms = t2 - t0;
    r->opt_ms = t2 - t1;
    r->opt_split = 1;
    r->tokens_per_s = (double)N * c->accum / (r->ms / 1e3);
    return MW_OK;
}

void mw_run_state_init(mw_run_state *st, const mw_config *cfg) {
    mw_loader l;
    mw_loader_init(&l, NULL, cfg->seed);
    st->step = 0;
    st->loader_rng = l.rng;
}

typedef struct loader_ctx {
    mw_loader loader;
    int B, T;
} loader_ctx;

static mw_status loader_batch(void *ctx, int32_t *in, int32_t *tg, int32_t *scratch) {
    loader_ctx *lc = ctx;
    if (!in) return mw_loader_skip(&lc->loader, lc->B, lc->T);
    return mw_loader_next(&lc->loader, lc->B, lc->T, in, tg, scratch);
}

mw_status mw_train(mw_model *m, mw_data *train, mw_data *val, mw_run_state *st, mw_step_fn fn,
                   void *user) {
    const mw_config *c = mw_model_config(m);
    MW_TRY(check_vocab(m, train, "training"));
    if (mw_data_count(train) < (uint64_t)c->seq + 1)
        return mw_fail(MW_ERR_ARG, "the training file holds %llu tokens, fewer than --seq+1 = %d",
                       (unsigned long long)mw_data_count(train), c->seq + 1);
    if (val) {
        MW_TRY(check_vocab(m, val, "validation"));
        if (mw_data_count(val) < (uint64_t)c->batch * c->seq + 1)
            return mw_fail(MW_ERR_ARG,
                           "the validation file holds %llu tokens, fewer than one batch of %d windows of %d+1",
                           (unsigned long long)mw_data_count(val), c->batch, c->seq);
        const uint64_t whole = (mw_data_count(val) - 1) / ((uint64_t)c->batch * c->seq);
        if (c->pp > 1 && whole < (uint64_t)c->eval_batches) /* before step 1, not at the first evaluation */
            return mw_fail(MW_ERR_ARG, "the validation split holds %llu whole batches, fewer than --eval-batches %d: under "
                                       "--pp the last batch's per-position losses are the last stage's alone; give "
                                       "--eval-batches %llu", (unsigned long long)whole, c->eval_batches,
                           (unsigned long long)whole);
    }
    loader_ctx lc = {.B = c->batch, .T = c->seq};
    mw_loader_init(&lc.loader, train, c->seed);
    lc.loader.rng = st->loader_rng;
    mw_model_zero_grad(m);
    for (int s = st->step; s < c->steps; s++) {
        mw_step_report r;
        MW_TRY(mw_train_step(m, s, loader_batch, &lc, &r));
        if (val && ((c->eval_every > 0 && (s + 1) % c->eval_every == 0) || s + 1 == c->steps)) {
            MW_TRY(mw_evaluate(m, val, c->eval_batches, &r.val_loss));
            r.has_val = 1;
        }
        st->step = s + 1;
        st->loader_rng = lc.loader.rng;
        if (fn) MW_TRY(fn(&r, st, user));
    }
    return MW_OK;
}
