/* Hugging Face Llama checkpoints: a sharded fixture (2 shards, F32/BF16/F16 mixed) reads to the
 * float32 values torch converted, bit for bit, and gives PyTorch's logits; every BF16 and F16
 * value converts exactly; the index reader and the Llama config.json reader refuse what they must,
 * in one line naming the key, the shard or the tensor; export is the canonical file byte for byte
 * and export -> import gives identical logits; loading is streamed (the peak RSS does not grow by
 * a file or a model). Fixtures from tests/ref/make_hf_llama_fixture.py. */
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/model/hf.h"
#include "../src/model/safetensors.h"
#include "check.h"
#include "memwall.h"

#define FIX "tests/ref/hf_llama"
#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n) {
        fprintf(stderr, "FAIL: cannot write %s\n", path);
        exit(1);
    }
    fclose(f);
}

static void write_text(const char *path, const char *text) { write_bytes(path, text, strlen(text)); }

/* a text file, NUL-terminated */
static char *slurp_text(const char *path) {
    size_t n;
    char *t = (char *)slurp(path, &n);
    t[n] = 0;
    return t;
}

static void copy_file(const char *from, const char *to) {
    size_t n;
    unsigned char *b = slurp(from, &n);
    write_bytes(to, b, n);
    free(b);
}

/* a safetensors file of one header and data */
static void write_st(const char *path, const char *header, const void *data, size_t dn) {
    size_t hl = strlen(header);
    unsigned char *b = malloc(8 + hl + dn);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> 8 * i);
    memcpy(b + 8, header, hl);
    if (dn) memcpy(b + 8 + hl, data, dn);
    write_bytes(path, b, 8 + hl + dn);
    free(b);
}

/* d/: a copy of the fixture, with config.json replaced by cfg when it is not NULL */
static void fixture_copy(const char *d, const char *cfg) {
    char a[700], b[700];
    mkdir(d, 0777);
    static const char *const files[] = {"config.json", "model.safetensors.index.json", SHARD1, SHARD2};
    for (int i = 0; i < 4; i++) {
        snprintf(a, sizeof a, FIX "/%s", files[i]);
        snprintf(b, sizeof b, "%s/%s", d, files[i]);
        copy_file(a, b);
    }
    if (cfg) {
        snprintf(b, sizeof b, "%s/config.json", d);
        write_text(b, cfg);
    }
}

/* t (freed) with the text `from` replaced by `to` */
static char *replace(char *t, const char *from, const char *to) {
    char *at = strstr(t, from);
    if (!at) {
        fprintf(stderr, "FAIL: the fixture's config.json has no %s\n", from);
        exit(1);
    }
    char *out = malloc(strlen(t) + strlen(to) + 1);
    sprintf(out, "%.*s%s%s", (int)(at - t), t, to, at + strlen(from));
    free(t);
    return out;
}

/* the fixture's config.json with the text `from` replaced by `to` */
static char *config_with(const char *from, const char *to) { return replace(slurp_text(FIX "/config.json"), from, to); }

static void test_inspect(void) {
    mw_hf_shape sh;
    const char *paths[] = {FIX, FIX "/model.safetensors.index.json"};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(mw_hf_inspect(paths[i], &sh));
        CHECK(sh.arch == MW_ARCH_LLAMA && sh.config == 1 && sh.n_layer == 2 && sh.n_head == 4 && sh.n_kv_head == 2 &&
                  sh.n_embd == 48 && sh.ffn == 128 && sh.vocab == 97 && sh.ctx == 32 && sh.tied == 0 &&
                  sh.rope_theta == 50000.0 && sh.norm_eps == 1e-6,
              "inspect %s: arch %d L%d H%d KV%d C%d F%d V%d ctx%d tied %d theta %g eps %g", paths[i], sh.arch,
              sh.n_layer, sh.n_head, sh.n_kv_head, sh.n_embd, sh.ffn, sh.vocab, sh.ctx, sh.tied, sh.rope_theta,
              sh.norm_eps);
    }
    /* GPT-2 keeps its answer */
    CHECK_OK(mw_hf_inspect("tests/ref/hf_tiny", &sh));
    CHECK(sh.arch == MW_ARCH_GPT2 && sh.tied == 1 && sh.n_kv_head == 0 && sh.ffn == 0 && sh.n_layer == 2 &&
              sh.n_head == 4,
          "GPT-2 inspect: arch %d tied %d", sh.arch, sh.tied);
    printf("inspect: the sharded fixture (directory or index.json) is L2 H4 KV2 C48 F128 V97 ctx32, theta 5e4, "
           "eps 1e-6, untied; GPT-2 as before\n");
}

