/* The whole tiny GPT-2 against PyTorch: logits, loss, every gradient, the grad norm, and the
 * parameters after 3 AdamW steps with accumulation, clipping and the cosine schedule. Fixtures
 * from tests/ref/make_gpt2_fixture.py. Also: mw_train_step reproduces the manual loop bit for
 * bit, and the same run on 1 and 2 threads gives the same losses. */
#include "check.h"
#include "fixture.h"
#include "memwall.h"
#include "ref_loop.h"

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
 * bound relative; the first policy's values are kept in keep, later ones must match them bit for
 * bit (*same). Returns the worst tensor's error. */
static double check_tensors(mw_model *m, const char *prefix, int grad, double bound, float *keep, int first,
                            int *same) {
    double worst = 0;
    for (int i = 0, o = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        const float *v = grad ? p.grad : p.data;
        double e = rel_err(v, getf(prefix, p.name)->data, p.numel);
        CHECK(e < bound, "%s %s rel err %.3g (bound %.0e)", prefix, p.name, e, bound);
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
     * bit for bit the same as none (losses, step-0 gradients, final parameters); then AdamW alone
     * from torch's gradients, and mw_train_step against the manual loop on 2 threads and on 1. */
    static const char *const policies[] = {"none",    "selective",  "full",  "every:1",
                                           "every:2", "every:sqrt", "mixed", "auto"};
    ref_loop r = {policies, (int)(sizeof policies / sizeof *policies), &POLICY, &BUDGET, make_model, batch,
                  check_tensors, 1e-5, 1e-5, 1e-5, ref_loss, ref_norm, ref_lr, STEPS, ACCUM, in, tg};
    float *final1 = ref_policies(&r);
    ref_adamw_from_torch(&r);
    ref_train_step_threads(&r, final1);
    free(final1);
    free(in);
    free(tg);
    for (int i = 0; i < nrec; i++) free(recs[i].data);
    return test_summary("test_gpt2_ref");
}
