/* The deepseek family (mixture of experts, multi-head latent attention) against PyTorch
 * (tests/ref/make_moe_fixture.py: the papers' equations, each token's experts one by one, the
 * capacity's drop rule of docs/moe.md), through the public API, with test_llama_ref.c's checks
 * and tolerances: logits to 1e-6 of their largest element; gradients to 1e-6 in norm and to 2e-6
 * of each tensor's largest element; parameters after 3 AdamW steps (accumulation, clipping, the
 * cosine schedule) to 5e-6. The recomputation policies selective, full, every:2 and a mixed
 * blocks: string (every:1 and every:sqrt are full's at 2 blocks; auto chooses among these: tests/cli_moe.sh, the
 * bits of the policy it chose) give bit for bit the numbers of none; mw_train_step reproduces the manual loop bit for bit on 2
 * threads and on 1. Without arguments it runs the three fixtures: moe_tiny (GQA, a dense first
 * block, 4 experts top-2 with a shared one, softmax renormalised, capacity factor 1 dropping
 * assignments), mla_tiny (latent attention with a q bottleneck, V3's sigmoid router with its
 * bias, scale 2.5) and mla0_tiny (latent attention without it as V2-Lite, top-3 of 4, 2 shared,
 * softmax not renormalised, capacity factor 0.75). */
#include <errno.h>
#include <unistd.h>

#include "check.h"
#include "fixture.h"
#include "memwall.h"
#include "ref_loop.h"

static int L, H, KV, C, FF, V, CTX, B, T, ACCUM, STEPS, TIED;
static const int32_t *ds; /* config[12..23]: E, k, S, moe_ffn, first_dense, gate, norm_topk, qr, kvr, rope, nope, v */
static const float *hp, *llama;
static const int32_t *tokens;

static void fill_config(mw_config *c) {
    mw_config_default(c);
    c->arch = MW_ARCH_DEEPSEEK;
    c->n_layer = L;
    c->n_head = H;
    c->n_kv_head = KV;
    c->n_embd = C;
    c->ffn = FF;
    c->vocab = V;
    c->ctx = CTX;
    c->tied = TIED;
    c->rope_theta = llama[0]; /* 10000 and 500000: exact in float */
    c->norm_eps = dbl(llama[1]);
    c->n_experts = ds[0], c->n_experts_tok = ds[1], c->n_shared = ds[2], c->moe_ffn = ds[3], c->first_dense = ds[4];
    c->moe_gate = ds[5], c->norm_topk = ds[6], c->q_lora_rank = ds[7], c->kv_lora_rank = ds[8];
    c->qk_rope_dim = ds[9], c->qk_nope_dim = ds[10], c->v_head_dim = ds[11];
    c->capacity_factor = dbl(llama[2]), c->routed_scale = dbl(llama[3]);
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

/* A model of the fixture's configuration with torch's initial parameters, set by name. Every
 * fixture parameter must be a model tensor of the same shape, and the other way round. */
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
    int ninit = 0;
    for (int i = 0; i < nrec; i++) ninit += strncmp(recs[i].name, "init/", 5) == 0;
    size_t numel = 0; /* the count (mw_config_num_params) is the table's */
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        numel += p.numel;
    }
    CHECK(numel == mw_config_num_params(&c), "the table holds %zu parameters, mw_config_num_params %zu", numel,
          mw_config_num_params(&c));
    CHECK(mw_model_num_tensors(m) == ninit, "model has %d tensors, the fixture %d",
          mw_model_num_tensors(m), ninit);
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        rec *r = getf("init", p.name);
        int same = r->ndim == p.ndim;
        for (int k = 0; same && k < p.ndim; k++) same = r->dims[k] == p.dims[k];
        CHECK(same && r->n == p.numel, "%s: fixture shape %dx%d (%d-D), model %dx%d (%d-D)", p.name,
              r->dims[0], r->ndim > 1 ? r->dims[1] : 1, r->ndim, p.dims[0], p.ndim > 1 ? p.dims[1] : 1,
              p.ndim);
        if (r->n != p.numel) exit(1);
        CHECK(p.decay == (p.ndim == 2), "%s: decay %d for a %d-D tensor", p.name, p.decay, p.ndim);
        memcpy(p.data, r->data, p.numel * 4);
    }
    return m;
}
static mw_model *make_model(void) { return make_model_cfg(0); }

/* Every tensor's gradient (grad) or parameters against the fixture's records under prefix, to
 * bound relative; the first policy's values are kept in keep, later ones must match them bit for
 * bit (*same). Returns the worst tensor's error. */