/* the shards' F32/BF16/F16 tensors read to exactly the float32 values torch's .float() gave */
static void test_sharded_values(void) {
    mw_hf_files h;
    mw_st_file canon;
    CHECK_OK(mw_hf_files_open(&h, FIX));
    CHECK_OK(mw_st_open(&canon, "tests/ref/hf_llama_canonical.safetensors"));
    CHECK(h.sharded == 1 && h.n == 2, "the fixture opens as 2 shards (%d, %d)", h.sharded, h.n);
    int by_type[4] = {0}, shard_of[2] = {0}, differ = 0;
    for (int i = 0; i < canon.n; i++) {
        const mw_st_tensor *c = &canon.t[i];
        const mw_st_file *f;
        const mw_st_tensor *t = mw_hf_files_find(&h, c->name, &f);
        CHECK(t != NULL, "sharded: no %s", c->name);
        if (!t) continue;
        size_t n = (c->end - c->begin) / 4;
        float *a = malloc(n * 4), *b = malloc(n * 4);
        CHECK_OK(mw_st_read_f32(&canon, c, a, 0));
        CHECK_OK(mw_st_read_f32(f, t, b, 0));
        if (memcmp(a, b, n * 4) != 0) differ++, fprintf(stderr, "  %s (%d) differs from torch's float32\n", c->name, t->dtype);
        by_type[t->dtype < 4 ? t->dtype : 3]++;
        shard_of[f == &h.f[1]]++;
        free(a), free(b);
    }
    CHECK(differ == 0 && canon.n == 21, "%d of %d tensors differ from torch's conversion", differ, canon.n);
    CHECK(by_type[MW_ST_F32] > 0 && by_type[MW_ST_BF16] > 0 && by_type[MW_ST_F16] > 0 && shard_of[0] && shard_of[1],
          "the fixture mixes F32 %d, BF16 %d, F16 %d over both shards (%d, %d)", by_type[MW_ST_F32],
          by_type[MW_ST_BF16], by_type[MW_ST_F16], shard_of[0], shard_of[1]);
    CHECK(mw_hf_files_find(&h, "model.layers.2.input_layernorm.weight", NULL) == NULL, "a name not in weight_map");
    printf("sharded read: %d tensors (F32 %d, BF16 %d, F16 %d, in 2 shards) == torch's float32, bit for bit\n",
           canon.n, by_type[MW_ST_F32], by_type[MW_ST_BF16], by_type[MW_ST_F16]);
    mw_st_close(&canon);
    mw_hf_files_close(&h);
}

/* every one of the 65536 BF16 and F16 values against its definition (ldexp, exact in float) */
static void test_dtype_sweep(const char *dir) {
    char p[600];
    snprintf(p, sizeof p, "%s/sweep.safetensors", dir);
    uint16_t *v = malloc(65536 * 2 * 2);
    for (int i = 0; i < 65536; i++) v[i] = v[65536 + i] = (uint16_t)i;
    write_st(p,
             "{\"h\":{\"dtype\":\"F16\",\"shape\":[256,256],\"data_offsets\":[0,131072]},"
             "\"b\":{\"dtype\":\"BF16\",\"shape\":[65536],\"data_offsets\":[131072,262144]}}",
             v, 65536 * 4);
    free(v);
    mw_st_file f;
    CHECK_OK(mw_st_open(&f, p));
    float *x = malloc(65536 * 4);
    int bad16 = 0, badb = 0, sub = 0, nan = 0;
    CHECK_OK(mw_st_read_f32(&f, mw_st_find(&f, "h"), x, 0));
    for (int i = 0; i < 65536; i++) {
        int s = i >> 15, e = i >> 10 & 31, m = i & 1023;
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        if (e == 31 && m) { /* NaN: quiet or not, its sign and payload kept */
            nan++;
            bad16 += !(isnan(x[i]) && (int)(bits >> 31) == s && (int)(bits >> 13 & 1023) == m && (bits & 8191) == 0);
            continue;
        }
        double want = e == 31 ? INFINITY : e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
        sub += e == 0 && m;
        if (s) want = -want;
        bad16 += !(x[i] == (float)want && !!signbit(x[i]) == !!s);
    }
    CHECK_OK(mw_st_read_f32(&f, mw_st_find(&f, "b"), x, 0));
    for (int i = 0; i < 65536; i++) {
        int s = i >> 15, e = i >> 7 & 255, m = i & 127;
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        if (e == 255 && m) {
            badb += !(isnan(x[i]) && bits == (uint32_t)i << 16);
            continue;
        }
        double want = e == 255 ? INFINITY : e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
        if (s) want = -want;
        badb += !(x[i] == (float)want && !!signbit(x[i]) == !!s);
    }
    free(x);
    mw_st_close(&f);
    CHECK(bad16 == 0 && badb == 0 && sub == 2046 && nan == 2046, "F16: %d wrong, BF16: %d wrong (%d subnormals)", bad16,
          badb, sub);
    printf("F16 and BF16: all 65536 values each (2046 subnormals, +-0, +-inf, 2046 NaNs with payload) exact\n");
}

