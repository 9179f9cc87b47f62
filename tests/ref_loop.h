/* The training half that the reference tests share (test_gpt2_ref.c, test_llama_ref.c,
 * test_moe_ref.c): the fixture's steps under every recomputation policy, each against PyTorch and
 * each bit for bit the same as the first ("none"); one AdamW step from torch's own gradients; and
 * mw_train_step against the manual loop on 2 threads and on 1. A test fills a ref_loop with its
 * model maker, batch and tensor check, and calls ref_policies, ref_adamw_from_torch and
 * ref_train_step_threads. Test-only: every failure is a CHECK, which exits non-zero at the end. */
#ifndef MW_TEST_REF_LOOP_H
#define MW_TEST_REF_LOOP_H
#include "check.h"
#include "fixture.h"
#include "memwall.h"

typedef struct ref_loop {
    const char *const *policies; /* policies[0] is the reference; "auto" needs "full" before it */
    int npol;
    const char **policy; /* the test's globals that make() reads: the policy and the budget */
    uint64_t *budget;
    mw_model *(*make)(void);
    void (*batch)(int s, int k, int32_t *in, int32_t *tg);
    /* every tensor's gradients (grad) or parameters against the fixture's records under prefix,
     * within bound; the first policy's values go to keep, later ones must equal them (*same) */
    double (*check)(mw_model *m, const char *prefix, int grad, double bound, float *keep, int first, int *same);
    double step_bound;  /* the loss and the gradient norm, relative to torch's */
    double grad_bound;  /* the step-0 gradients, passed to check */
    double final_bound; /* the parameters after the last step, passed to check */
    const float *ref_loss, *ref_norm, *ref_lr;
    int steps, accum;
    int32_t *in, *tg;
} ref_loop;

static inline size_t ref_numel(mw_model *m) {
    size_t total = 0;
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        total += p.numel;
    }
    return total;
}

/* The policies' runs. "auto" runs at a budget halfway between full's plan and the first's. Returns
 * the first policy's final parameters (malloc'd, the caller frees), the reference of
 * ref_train_step_threads. */