/* |a - b| / |b| in the 2-norm */
static double norm_err(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        r += (double)b[i] * b[i];
    }
    return isnan(d) ? INFINITY : sqrt(d) / (sqrt(r) + 1e-30);
}

static double worst_norm_err;

/* Every tensor (parameters, or gradients with grad) against the fixture's: bound relative to its
 * largest element; gradients also to 1e-6 in norm. */
static double check_tensors(mw_model *m, const char *prefix, int grad, double bound, float *keep,
                            int first, int *same) {
    double worst = 0;
    for (int i = 0, o = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        CHECK_OK(mw_model_tensor(m, i, &p));
        const float *v = grad ? p.grad : p.data;
        double e = rel_err(v, getf(prefix, p.name)->data, p.numel);
        CHECK(e <= bound, "%s %s rel err %.3g (bound %.0e)", prefix, p.name, e, bound);
        if (grad) {
            double en = norm_err(v, getf(prefix, p.name)->data, p.numel);
            CHECK(en <= 1e-6, "%s %s norm rel err %.3g (bound 1e-6)", prefix, p.name, en);
            if (en > worst_norm_err) worst_norm_err = en;
        }
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


/* The torch weights through mw_hf_export and back through mw_hf_inspect and mw_hf_load into a
 * model initialised otherwise: the configuration read back is the fixture's, and the logits are
 * m's, bit for bit (so torch's, to 1e-6). moe_tiny (GQA with a shared expert) has no Hugging Face
 * architecture: its export is refused. */
static void check_import(mw_model *m, const int32_t *in) {
    char dir[] = "/tmp/mw_moe_import_XXXXXX", path[64];
    if (!mkdtemp(dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    const mw_config *c = mw_model_config(m);
    if (!c->kv_lora_rank && c->n_shared) {
        CHECK(mw_hf_export(m, dir) == MW_ERR_ARG, "export of a GQA model with shared experts is refused");
        rmdir(dir);
        printf("import: GQA with shared experts has no Hugging Face architecture: export refused\n");
        return;
    }
    CHECK_OK(mw_hf_export(m, dir));
    mw_hf_shape sh;
    CHECK_OK(mw_hf_inspect(dir, &sh));
    const int got[] = {sh.arch, sh.n_layer, sh.n_head, sh.n_embd, sh.vocab, sh.tied, sh.n_experts, sh.n_experts_tok,
                       sh.n_shared, sh.moe_ffn, sh.first_dense, sh.moe_gate, sh.norm_topk, sh.q_lora_rank,
                       sh.kv_lora_rank, sh.qk_rope_dim, sh.qk_nope_dim, sh.v_head_dim},
              want[] = {MW_ARCH_DEEPSEEK, L, H, C, V, TIED, ds[0], ds[1], ds[2], ds[3], ds[0] ? ds[4] : 0, ds[5],
                        ds[6], ds[7], ds[8], ds[9], ds[10], ds[11]};
    for (size_t k = 0; k < sizeof got / sizeof got[0]; k++)
        CHECK(got[k] == want[k], "mw_hf_inspect: field %zu is %d, the fixture's %d", k, got[k], want[k]);
    CHECK(sh.routed_scale == c->routed_scale && sh.rope_theta == c->rope_theta && sh.norm_eps == c->norm_eps,
          "mw_hf_inspect: routed scale %g, theta %g, eps %g; the model's %g, %g, %g", sh.routed_scale, sh.rope_theta,
          sh.norm_eps, c->routed_scale, c->rope_theta, c->norm_eps);
    mw_config c2 = *c;
    mw_model *m2;
    CHECK_OK(mw_model_create(&m2, &c2));
    mw_model_init_gpt2(m2, 7);
    CHECK_OK(mw_hf_load(dir, m2));
    float l;
    CHECK_OK(mw_model_forward(m2, in, NULL, &l));
    const int same = memcmp(mw_model_logits(m2), mw_model_logits(m), (size_t)B * T * V * 4) == 0;
    CHECK(same, "logits after export and import differ from the model's");
    printf("import: exported as %s, read back: configuration the fixture's, logits bit for bit: %s\n",
           sh.moe_gate ? "DeepseekV3ForCausalLM" : sh.kv_lora_rank ? "DeepseekV2ForCausalLM" : "MixtralForCausalLM",
           same ? "yes" : "NO");
    mw_model_destroy(m2);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
}

static void run_fixture(const char *path) {
    load_fixture(path);
    const rec *cr = get("config");
    if (cr->n != 24) {
        fprintf(stderr, "FAIL: %s: config has %zu fields, 24 expected\n", path, cr->n);
        exit(1);
    }
    const int32_t *cfg = cr->data;
    L = cfg[0], H = cfg[1], KV = cfg[2], C = cfg[3], FF = cfg[4], V = cfg[5], CTX = cfg[6];
    B = cfg[7], T = cfg[8], ACCUM = cfg[9], STEPS = cfg[10], TIED = cfg[11];
    hp = get("hparams")->data;
    llama = get("moe")->data;
    ds = cfg + 12;
    tokens = get("tokens")->data;
    const float *ref_loss = get("loss")->data, *ref_norm = get("gradnorm")->data;
    const float *ref_lr = get("lr")->data;
    printf("== %s: L=%d H=%d KV=%d C=%d F=%d V=%d B=%d T=%d; %d experts top-%d, %d shared of %d, %d dense first, gate "
           "%d, norm %d, capacity factor %g (%d assignments dropped in the first micro-batch); latents q %d kv %d rope %d "
           "nope %d v %d\n",
           path, L, H, KV, C, FF, V, B, T, ds[0], ds[1], ds[2], ds[3], ds[4], ds[5], ds[6], (double)llama[2],
           ((const int32_t *)get("dropped")->data)[0], ds[7], ds[8], ds[9], ds[10], ds[11]);
    mw_set_threads(2);

    int32_t *in = malloc((size_t)B * T * 4), *tg = malloc((size_t)B * T * 4);
    /* logits: an inference model (a training model keeps no logits) */
    mw_model *m = make_model_cfg(1);
    batch(0, 0, in, tg);
    float l0;
    CHECK_OK(mw_model_forward(m, in, NULL, &l0));
    double le = rel_err(mw_model_logits(m), get("logits")->data, (size_t)B * T * V);
    CHECK(le <= 1e-6, "logits rel err %.3g (bound 1e-6)", le);
    printf("logits rel err %.4e (%d x %d x %d)\n", le, B, T, V);
    check_import(m, in);
    mw_model_destroy(m);

    /* The reference run under every recomputation policy: each against PyTorch, and every policy
     * bit for bit the same as none (losses, step-0 gradients, final parameters); then AdamW alone
     * from torch's gradients, and mw_train_step against the manual loop on 2 threads and on 1. */
    /* (every:1 and every:sqrt are full's schedule at these fixtures' 2 blocks: not run twice) */
    static const char *const policies[] = {"none", "selective", "full", "every:2", "mixed"};
    ref_loop r = {policies, (int)(sizeof policies / sizeof *policies), &POLICY, &BUDGET, make_model, batch,
                  check_tensors, 1e-6, 2e-6, 5e-6, ref_loss, ref_norm, ref_lr, STEPS, ACCUM, in, tg};
    float *final1 = ref_policies(&r);
    printf("gradients: worst tensor rel err %.2e in norm\n", worst_norm_err);
    ref_adamw_from_torch(&r);
    ref_train_step_threads(&r, final1);
    free(final1);
    free(in);
    free(tg);
    free_fixture();
}

/* --export DIR FIXTURE: the fixture's initial weights through mw_hf_export into DIR (for
 * make_moe_fixture.py --check-export DIR --logits FIXTURE, by hand) */
static int export_fixture(const char *dir, const char *path) {
    load_fixture(path);
    const int32_t *cfg = get("config")->data;
    L = cfg[0], H = cfg[1], KV = cfg[2], C = cfg[3], FF = cfg[4], V = cfg[5], CTX = cfg[6];
    B = cfg[7], T = cfg[8], ACCUM = cfg[9], STEPS = cfg[10], TIED = cfg[11];
    hp = get("hparams")->data;
    llama = get("moe")->data;
    ds = cfg + 12;
    mw_model *m = make_model_cfg(1);
    CHECK_OK(mw_hf_export(m, dir));
    printf("exported %s's initial weights to %s\n", path, dir);
    mw_model_destroy(m);
    free_fixture();
    return test_summary("test_moe_ref --export");
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "--export") == 0) return export_fixture(argv[2], argv[3]);
    if (argc > 1)
        for (int i = 1; i < argc; i++) run_fixture(argv[i]);
    else {
        run_fixture("tests/ref/moe_tiny.mwfx");
        run_fixture("tests/ref/mla_tiny.mwfx");
        run_fixture("tests/ref/mla0_tiny.mwfx");
    }
    return test_summary("test_moe_ref");
}