static void test_index_parse(void) {
    mw_hf_index ix;
    const char *ok = "{\"metadata\": {\"total_size\": 8}, \"weight_map\": {\"b\": \"s2.safetensors\", "
                     "\"a\": \"s1.safetensors\", \"c\": \"s2.safetensors\"}}";
    CHECK_OK(mw_hf_index_parse(ok, strlen(ok), "ix", &ix));
    CHECK(ix.n == 3 && ix.nshards == 2 && strcmp(ix.name[0], "a") == 0 && strcmp(ix.name[2], "c") == 0 &&
              strcmp(ix.shards[ix.shard[0]], "s1.safetensors") == 0 &&
              strcmp(ix.shards[ix.shard[1]], "s2.safetensors") == 0 && ix.shard[1] == ix.shard[2],
          "index: n %d shards %d", ix.n, ix.nshards);
    mw_hf_index_free(&ix);
    struct {
        const char *text, *msg;
    } bad[] = {
        {"[1]", "not a JSON object"},
        {"{\"metadata\": {}}", "no weight_map object"},
        {"{\"weight_map\": [\"a\"]}", "no weight_map object"},
        {"{\"weight_map\": {}}", "weight_map is empty"},
        {"{\"weight_map\": {\"a\": 1}}", "entry for 'a' is not a shard file name"},
        {"{\"weight_map\": {\"a\": \"\"}}", "entry for 'a' is not a shard file name"},
        {"{\"weight_map\": {\"a\": \"../x.safetensors\"}}", "entry for 'a' is not a shard file name"},
        {"{\"weight_map\": {\"a\": \"/etc/passwd\"}}", "entry for 'a' is not a shard file name"},
        {"{\"weight_map\": {\"a\": \"..\"}}", "entry for 'a' is not a shard file name"},
        {"{\"weight_map\": {\"a\": \"s.safetensors\", \"a\": \"s.safetensors\"}}", "tensor 'a' appears twice"},
        {"{\"weight_map\": {\"a\": \"s.safetensors\",}}", "at byte"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mw_status s = mw_hf_index_parse(bad[i].text, strlen(bad[i].text), "ix", &ix);
        CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), bad[i].msg) && !strchr(mw_last_error(), '\n'),
              "index %s: %s (%s)", bad[i].text, mw_status_str(s), mw_last_error());
    }
    /* more shards than memwall opens at once */
    size_t cap = 40 * (MW_HF_MAX_SHARDS + 2);
    char *t = malloc(cap);
    size_t u = (size_t)snprintf(t, cap, "{\"weight_map\": {");
    for (int i = 0; i <= MW_HF_MAX_SHARDS; i++) u += (size_t)snprintf(t + u, cap - u, "%s\"t%d\": \"s%d\"", i ? "," : "", i, i);
    snprintf(t + u, cap - u, "}}");
    CHECK(mw_hf_index_parse(t, strlen(t), "ix", &ix) == MW_ERR_FORMAT && strstr(mw_last_error(), "1001 shards"),
          "1001 shards: %s", mw_last_error());
    free(t);
    printf("index.json: weight_map read and sorted; %zu malformed cases and 1001 shards refused\n",
           sizeof bad / sizeof bad[0] + 1);
}

/* shards: one missing; a weight_map entry its shard lacks; both forms of a directory */
static void test_shards(const char *dir) {
    char d[600], p[700], q[700];
    mw_hf_shape sh;
    snprintf(d, sizeof d, "%s/noshard", dir);
    fixture_copy(d, NULL);
    snprintf(p, sizeof p, "%s/" SHARD2, d);
    unlink(p);
    mw_status s = mw_hf_inspect(d, &sh);
    CHECK(s == MW_ERR_IO && strstr(mw_last_error(), "model.safetensors.index.json names shard " SHARD2 ": cannot open") &&
              strstr(mw_last_error(), "No such file"),
          "a missing shard: %s (%s)", mw_status_str(s), mw_last_error());
    /* a weight_map entry pointing at the shard without that tensor */
    snprintf(d, sizeof d, "%s/wrongshard", dir);
    fixture_copy(d, NULL);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    char *t = slurp_text(p), *at = strstr(t, "\"model.norm.weight\": \"" SHARD2);
    CHECK(at != NULL, "the fixture's index has model.norm.weight in shard 2");
    if (at) memcpy(at + strlen("\"model.norm.weight\": \"model-0000"), "1", 1);
    write_text(p, t);
    free(t);
    s = mw_hf_inspect(d, &sh);
    CHECK(s == MW_ERR_FORMAT &&
              strstr(mw_last_error(), "weight_map puts model.norm.weight in " SHARD1 ", which has no such tensor"),
          "weight_map naming a tensor its shard lacks: %s", mw_last_error());
    /* a tensor that weight_map leaves out is not found, though its shard has it */
    snprintf(d, sizeof d, "%s/nohead", dir);
    fixture_copy(d, NULL);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    t = slurp_text(p);
    at = strstr(t, "\"lm_head.weight\": \"" SHARD2 "\",");
    CHECK(at != NULL, "the fixture's index starts with lm_head.weight");
    if (at) memset(at, ' ', strlen("\"lm_head.weight\": \"" SHARD2 "\","));
    write_text(p, t);
    free(t);
    s = mw_hf_inspect(d, &sh);
    CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), "tensor lm_head.weight is missing (config.json: tie_word_embeddings is false)"),
          "lm_head out of weight_map, untied: %s", mw_last_error());
    /* tied: the head is not needed (and a stray lm_head.weight would be ignored) */
    snprintf(q, sizeof q, "%s/config.json", d);
    t = config_with("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
    write_text(q, t);
    free(t);
    CHECK_OK(mw_hf_inspect(d, &sh));
    CHECK(sh.tied == 1, "tie_word_embeddings true: tied %d", sh.tied);
    /* model.safetensors wins over the index beside it, as in transformers */
    snprintf(d, sizeof d, "%s/both", dir);
    fixture_copy(d, NULL);
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    copy_file("tests/ref/hf_llama_canonical.safetensors", p);
    mw_hf_files h;
    CHECK_OK(mw_hf_files_open(&h, d));
    CHECK(h.sharded == 0 && h.n == 1 && strstr(h.what, "/model.safetensors"), "model.safetensors first: %s", h.what);
    mw_hf_files_close(&h);
    CHECK_OK(mw_hf_inspect(d, &sh));
    CHECK(sh.n_layer == 2 && sh.ffn == 128, "single-file Llama inspect");
    /* neither */
    snprintf(d, sizeof d, "%s/empty", dir);
    mkdir(d, 0777);
    CHECK(mw_hf_inspect(d, &sh) == MW_ERR_IO && strstr(mw_last_error(), "model.safetensors"), "an empty directory: %s",
          mw_last_error());
    printf("shards: a missing shard, a weight_map entry its shard lacks, lm_head outside weight_map refused; "
           "tied needs no head; model.safetensors before the index\n");
}

