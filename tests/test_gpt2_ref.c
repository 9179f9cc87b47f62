/* The whole tiny GPT-2 against PyTorch: logits, loss, every gradient, the grad norm, and the
 * parameters after 3 AdamW steps with accumulation, clipping and the cosine schedule. Fixtures
 * from tests/ref/make_gpt2_fixture.py. Also: mw_train_step reproduces the manual loop bit for
 * bit, and the same run on 1 and 2 threads gives the same losses. */
#include "check.h"
#include "fixture.h"
#include "memwall.h"

static int L, H, C, V, CTX, B, T, ACCUM, STEPS;
static const float *hp;
static const int32_t *tokens;

static void fill_config(mw_config *c) {
    mw_config_default(c);
    c->n_layer = L;
    c->n_head = H;
    c->n_embd = C;
    c->vocab = V;
    c->ctx = CTX;
    c->batch = B;
    c->seq = T;
    c->accum = ACCUM;
    c->steps = STEPS;
    c->lr = dbl(hp[0]);
    c->min_lr_frac = 0.1; /* exact double, as the generator used */
    c->warmup = (int)hp[2];
    c->beta1 = 0.9;
    c->beta2 = 0.95;
    c->eps = dbl(hp[5]);
    c->weight_decay = 0.1;
    c->grad_clip = hp[7];
}

static const char *POLICY = "none";
static uint64_t BUDGET = 0;

static mw_model *make_model_cfg(int inference) {
    mw_config c;
    fill_config(&c);
    c.inference = inference;
    if (!inference) {
        char mixed[16 + MW_MAX_BLOCK_POLICIES] = "blocks:"; /* "mixed": f, s, n, f, ... per block */
        for (int l = 0; l < L && l < MW_MAX_BLOCK_POLICIES; l++) mixed[7 + l] = "fsn"[l % 3];
        CHECK_OK(mw_recompute_parse(&c, strcmp(POLICY, "mixed") == 0 ? mixed : POLICY));
        c.budget = BUDGET;
    }
    mw_model *m;
    CHECK_OK(mw_model_create(&m, &c));
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        rec *r = getf("init", p.name);
        CHECK(r->n == p.numel, "%s: fixture has %zu elements, model %zu", p.name, r->n, p.numel);
        memcpy(p.data, r->data, p.numel * 4);
    }
    return m;
}
static mw_model *make_model(void) { return make_model_cfg(0); }

/* Every tensor's gradient (grad) or parameters against the fixture's records under prefix, to
 * 1e-5 relative; the first policy's values are kept in keep, later ones must match them bit for
 * bit (*same). Returns the worst tensor's error. */
static double check_tensors(mw_model *m, const char *prefix, int grad, float *keep, int first, int *same) {
    double worst = 0;
    for (int i = 0, o = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        const float *v = grad ? p.grad : p.data;
        double e = rel_err(v, getf(prefix, p.name)->data, p.numel);
        CHECK(e < 1e-5, "%s %s rel err %.3g", prefix, p.name, e);
        if (e > worst) worst = e;
        if (first) memcpy(keep + o, v, p.numel * 4);
        else *same &= memcmp(keep + o, v, p.numel * 4) == 0;
        o += (int)p.numel;
    }
    return worst;
}

/* micro-batch (s, k) of the fixture's tokens split into inputs and targets */
static void batch(int s, int k, int32_t *in, int32_t *tg) {
    for (int b = 0; b < B; b++) {
        const int32_t *w = tokens + (((size_t)s * ACCUM + k) * B + b) * (T + 1);
        memcpy(in + b * T, w, T * 4);
        memcpy(tg + b * T, w + 1, T * 4);
    }
}

typedef struct fx_ctx {
    int s, k;
} fx_ctx;
static mw_status fx_batch(void *ctx, int32_t *in, int32_t *tg, int32_t *scratch) {
    fx_ctx *f = ctx;
    batch(f->s, f->k++, in, tg);
    return MW_OK;
}