static inline float *ref_policies(const ref_loop *r) {
    const int nl = r->steps * r->accum;
    float *final1 = NULL, *grads1 = NULL, *losses1 = malloc((size_t)(nl > 0 ? nl : 1) * 4);
    uint64_t peak_first = 0, peak_full = 0;
    for (int pi = 0; pi < r->npol; pi++) {
        *r->policy = r->policies[pi];
        *r->budget = 0;
        if (strcmp(*r->policy, "auto") == 0) {
            CHECK(peak_full > 0, "--recompute auto needs full's plan first in the list");
            *r->budget = peak_full + (peak_first - peak_full) / 2;
        }
        mw_model *m = r->make();
        const mw_plan_summary *plan = mw_model_plan(m);
        if (pi == 0) peak_first = plan->peak;
        if (strcmp(*r->policy, "full") == 0) peak_full = plan->peak;
        printf("-- --recompute %s: plan peak %llu bytes (%s)\n", *r->policy, (unsigned long long)plan->peak,
               plan->policy);
        if (!final1) {
            size_t total = ref_numel(m);
            final1 = malloc(total * 4);
            grads1 = malloc(total * 4);
            if (!final1 || !grads1 || !losses1) {
                fprintf(stderr, "FAIL: out of memory\n");
                exit(1);
            }
        }
        int same = 1;
        for (int s = 0; s < r->steps; s++) {
            double loss = 0;
            for (int k = 0; k < r->accum; k++) {
                float l;
                r->batch(s, k, r->in, r->tg);
                CHECK_OK(mw_model_forward_backward(m, r->in, r->tg, 1.0f / r->accum, &l));
                if (pi == 0) losses1[s * r->accum + k] = l;
                else same &= memcmp(&l, &losses1[s * r->accum + k], 4) == 0;
                loss += l;
            }
            loss /= r->accum;
            double norm = mw_model_grad_norm(m);
            CHECK(fabs(loss - r->ref_loss[s]) <= r->step_bound * fabs(r->ref_loss[s]), "step %d loss %.8f vs %.8f",
                  s, loss, r->ref_loss[s]);
            CHECK(fabs(norm - r->ref_norm[s]) <= r->step_bound * r->ref_norm[s], "step %d grad norm %.8f vs %.8f", s,
                  norm, r->ref_norm[s]);
            double lr = mw_lr_at(mw_model_config(m), s);
            CHECK(fabs(lr - r->ref_lr[s]) <= 1e-7 * r->ref_lr[s], "step %d lr %.9g vs %.9g", s, lr, r->ref_lr[s]);
            if (pi == 0)
                printf("step %d loss %.7f (torch %.7f) grad norm %.7f (torch %.7f)\n", s, loss, r->ref_loss[s], norm,
                       r->ref_norm[s]);
            if (s == 0) {
                double worst = r->check(m, "grad", 1, r->grad_bound, grads1, pi == 0, &same);
                if (pi == 0) printf("gradients: worst tensor rel err %.2e of its largest element\n", worst);
            }
            mw_model_adamw_step(m, lr, norm, s + 1);
        }
        double worst = r->check(m, "final", 0, r->final_bound, final1, pi == 0, &same);
        if (pi == 0) printf("params after %d AdamW steps: worst tensor rel err %.2e\n", r->steps, worst);
        else {
            CHECK(same, "--recompute %s is not bitwise identical to %s", *r->policy, r->policies[0]);
            printf("   losses, gradients, final parameters bitwise identical to %s: %s\n", r->policies[0],
                   same ? "yes" : "NO");
        }
        mw_model_destroy(m);
    }
    *r->policy = r->policies[0];
    *r->budget = 0;
    free(grads1);
    free(losses1);
    return final1;
}

/* AdamW alone from exact inputs: torch's initial parameters and step-0 gradients, to 1e-6 of
 * torch's parameters after its first step */
static inline void ref_adamw_from_torch(const ref_loop *r) {
    mw_model *m = r->make();
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        memcpy(p.grad, getf("grad", p.name)->data, p.numel * 4);
    }
    mw_model_adamw_step(m, mw_lr_at(mw_model_config(m), 0), r->ref_norm[0], 1);
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
}

typedef struct ref_fx {
    const ref_loop *r;
    int s, k;
} ref_fx;

static inline mw_status ref_fx_batch(void *ctx, int32_t *in, int32_t *tg, int32_t *scratch) {
    (void)scratch;
    ref_fx *f = ctx;
    f->r->batch(f->s, f->k++, in, tg);
    return MW_OK;
}

/* mw_train_step gives the manual loop's bits (final1, from ref_policies on 2 threads), on 2 threads
 * and on 1. Leaves 2 threads set. */
static inline void ref_train_step_threads(const ref_loop *r, const float *final1) {
    for (int threads = 2; threads >= 1; threads--) {
        mw_set_threads(threads);
        mw_model *m = r->make();
        for (int s = 0; s < r->steps; s++) {
            ref_fx fc = {r, s, 0};
            mw_step_report rep;
            CHECK_OK(mw_train_step(m, s, ref_fx_batch, &fc, &rep));
        }
        int same = 1;
        for (int i = 0, o = 0; i < mw_model_num_tensors(m); i++) {
            mw_param_info p;
            CHECK_OK(mw_model_tensor(m, i, &p));
            same &= memcmp(final1 + o, p.data, p.numel * 4) == 0;
            o += (int)p.numel;
        }
        CHECK(same, "mw_train_step on %d thread(s) differs from the manual loop on 2", threads);
        printf("mw_train_step, %d thread(s): final params bitwise identical to the manual loop on 2 threads: %s\n",
               threads, same ? "yes" : "NO");
        mw_model_destroy(m);
    }
    mw_set_threads(2);
}
#endif