/* config.json against the tensors, and what memwall's Llama does not compute */
static void test_config(const char *dir) {
    char d[600], p[700];
    snprintf(d, sizeof d, "%s/cfg", dir);
    fixture_copy(d, NULL);
    snprintf(p, sizeof p, "%s/config.json", d);
    struct {
        const char *from, *to, *msg;
    } bad[] = {
        {"\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", "num_hidden_layers is 3, but"},
        {"\"hidden_size\": 48", "\"hidden_size\": 64",
         "hidden_size is 64, but model.embed_tokens.weight in"},
        {"\"vocab_size\": 97", "\"vocab_size\": 100", "vocab_size is 100, but model.embed_tokens.weight"},
        {"\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4",
         "tensor model.layers.0.self_attn.k_proj.weight has shape [24, 48], but config.json implies [48, 48]"},
        {"\"intermediate_size\": 128", "\"intermediate_size\": 64",
         "tensor model.layers.0.mlp.gate_proj.weight has shape [128, 48], but config.json implies [64, 48]"},
        {"\"num_attention_heads\": 4", "\"num_attention_heads\": 8",
         "tensor model.layers.0.self_attn.k_proj.weight has shape [24, 48], but config.json implies [12, 48]"},
        {"\"num_attention_heads\": 4", "\"num_attention_heads\": 5", "multiple of num_key_value_heads 2"},
        {"\"num_attention_heads\": 4,", "", "no num_attention_heads"},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"llama3\"}",
         "rope_scaling is not null (\"llama3\"): memwall's RoPE has no scaling"},
        {"\"rope_scaling\": null", "\"rope_scaling\": {\"factor\": 2.0, \"type\": \"linear\"}",
         "rope_scaling is not null (\"linear\")"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"gelu\"", "hidden_act is \"gelu\": memwall's Llama MLP is SwiGLU"},
        {"\"attention_bias\": false", "\"attention_bias\": true", "attention_bias is true: memwall's Llama has no biases"},
        {"\"mlp_bias\": false", "\"mlp_bias\": true", "mlp_bias is true"},
        {"\"mlp_bias\": false", "\"mlp_bias\": 0", "mlp_bias is not true or false"},
        {"\"hidden_size\": 48", "\"hidden_size\": 48, \"head_dim\": 16", "head_dim is 16, not hidden_size / num_attention_heads = 48 / 4"},
        {"\"rope_theta\": 50000.0", "\"rope_theta\": -1", "rope_theta is not a positive number"},
        {"\"rms_norm_eps\": 1e-06", "\"rms_norm_eps\": \"1e-6\"", "rms_norm_eps is not a positive number"},
        {"\"model_type\": \"llama\"", "\"model_type\": \"qwen2\"", "\"qwen2\" is not supported: Qwen's attention has q/k/v biases"},
        {"\"model_type\": \"llama\"", "\"model_type\": \"gemma\"", "model_type is \"gemma\", not \"gpt2\", \"llama\", \"mistral\", \"deepseek_v2\", \"deepseek_v3\" or \"mixtral\""},
        {"\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"", "model_type is \"gpt2\", but the weights in"},
        {"\"model_type\": \"llama\",", "", "model_type is absent, but the weights in"},
        {"\"rope_scaling\": null", "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
         "rope_parameters is not null (\"yarn\"): memwall's RoPE has no scaling"},
        {"\"rope_theta\": 50000.0", "\"rope_theta\": 50000.0, \"rope_parameters\": {\"rope_type\": \"default\", "
         "\"rope_theta\": 10000.0}", "rope_parameters.rope_theta is 10000, but rope_theta is 50000"},
        {"\"hidden_act\": \"silu\"", "\"hidden_act\": \"relu\"", "hidden_act is \"relu\": memwall's Llama MLP is SwiGLU"},
    };
    size_t nbad = sizeof bad / sizeof bad[0];
    mw_hf_shape sh;
    for (size_t i = 0; i < nbad; i++) {
        char *t = config_with(bad[i].from, bad[i].to);
        write_text(p, t);
        free(t);
        mw_status s = mw_hf_inspect(d, &sh);
        CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), bad[i].msg) && !strchr(mw_last_error(), '\n'),
              "config.json with %s: %s (%s)", bad[i].to, mw_status_str(s), mw_last_error());
    }
    /* MistralConfig's default window of 4096, returned for the caller to hold the context to */
    char *t = replace(config_with("\"model_type\": \"llama\"", "\"model_type\": \"mistral\""),
                      "\"max_position_embeddings\": 32,", "\"max_position_embeddings\": 32768,");
    write_text(p, t);
    free(t);
    CHECK(mw_hf_inspect(d, &sh) == MW_OK && sh.sliding_window == 4096 && sh.ctx == 32768,
          "mistral's default window: %d (%s)", sh.sliding_window, mw_last_error());
    /* rope_scaling and rope_parameters of rope_type "default" are the plain RoPE (theta from the
     * latter); hidden_act "swish" is SiLU */
    t = replace(config_with("\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"default\"}, "
                                                      "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 50000.0}"),
                "\"hidden_act\": \"silu\"", "\"hidden_act\": \"swish\"");
    t = replace(t, "\"rope_theta\": 50000.0,", "");
    write_text(p, t);
    free(t);
    CHECK(mw_hf_inspect(d, &sh) == MW_OK && sh.rope_theta == 50000.0,
          "rope_type default, rope_parameters' theta, swish: %g (%s)", sh.rope_theta, mw_last_error());
    /* Mistral without a sliding window is Llama's math */
    t = config_with("\"model_type\": \"llama\"", "\"model_type\": \"mistral\", \"sliding_window\": null");
    write_text(p, t);
    free(t);
    CHECK_OK(mw_hf_inspect(d, &sh));
    CHECK(sh.arch == MW_ARCH_LLAMA && sh.n_kv_head == 2 && sh.ctx == 32, "mistral: arch %d", sh.arch);
    /* transformers' defaults for what config.json leaves out */
    write_text(p, "{\"model_type\": \"llama\", \"num_attention_heads\": 4, \"num_key_value_heads\": 2}");
    mw_hf_config c;
    CHECK_OK(mw_hf_inspect(d, &sh));
    CHECK(sh.n_kv_head == 2 && sh.ctx == 2048 && sh.rope_theta == 10000.0 && sh.norm_eps == 1e-6 && sh.tied == 0 &&
              sh.ffn == 128 && sh.n_layer == 2,
          "LlamaConfig defaults: KV%d ctx%d theta %g eps %g tied %d F%d", sh.n_kv_head, sh.ctx, sh.rope_theta,
          sh.norm_eps, sh.tied, sh.ffn);
    const char *lj = "{\"model_type\": \"llama\", \"num_attention_heads\": 6}";
    CHECK_OK(mw_hf_config_parse(lj, strlen(lj), "l", &c));
    CHECK(c.n_kv_head == 6 && c.n_layer == 0 && c.ffn == 0, "LlamaConfig: key/value heads default to heads (%d)",
          c.n_kv_head);
    const char *mj = "{\"model_type\": \"mistral\", \"num_attention_heads\": 32, \"sliding_window\": null}";
    CHECK_OK(mw_hf_config_parse(mj, strlen(mj), "m", &c));
    CHECK(c.n_kv_head == 8 && c.ctx == 131072 && c.arch == MW_ARCH_LLAMA, "MistralConfig defaults: KV%d ctx%d",
          c.n_kv_head, c.ctx);
    /* none: the head count and RoPE cannot be guessed */
    unlink(p);
    CHECK(mw_hf_inspect(d, &sh) == MW_ERR_FORMAT && strstr(mw_last_error(), "Llama and deepseek-family weights need their config.json"),
          "no config.json: %s", mw_last_error());
    /* biases in the weights */
    char sd[600], q[700];
    snprintf(sd, sizeof sd, "%s/bias", dir);
    mkdir(sd, 0777);
    snprintf(q, sizeof q, "%s/model.safetensors", sd);
    float z[8] = {0};
    write_st(q,
             "{\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[0,16]},"
             "\"model.layers.0.self_attn.q_proj.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[16,24]}}",
             z, 24);
    snprintf(q, sizeof q, "%s/config.json", sd);
    write_text(q, "{\"model_type\": \"llama\", \"num_attention_heads\": 1}");
    CHECK(mw_hf_inspect(sd, &sh) == MW_ERR_FORMAT &&
              strstr(mw_last_error(), "tensor model.layers.0.self_attn.q_proj.bias: memwall's Llama has no biases"),
          "a bias tensor: %s", mw_last_error());
    printf("config.json: %zu mismatches and unsupported options refused in one line; Mistral without a window "
           "and transformers' defaults accepted; none, or biases, refused\n",
           nbad);
}