int main(int argc, char **argv) {
    load_fixture(argc > 1 ? argv[1] : "tests/ref/gpt2_tiny.mwfx");
    const int32_t *cfg = get("config")->data;
    L = cfg[0], H = cfg[1], C = cfg[2], V = cfg[3], CTX = cfg[4], B = cfg[5], T = cfg[6];
    ACCUM = cfg[7], STEPS = cfg[8];
    hp = get("hparams")->data;
    tokens = get("tokens")->data;
    const float *ref_loss = get("loss")->data, *ref_norm = get("gradnorm")->data;
    const float *ref_lr = get("lr")->data;
    mw_set_threads(2);

    int32_t *in = malloc(B * T * 4), *tg = malloc(B * T * 4);
    /* logits: an inference model (a training model keeps no logits) */
    mw_model *m = make_model_cfg(1);
    batch(0, 0, in, tg);
    float l0;
    CHECK_OK(mw_model_forward(m, in, NULL, &l0));
    double le = rel_err(mw_model_logits(m), get("logits")->data, (size_t)B * T * V);
    CHECK(le < 1e-5, "logits rel err %.3g", le);
    printf("logits rel err %.4e (%d x %d x %d)\n", le, B, T, V);
    mw_model_destroy(m);

    /* The reference run under every recomputation policy: each against PyTorch, and every policy
     * bit for bit the same as none (losses, step-0 gradients, final parameters). auto runs at a
     * budget halfway between full's plan and none's. */
    static const char *policies[] = {"none", "selective", "full", "every:1", "every:2", "every:sqrt", "mixed", "auto"};
    const int npol = (int)(sizeof policies / sizeof *policies);
    float *final1 = NULL, *grads1 = NULL, losses1[64];
    size_t total = 0;
    uint64_t peak_none = 0, peak_full = 0;
    for (int pi = 0; pi < npol; pi++) {
        POLICY = policies[pi];
        BUDGET = 0;
        if (strcmp(POLICY, "auto") == 0) BUDGET = peak_full + (peak_none - peak_full) / 2;
        m = make_model();
        if (pi == 0) peak_none = mw_model_plan(m)->peak;
        if (strcmp(POLICY, "full") == 0) peak_full = mw_model_plan(m)->peak;
        printf("-- --recompute %s: plan peak %llu bytes (%s)\n", POLICY,
               (unsigned long long)mw_model_plan(m)->peak, mw_model_plan(m)->policy);
        if (pi == 0)
            for (int i = 0; i < mw_model_num_tensors(m); i++) {
                mw_param_info p;
                CHECK_OK(mw_model_tensor(m, i, &p));
                total += p.numel;
            }
        if (!final1) {
            final1 = malloc(total * 4);
            grads1 = malloc(total * 4);
        }
        int same = 1;
        for (int s = 0; s < STEPS; s++) {
            double loss = 0;
            for (int k = 0; k < ACCUM; k++) {
                float l;
                batch(s, k, in, tg);
                CHECK_OK(mw_model_forward_backward(m, in, tg, 1.0f / ACCUM, &l));
                if (pi == 0) losses1[s * ACCUM + k] = l;
                else same &= memcmp(&l, &losses1[s * ACCUM + k], 4) == 0;
                loss += l;
            }
            loss /= ACCUM;
            double norm = mw_model_grad_norm(m);
            CHECK(fabs(loss - ref_loss[s]) <= 1e-5 * fabs(ref_loss[s]), "step %d loss %.8f vs %.8f", s,
                  loss, ref_loss[s]);
            CHECK(fabs(norm - ref_norm[s]) <= 1e-5 * ref_norm[s], "step %d grad norm %.8f vs %.8f", s,
                  norm, ref_norm[s]);
            double lr = mw_lr_at(mw_model_config(m), s);
            CHECK(fabs(lr - ref_lr[s]) <= 1e-7 * ref_lr[s], "step %d lr %.9g vs %.9g", s, lr, ref_lr[s]);
            if (pi == 0)
                printf("step %d loss %.7f (torch %.7f) grad norm %.7f (torch %.7f)\n", s, loss,
                       ref_loss[s], norm, ref_norm[s]);
            if (s == 0) {
                double worst = check_tensors(m, "grad", 1, grads1, pi == 0, &same);
                if (pi == 0) printf("gradients: worst tensor rel err %.2e\n", worst);
            }
            mw_model_adamw_step(m, lr, norm, s + 1);
        }
        double worst = check_tensors(m, "final", 0, final1, pi == 0, &same);
        if (pi == 0) printf("params after %d AdamW steps: worst tensor rel err %.2e\n", STEPS, worst);
        else {
            CHECK(same, "--recompute %s is not bitwise identical to none", POLICY);
            printf("   losses, gradients, final parameters bitwise identical to none: %s\n",
                   same ? "yes" : "NO");
        }
        mw_model_destroy(m);
    }
    POLICY = "none";
    BUDGET = 0;
    free(grads1);

    /* AdamW alone from exact inputs: torch's initial parameters and step-0 gradients */
    m = make_model();
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        memcpy(p.grad, getf("grad", p.name)->data, p.numel * 4);
    }
    mw_model_adamw_step(m, mw_lr_at(mw_model_config(m), 0), ref_norm[0], 1);
    double worst = 0;
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        double e = rel_err(p.data, getf("step1", p.name)->data, p.numel);
        CHECK(e < 1e-6, "AdamW step from torch's gradients: %s rel err %.3g", p.name, e);
        if (e > worst) worst = e;
    }
    printf("one AdamW step from torch's gradients: worst tensor rel err %.2e\n", worst);
    mw_model_destroy(m);

    /* mw_train_step gives the manual loop's bits, on 2 threads and on 1 */
    for (int threads = 2; threads >= 1; threads--) {
        mw_set_threads(threads);
        m = make_model();
        for (int s = 0; s < STEPS; s++) {
            fx_ctx fc = {s, 0};
            mw_step_report r;
            CHECK_OK(mw_train_step(m, s, fx_batch, &fc, &r));
        }
        int same = 1;
        for (int i = 0, o = 0; i < mw_model_num_tensors(m); i++) {
            mw_param_info p;
            CHECK_OK(mw_model_tensor(m, i, &p));
            same &= memcmp(final1 + o, p.data, p.numel * 4) == 0;
            o += (int)p.numel;
        }
        CHECK(same || threads == 1, "mw_train_step differs from the manual loop (threads %d)", threads);
        if (threads == 1) { /* other thread counts may round differently in BLAS; stay close */
            double e = 0;
            for (int i = 0, o = 0; i < mw_model_num_tensors(m); i++) {
                mw_param_info p;
                CHECK_OK(mw_model_tensor(m, i, &p));
                double ei = rel_err(p.data, final1 + o, p.numel);
                e = ei > e ? ei : e;
                o += (int)p.numel;
            }
            CHECK(e == 0.0, "1 thread vs 2 threads: final params differ, rel err %.3g", e);
            printf("1 thread vs 2 threads: final params bitwise identical: %s\n", e == 0.0 ? "yes" : "no");
        }
        mw_model_destroy(m);
    }
    free(final1);
    free(in);
    free(tg);
    for (int i = 0; i < nrec; i++) free(recs[i].data);
    return test_summary("test_gpt2_ref");
}