/* reads record `name` of a .mwfx fixture */
static void *mwfx(const char *path, const char *name, size_t *count) {
    size_t n;
    unsigned char *b = slurp(path, &n), *p = b + 12;
    uint32_t recs;
    memcpy(&recs, b + 8, 4);
    for (uint32_t r = 0; r < recs; r++) {
        uint32_t nl, dt, nd, d;
        memcpy(&nl, p, 4);
        int match = strlen(name) == nl && memcmp(p + 4, name, nl) == 0;
        p += 4 + nl;
        memcpy(&dt, p, 4);
        memcpy(&nd, p + 4, 4);
        p += 8;
        size_t cnt = 1;
        for (uint32_t k = 0; k < nd; k++, p += 4) memcpy(&d, p, 4), cnt *= d;
        if (match) {
            void *out = malloc(cnt * 4);
            memcpy(out, p, cnt * 4);
            *count = cnt;
            free(b);
            return out;
        }
        p += cnt * 4;
    }
    fprintf(stderr, "FAIL: no record %s\n", name);
    exit(1);
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    unsigned char *x = slurp(a, &na), *y = slurp(b, &nb);
    int eq = na == nb && memcmp(x, y, na) == 0;
    free(x), free(y);
    return eq;
}

/* the fixture's configuration */
static mw_config fixture_config(int inference) {
    mw_config c;
    mw_config_default(&c);
    c.arch = MW_ARCH_LLAMA;
    c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 48, c.ffn = 128, c.vocab = 97, c.ctx = 32;
    c.tied = 0, c.rope_theta = 50000.0, c.norm_eps = 1e-6;
    c.batch = 2, c.seq = 9, c.inference = inference;
    return c;
}

/* logits of PATH's weights under configuration c (an inference model) into out (a copy) */
static mw_status logits_of(const char *path, mw_config c, const int32_t *tok, float *out, size_t n) {
    mw_model *m;
    float loss;
    c.inference = 1;
    mw_status s = mw_model_create(&m, &c);
    if (s != MW_OK) return s;
    s = mw_hf_load(path, m);
    if (s == MW_OK) s = mw_model_forward(m, tok, NULL, &loss);
    if (s == MW_OK) memcpy(out, mw_model_logits(m), n * 4);
    mw_model_destroy(m);
    return s;
}

/* a Mistral window: attention within it is exact, so a model whose context is at most the window
 * loads, and one beyond it is refused naming sliding_window */
static void test_window(const char *dir) {
    char d[600];
    snprintf(d, sizeof d, "%s/window", dir);
    char *t = config_with("\"model_type\": \"llama\"", "\"model_type\": \"mistral\", \"sliding_window\": 16");
    fixture_copy(d, t);
    free(t);
    mw_hf_shape sh;
    CHECK(mw_hf_inspect(d, &sh) == MW_OK && sh.sliding_window == 16 && sh.ctx == 32, "window 16: %d (%s)",
          sh.sliding_window, mw_last_error());
    for (int ctx = 32; ctx >= 16; ctx -= 16) {
        mw_config c = fixture_config(1);
        c.ctx = ctx;
        mw_model *m;
        CHECK_OK(mw_model_create(&m, &c));
        mw_status s = mw_hf_load(d, m);
        if (ctx > 16)
            CHECK(s == MW_ERR_FORMAT && strstr(mw_last_error(), "sliding_window is 16, the model's context 32"),
                  "a context beyond the window: %s", mw_last_error());
        else
            CHECK(s == MW_OK, "a context within the window: %s", mw_last_error());
        mw_model_destroy(m);
    }
    printf("window: a Mistral sliding_window of 16 loads at context 16, is refused at 32\n");
}

/* the Llama model: the sharded fixture gives PyTorch's logits; export (from the model and from a
 * checkpoint) is the canonical file byte for byte with LlamaConfig's config.json; export -> import
 * gives identical logits, tied and untied; a model of another configuration is refused */
static void test_model(const char *dir) {
    size_t nt, nl;
    int32_t *tok = mwfx("tests/ref/hf_llama_logits.mwfx", "tokens", &nt);
    float *ref = mwfx("tests/ref/hf_llama_logits.mwfx", "logits", &nl);
    float *a = malloc(nl * 4), *b = malloc(nl * 4);
    mw_config c = fixture_config(0);
    CHECK(nt == 18 && nl == 18 * 97, "fixture sizes %zu %zu", nt, nl);
    CHECK_OK(logits_of(FIX, c, tok, a, nl));
    double e = rel_err(a, ref, nl);
    CHECK(e < 1e-5, "sharded BF16/F16 import: logits vs PyTorch rel err %.3g", e);
    printf("import of the sharded fixture: logits vs PyTorch (modeling_llama's equations) rel err %.2e\n", e);

    /* export from a (training) model and from its checkpoint: the canonical file */
    mw_model *m;
    CHECK_OK(mw_model_create(&m, &c));
    CHECK_OK(mw_hf_load(FIX, m));
    char out[700], p[800], ck[4096];
    snprintf(out, sizeof out, "%s/exp/", dir);
    CHECK_OK(mw_hf_export(m, out));
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    CHECK(files_equal(p, "tests/ref/hf_llama_canonical.safetensors"),
          "the export differs from the canonical file torch's side wrote");
    snprintf(p, sizeof p, "%s/config.json", out);
    char *text = slurp_text(p);
    mw_hf_config hc;
    CHECK_OK(mw_hf_config_parse(text, strlen(text), p, &hc));
    CHECK(hc.arch == MW_ARCH_LLAMA && hc.n_layer == 2 && hc.n_head == 4 && hc.n_kv_head == 2 && hc.n_embd == 48 &&
              hc.ffn == 128 && hc.vocab == 97 && hc.ctx == 32 && hc.tied == 0 && hc.rope_theta == 50000.0 &&
              hc.norm_eps == 1e-6 && hc.head_dim == 12,
          "exported config.json reads back: L%d H%d KV%d C%d F%d V%d ctx%d", hc.n_layer, hc.n_head, hc.n_kv_head,
          hc.n_embd, hc.ffn, hc.vocab, hc.ctx);
    CHECK(strstr(text, "\"architectures\": [\n    \"LlamaForCausalLM\"\n  ]") &&
              strstr(text, "\"model_type\": \"llama\"") && strstr(text, "\"torch_dtype\": \"float32\"") &&
              strstr(text, "\"rope_theta\": 50000.0") && strstr(text, "\"rms_norm_eps\": 1e-06") &&
              strstr(text, "\"tie_word_embeddings\": false") && strstr(text, "\"hidden_act\": \"silu\"") &&
              strstr(text, "\"rope_scaling\": null") && strstr(text, "\"attention_bias\": false"),
          "config.json as LlamaConfig writes it:\n%s", text);
    free(text);
    mw_run_state st = {0, 1};
    CHECK_OK(mw_ckpt_save(dir, m, &st, 1, ck, sizeof ck));
    snprintf(p, sizeof p, "%s/exp_ckpt/", dir);
    CHECK_OK(mw_hf_export_ckpt(ck, p));
    snprintf(p, sizeof p, "%s/exp_ckpt/model.safetensors", dir);
    CHECK(files_equal(p, "tests/ref/hf_llama_canonical.safetensors"), "export from a checkpoint differs");
    snprintf(p, sizeof p, "%s/exp_ckpt/config.json", dir);
    char q[800];
    snprintf(q, sizeof q, "%s/config.json", out);
    CHECK(files_equal(p, q), "config.json from a checkpoint differs from the model's");
    /* export -> import: the same logits, bit for bit */
    CHECK_OK(logits_of(out, c, tok, b, nl));
    CHECK(memcmp(a, b, nl * 4) == 0, "export -> import changes the logits (rel err %.3g)", rel_err(a, b, nl));
    printf("export (model and checkpoint) == the canonical file byte for byte, LlamaConfig's config.json; "
           "export -> import: identical logits\n");

    /* tied: no lm_head.weight, tie_word_embeddings true, and back */
    mw_config ct = c;
    ct.tied = 1;
    mw_model *mt;
    CHECK_OK(mw_model_create(&mt, &ct));
    mw_model_init(mt, 5);
    snprintf(out, sizeof out, "%s/tied/", dir);
    CHECK_OK(mw_hf_export(mt, out));
    snprintf(p, sizeof p, "%s/model.safetensors", out);
    mw_st_file f;
    CHECK_OK(mw_st_open(&f, p));
    CHECK(f.n == 2 + 9 * 2 && !mw_st_find(&f, "lm_head.weight"), "tied export: %d tensors, lm_head %s", f.n,
          mw_st_find(&f, "lm_head.weight") ? "present" : "absent");
    mw_st_close(&f);
    snprintf(p, sizeof p, "%s/config.json", out);
    text = slurp_text(p);
    CHECK(strstr(text, "\"tie_word_embeddings\": true") != NULL, "tied config.json");
    free(text);
    mw_hf_shape sh;
    CHECK_OK(mw_hf_inspect(out, &sh));
    CHECK(sh.tied == 1 && sh.n_kv_head == 2, "tied export inspects as tied");
    ct.inference = 1;
    mw_model *mi;
    CHECK_OK(mw_model_create(&mi, &ct));
    mw_model_init(mi, 5);
    float loss;
    CHECK_OK(mw_model_forward(mi, tok, NULL, &loss));
    memcpy(a, mw_model_logits(mi), nl * 4);
    mw_model_destroy(mi);
    CHECK_OK(logits_of(out, ct, tok, b, nl));
    CHECK(memcmp(a, b, nl * 4) == 0, "tied export -> import changes the logits");
    printf("tied: exported without lm_head.weight, tie_word_embeddings true; import gives identical logits\n");

    /* a model of another configuration is refused, naming the key */
    mw_config cx = c;
    cx.rope_theta = 10000.0;
    CHECK(logits_of(FIX, cx, tok, b, nl) == MW_ERR_FORMAT && strstr(mw_last_error(), "rope_theta is 50000, the model's is 10000"),
          "another theta: %s", mw_last_error());
    cx = c;
    cx.norm_eps = 1e-5;
    CHECK(logits_of(FIX, cx, tok, b, nl) == MW_ERR_FORMAT && strstr(mw_last_error(), "rms_norm_eps is"),
          "another eps: %s", mw_last_error());
    CHECK(logits_of(FIX, ct, tok, b, nl) == MW_ERR_FORMAT &&
              strstr(mw_last_error(), "tie_word_embeddings is 0, the model's is 1"),
          "a tied model from untied weights: %s", mw_last_error());
    cx = c;
    cx.ctx = 16; /* the context is the model's to choose */
    CHECK_OK(logits_of(FIX, cx, tok, b, nl));
    /* GPT-2 weights into a Llama model, and Llama weights into GPT-2 */
    CHECK(logits_of("tests/ref/hf_tiny", c, tok, b, nl) == MW_ERR_FORMAT, "GPT-2 weights into a Llama: %s",
          mw_last_error());
    char gd[600], gp[700]; /* GPT-2 tensors beside a Llama config.json */
    snprintf(gd, sizeof gd, "%s/gpt2_llamacfg", dir);
    mkdir(gd, 0777);
    snprintf(gp, sizeof gp, "%s/model.safetensors", gd);
    copy_file("tests/ref/hf_tiny/model.safetensors", gp);
    snprintf(gp, sizeof gp, "%s/config.json", gd);
    copy_file(FIX "/config.json", gp);
    CHECK(logits_of(gd, c, tok, b, nl) == MW_ERR_FORMAT &&
              strstr(mw_last_error(), "tensor model.embed_tokens.weight is missing"),
          "GPT-2 tensors with a Llama config.json into a Llama: %s", mw_last_error());
    mw_config g;
    mw_config_default(&g);
    g.n_layer = 2, g.n_head = 4, g.n_embd = 48, g.vocab = 97, g.ctx = 24, g.batch = 2, g.seq = 9;
    CHECK(logits_of(FIX, g, tok, b, nl) == MW_ERR_FORMAT && strstr(mw_last_error(), "not GPT-2 weights"),
          "Llama weights into GPT-2: %s", mw_last_error());
    printf("a model of another rope_theta, rms_norm_eps or head tying, or family, is refused\n");
    mw_model_destroy(m), mw_model_destroy(mt);
    free(tok), free(ref), free(a), free(b);
}

/* Streamed: loading reads each tensor into its parameter through a fixed buffer, never a second
 * copy of the model or of a file. An 11 MB BF16 checkpoint (5.5 M parameters, 22 MB as float32)
 * loads into a model whose parameters are already resident: the process's peak RSS may grow by
 * the reader's buffer, not by a shard or a model. */
static void test_streamed(const char *dir) {
    mw_config c;
    mw_config_default(&c);
    c.arch = MW_ARCH_LLAMA;
    c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 256, c.ffn = 704, c.vocab = 8192, c.ctx = 16;
    c.tied = 0, c.rope_theta = 10000.0, c.norm_eps = 1e-5, c.batch = 1, c.seq = 1, c.inference = 1;
    char d[600], p[700];
    snprintf(d, sizeof d, "%s/big", dir);
    mkdir(d, 0777);
    snprintf(p, sizeof p, "%s/config.json", d);
    write_text(p, "{\"model_type\": \"llama\", \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
                  "\"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-05, \"max_position_embeddings\": 16}");
    mw_model *m;
    CHECK_OK(mw_model_create(&m, &c));
    /* the header: every tensor BF16, in the model's order */
    size_t cap = 64 + (size_t)mw_model_num_tensors(m) * 200, hl = 0;
    char *h = malloc(cap);
    uint64_t off = 0, params = 0;
    hl += (size_t)snprintf(h + hl, cap - hl, "{");
    for (int i = 0; i < mw_model_num_tensors(m); i++) {
        mw_param_info t;
        mw_model_tensor(m, i, &t);
        if (t.ndim == 2)
            hl += (size_t)snprintf(h + hl, cap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d,%d],\"data_offsets\":[%llu,%llu]}",
                                   i ? "," : "", t.name, t.dims[0], t.dims[1], (unsigned long long)off,
                                   (unsigned long long)(off + t.numel * 2));
        else
            hl += (size_t)snprintf(h + hl, cap - hl, "%s\"%s\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%llu,%llu]}",
                                   i ? "," : "", t.name, t.dims[0], (unsigned long long)off,
                                   (unsigned long long)(off + t.numel * 2));
        off += t.numel * 2;
        params += t.numel;
    }
    hl += (size_t)snprintf(h + hl, cap - hl, "}");
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    FILE *f = fopen(p, "wb");
    uint64_t hl64 = hl;
    fwrite(&hl64, 8, 1, f);
    fwrite(h, 1, hl, f);
    uint16_t chunk[4096];
    for (uint64_t i = 0; i < off / 2; i += 4096) {
        for (int k = 0; k < 4096; k++) chunk[k] = (uint16_t)(0x3c00 + ((i + (uint64_t)k) * 2654435761u >> 20 & 0x1ff));
        fwrite(chunk, 2, off / 2 - i < 4096 ? off / 2 - i : 4096, f);
    }
    fclose(f);
    free(h);
    for (int i = 0; i < mw_model_num_tensors(m); i++) { /* the parameters resident before the load */
        mw_param_info t;
        mw_model_tensor(m, i, &t);
        memset(t.data, 0, t.numel * 4);
    }
    uint64_t before = mw_peak_rss();
    CHECK_OK(mw_hf_load(d, m));
    uint64_t grew = mw_peak_rss() - before;
    mw_param_info t0; /* the values: BF16 as written */
    mw_model_tensor(m, 0, &t0);
    int wrong = 0;
    for (uint32_t k = 0; k < 4096; k++) {
        uint32_t bits = (uint32_t)(0x3c00 + ((uint64_t)k * 2654435761u >> 20 & 0x1ff)) << 16;
        float want;
        memcpy(&want, &bits, 4);
        wrong += t0.data[k] != want;
    }
    CHECK(wrong == 0, "%d of the first 4096 loaded values are wrong", wrong);
    CHECK(params > 5000000 && grew < ((uint64_t)4 << 20), "loading %llu BF16 parameters (%.1f MB) grew the peak RSS by %.1f MB",
          (unsigned long long)params, off / 1e6, grew / 1e6);
    printf("streamed: %.1f M BF16 parameters (%.1f MB file, %.1f MB as float32) loaded with the peak RSS %.2f MB higher\n",
           params / 1e6, off / 1e6, params * 4 / 1e6, grew / 1e6);
    mw_model_destroy(m);
}

int main(void) {
    char dir[] = "/tmp/mw_test_hf_llama_XXXXXX";
    if (!mkdtemp(dir)) return 1;
    test_streamed(dir); /* first: the peak RSS is then the load's own */
    test_inspect();
    test_sharded_values();
    test_dtype_sweep(dir);
    test_index_parse();
    test_shards(dir);
    test_config(dir);
    test_window(dir);
    test_model(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
    return test_summary("test_hf_llama");
}
