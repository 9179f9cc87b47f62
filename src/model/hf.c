/* Hugging Face weights in and out: GPT-2, the Llama family and the deepseek family (its config.json
 * and tensor list in hf_deepseek.c), one model.safetensors or a sharded
 * checkpoint (model.safetensors.index.json and its shards), F32/F16/BF16/F64 converted to float32
 * on load, straight into the model's parameters (never a second copy of the model).
 * memwall's tensor names are Hugging Face's. GPT-2's 2-D weights inside blocks are (out, in) like
 * nn.Linear in memwall, where GPT-2's Conv1D stores (in, out); Llama's are nn.Linear's on both
 * sides, so nothing is transposed. Export writes tensors it is handed (mw_hf_export_tensors): a
 * model's from memory here, a checkpoint's from src/train/ckpt_export.c, which reads that format. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/fsutil.h"
#include "../core/json.h"
#include "../core/status.h"
#include "../graph/model.h"
#include "hf.h"
#include "safetensors.h"

/* Conv1D weights: the 2-D tensors inside GPT-2's blocks */
static int is_conv1d(const char *name, int ndim) { return ndim == 2 && strncmp(name, "h.", 2) == 0; }

static void resolve(const char *path, char *file, size_t n, char *dir, size_t dn) {
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(file, n, "%s/model.safetensors", path);
        snprintf(dir, dn, "%s", path);
    } else {
        snprintf(file, n, "%s", path);
        const char *slash = strrchr(path, '/');
        snprintf(dir, dn, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    }
}

/* ---- config.json ----------------------------------------------------------------------------- */

/* key of object 0: absent or null leaves *dst; otherwise a positive integer below 2^30 */
static mw_status get_int(const mw_json *j, const char *what, const char *key, int *dst) {
    int v = mw_json_get(j, 0, key);
    if (v < 0 || j->nodes[v].type == MW_JSON_NULL) return MW_OK;
    const mw_json_node *x = &j->nodes[v];
    if (x->type != MW_JSON_NUM || !x->is_int || x->i < 1 || x->i >= (1 << 30))
        return mw_fail(MW_ERR_FORMAT, "%s: %s is not a positive integer below 2^30", what, key);
    *dst = (int)x->i;
    return MW_OK;
}

static mw_status get_num(const mw_json *j, const char *what, const char *key, double *dst) {
    int v = mw_json_get(j, 0, key);
    if (v < 0 || j->nodes[v].type == MW_JSON_NULL) return MW_OK;
    const mw_json_node *x = &j->nodes[v];
    if (x->type != MW_JSON_NUM || !(x->num > 0) || !isfinite(x->num))
        return mw_fail(MW_ERR_FORMAT, "%s: %s is not a positive number", what, key);
    *dst = x->num;
    return MW_OK;
}

/* absent or null leaves *dst (the default) */
static mw_status get_bool(const mw_json *j, const char *what, const char *key, int *dst) {
    int v = mw_json_get(j, 0, key);
    if (v < 0 || j->nodes[v].type == MW_JSON_NULL) return MW_OK;
    if (j->nodes[v].type != MW_JSON_BOOL) return mw_fail(MW_ERR_FORMAT, "%s: %s is not true or false", what, key);
    *dst = j->nodes[v].i != 0;
    return MW_OK;
}

/* key of object 0 when it is present and not null, else NULL */
static const mw_json_node *given(const mw_json *j, const char *key) {
    int v = mw_json_get(j, 0, key);
    return v < 0 || j->nodes[v].type == MW_JSON_NULL ? NULL : &j->nodes[v];
}

/* the value of x for a message: "relu" (quoted, at most 40 bytes), 0.5, true, or its JSON type */
static const char *value_str(const mw_json_node *x, char *b, size_t n) {
    switch (x->type) {
    case MW_JSON_STR: snprintf(b, n, "\"%.40s\"", x->str); break;
    case MW_JSON_NUM: snprintf(b, n, "%.17g", x->num); break;
    case MW_JSON_BOOL: snprintf(b, n, "%s", x->i ? "true" : "false"); break;
    case MW_JSON_OBJ: snprintf(b, n, "an object"); break;
    case MW_JSON_ARR: snprintf(b, n, "an array"); break;
    default: snprintf(b, n, "null"); break;
    }
    return b;
}

/* key, when given, must be one of the strings ok[0..n) (what memwall computes: `does`) */
static mw_status want_str(const mw_json *j, const char *what, const char *key, const char *const *ok, int n,
                          const char *does) {
    const mw_json_node *x = given(j, key);
    for (int i = 0; x && x->type == MW_JSON_STR && i < n; i++)
        if (strcmp(x->str, ok[i]) == 0) return MW_OK;
    char b[64];
    return x ? mw_fail(MW_ERR_FORMAT, "%s: %s is %s: %s", what, key, value_str(x, b, sizeof b), does) : MW_OK;
}

/* key, when given, must be the boolean ok */
static mw_status want_bool(const mw_json *j, const char *what, const char *key, int ok, const char *does) {
    const mw_json_node *x = given(j, key);
    char b[64];
    if (x && (x->type != MW_JSON_BOOL || (x->i != 0) != ok))
        return mw_fail(MW_ERR_FORMAT, "%s: %s is %s: %s", what, key, value_str(x, b, sizeof b), does);
    return MW_OK;
}

/* GPT2Config: the shape, layer_norm_epsilon, and a refusal of every option whose math memwall's
 * GPT-2 does not compute (its GPT-2 is GPT2LMHeadModel with the defaults: tanh GELU, attention
 * scaled by 1/sqrt(head size) in every layer, MLP width 4 x n_embd, tied head).
 * Dropout, initializer_range, summary_*, reorder_and_upcast_attn (the same math in float32) and
 * the token ids do not change the model's function and are accepted as they are. */
static mw_status parse_gpt2(const mw_json *j, const char *what, mw_hf_config *c) {
    static const char *const keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions", "n_inner"};
    int n_inner = 0;
    int *dst[] = {&c->n_layer, &c->n_head, &c->n_embd, &c->vocab, &c->ctx, &n_inner};
    for (int k = 0; k < 6; k++) MW_TRY(get_int(j, what, keys[k], dst[k]));
    c->arch = MW_ARCH_GPT2;
    c->tied = 1;
    static const char *const gelu[] = {"gelu_new", "gelu_pytorch_tanh"};
    MW_TRY(want_str(j, what, "activation_function", gelu, 2,
                    "memwall's GPT-2 MLP is the tanh GELU (\"gelu_new\", \"gelu_pytorch_tanh\")"));
    const mw_json_node *x = given(j, "layer_norm_epsilon"); /* implemented: norm_eps, 0 for GPT-2's 1e-05 */
    char b[64];
    if (x && (x->type != MW_JSON_NUM || !(x->num > 0 && x->num < 1)))
        return mw_fail(MW_ERR_FORMAT, "%s: layer_norm_epsilon is %s: memwall takes a LayerNorm epsilon in (0, 1)", what,
                       value_str(x, b, sizeof b));
    c->norm_eps = x && x->num != 1e-5 ? x->num : 0.0;
    MW_TRY(want_bool(j, what, "scale_attn_weights", 1,
                     "memwall's GPT-2 scales attention scores by 1/sqrt(head size) (scale_attn_weights true)"));
    MW_TRY(want_bool(j, what, "scale_attn_by_inverse_layer_idx", 0,
                     "memwall's GPT-2 does not scale attention by 1/(layer index + 1)"));
    MW_TRY(want_bool(j, what, "add_cross_attention", 0, "memwall's GPT-2 has no cross-attention"));
    MW_TRY(want_bool(j, what, "tie_word_embeddings", 1, "memwall's GPT-2 LM head is the token embedding (tied)"));
    if (n_inner && c->n_embd && n_inner != 4 * c->n_embd)
        return mw_fail(MW_ERR_FORMAT, "%s: n_inner is %d: memwall's GPT-2 MLP width is 4 x n_embd = %d", what, n_inner,
                       4 * c->n_embd);
    c->ffn = n_inner; /* for a check against the weights' width when n_embd is not given */
    return MW_OK;
}

/* rope_scaling (transformers 4) and rope_parameters (transformers 5, which also holds
 * rope_theta): null, or rope_type "default", the plain RoPE; its rope_theta into *theta */
mw_status mw_hf_json_rope(const mw_json *j, const char *what, double *theta) {
    static const char *const ropes[] = {"rope_scaling", "rope_parameters"};
    for (int k = 0; k < 2; k++) {
        int v = mw_json_get(j, 0, ropes[k]);
        if (v < 0 || j->nodes[v].type == MW_JSON_NULL) continue;
        int t = j->nodes[v].type == MW_JSON_OBJ ? mw_json_get(j, v, "rope_type") : -1;
        if (t < 0 && j->nodes[v].type == MW_JSON_OBJ) t = mw_json_get(j, v, "type");
        int named = t >= 0 && j->nodes[t].type == MW_JSON_STR;
        if (!named || strcmp(j->nodes[t].str, "default") != 0)
            return mw_fail(MW_ERR_FORMAT, "%s: %s is not null%s%.40s%s: memwall's RoPE has no scaling", what,
                           ropes[k], named ? " (\"" : "", named ? j->nodes[t].str : "", named ? "\")" : "");
        int th = mw_json_get(j, v, "rope_theta");
        if (th >= 0 && j->nodes[th].type != MW_JSON_NULL) {
            const mw_json_node *x = &j->nodes[th], *top = given(j, "rope_theta");
            if (x->type != MW_JSON_NUM || !(x->num > 0) || !isfinite(x->num))
                return mw_fail(MW_ERR_FORMAT, "%s: %s.rope_theta is not a positive number", what, ropes[k]);
            if (top && top->type == MW_JSON_NUM && top->num != x->num)
                return mw_fail(MW_ERR_FORMAT, "%s: %s.rope_theta is %.17g, but rope_theta is %.17g", what, ropes[k],
                               x->num, top->num);
            *theta = x->num;
        }
    }
    return MW_OK;
}

/* LlamaConfig (and MistralConfig): the shape, the defaults transformers applies, and a refusal of
 * every option whose math memwall's Llama does not compute. */
static mw_status parse_llama(const mw_json *j, const char *what, mw_hf_config *c, int mistral) {
    static const char *const keys[] = {"num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size",
                                       "max_position_embeddings", "num_key_value_heads", "intermediate_size",
                                       "head_dim"};
    int *dst[] = {&c->n_layer, &c->n_head, &c->n_embd, &c->vocab, &c->ctx, &c->n_kv_head, &c->ffn, &c->head_dim};
    for (int k = 0; k < 8; k++) MW_TRY(get_int(j, what, keys[k], dst[k]));
    c->arch = MW_ARCH_LLAMA;
    c->rope_theta = 10000.0;
    c->norm_eps = 1e-6;
    if (!c->ctx) c->ctx = mistral ? 131072 : 2048;
    if (!c->n_kv_head) c->n_kv_head = mistral ? 8 : c->n_head;
    MW_TRY(get_num(j, what, "rope_theta", &c->rope_theta));
    MW_TRY(get_num(j, what, "rms_norm_eps", &c->norm_eps));
    MW_TRY(get_bool(j, what, "tie_word_embeddings", &c->tied));
    int attn_bias = 0, mlp_bias = 0;
    MW_TRY(get_bool(j, what, "attention_bias", &attn_bias));
    MW_TRY(get_bool(j, what, "mlp_bias", &mlp_bias));
    if (attn_bias || mlp_bias)
        return mw_fail(MW_ERR_FORMAT, "%s: %s is true: memwall's Llama has no biases", what,
                       attn_bias ? "attention_bias" : "mlp_bias");
    static const char *const silu[] = {"silu", "swish"}; /* transformers' ACT2FN: both are SiLU */
    MW_TRY(want_str(j, what, "hidden_act", silu, 2, "memwall's Llama MLP is SwiGLU (\"silu\")"));
    MW_TRY(mw_hf_json_rope(j, what, &c->rope_theta));
    if (c->head_dim && c->n_head && c->n_embd && c->head_dim * c->n_head != c->n_embd)
        return mw_fail(MW_ERR_FORMAT, "%s: head_dim is %d, not hidden_size / num_attention_heads = %d / %d", what,
                       c->head_dim, c->n_embd, c->n_head);
    if (c->n_head && c->n_kv_head && c->n_head % c->n_kv_head)
        return mw_fail(MW_ERR_FORMAT, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", what,
                       c->n_head, c->n_kv_head);
    if (mistral) { /* MistralConfig's sliding_window defaults to 4096; null means none. Attention
                    * over at most sliding_window positions is full attention: the model runs
                    * exactly at a context up to it (the caller refuses more) */
        int sw = 4096, v = mw_json_get(j, 0, "sliding_window");
        if (v >= 0 && j->nodes[v].type == MW_JSON_NULL) sw = 0;
        else MW_TRY(get_int(j, what, "sliding_window", &sw));
        c->sliding_window = sw;
    }
    return MW_OK;
}

mw_status mw_hf_json_int(const mw_json *j, const char *what, const char *key, int *dst) {
    return get_int(j, what, key, dst);
}
mw_status mw_hf_json_num(const mw_json *j, const char *what, const char *key, double *dst) {
    return get_num(j, what, key, dst);
}
mw_status mw_hf_json_bool(const mw_json *j, const char *what, const char *key, int *dst) {
    return get_bool(j, what, key, dst);
}
const mw_json_node *mw_hf_json_given(const mw_json *j, const char *key) { return given(j, key); }
mw_status mw_hf_json_want_str(const mw_json *j, const char *what, const char *key, const char *const *ok, int n,
                              const char *does) {
    return want_str(j, what, key, ok, n, does);
}
const char *mw_hf_json_value(const mw_json_node *x, char *b, size_t n) { return value_str(x, b, n); }

/* mw_hf_config_parse; want_arch >= 0: the weights (named `weights`) are of that family, and a
 * model_type of the other is refused as such before its options are audited */
static mw_status config_parse(const char *text, size_t len, const char *what, mw_hf_config *c, int want_arch,
                              const char *weights) {
    memset(c, 0, sizeof *c);
    mw_json j;
    MW_TRY(mw_json_parse(&j, text, len, what, MW_JSON_MAX_CONFIG));
    mw_status s = MW_OK;
    int type = mw_json_get(&j, 0, "model_type");
    const mw_json_node *t = type >= 0 ? &j.nodes[type] : NULL;
    if (j.nodes[0].type != MW_JSON_OBJ) {
        s = mw_fail(MW_ERR_FORMAT, "%s: not a JSON object", what);
    } else if (t && t->type != MW_JSON_STR) {
        s = mw_fail(MW_ERR_FORMAT, "%s: model_type is not a string", what);
    } else if (want_arch >= 0 && (want_arch == MW_ARCH_GPT2) != (!t || strcmp(t->str, "gpt2") == 0)) {
        s = mw_fail(MW_ERR_FORMAT, "%s: model_type is %s%.40s%s, but the weights in %s are %s", what, t ? "\"" : "",
                    t ? t->str : "absent", t ? "\"" : "", weights, want_arch == MW_ARCH_GPT2 ? "GPT-2's" : "Llama's or the deepseek family's");
    } else if (!t || strcmp(t->str, "gpt2") == 0) {
        s = parse_gpt2(&j, what, c);
    } else if (strcmp(t->str, "llama") == 0 || strcmp(t->str, "mistral") == 0) {
        s = parse_llama(&j, what, c, t->str[0] == 'm');
    } else if (strcmp(t->str, "deepseek_v2") == 0 || strcmp(t->str, "deepseek_v3") == 0 ||
               strcmp(t->str, "mixtral") == 0) {
        s = mw_hf_deepseek_parse(&j, what, t->str, c);
    } else if (strncmp(t->str, "qwen", 4) == 0) {
        s = mw_fail(MW_ERR_FORMAT,
                    "%s: model_type \"%.40s\" is not supported: Qwen's attention has q/k/v biases, which memwall's "
                    "Llama has not",
                    what, t->str);
    } else {
        s = mw_fail(MW_ERR_FORMAT,
                    "%s: model_type is \"%.40s\", not \"gpt2\", \"llama\", \"mistral\", \"deepseek_v2\", "
                    "\"deepseek_v3\" or \"mixtral\"",
                    what, t->str);
    }
    if (s == MW_OK && t) snprintf(c->model_type, sizeof c->model_type, "%s", t->str);
    mw_json_free(&j);
    return s;
}

mw_status mw_hf_config_parse(const char *text, size_t len, const char *what, mw_hf_config *c) {
    return config_parse(text, len, what, c, -1, NULL);
}

/* path read whole, at most MW_HF_MAX_CONFIG_FILE bytes, into *buf (NUL-terminated; the caller
 * frees it); *found = 0 (and MW_OK) when it does not exist */
static mw_status read_small(const char *p, char **buf, size_t *len, int *found) {
    *buf = NULL;
    *len = 0;
    *found = 0;
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return MW_OK;
    if (fd < 0) return mw_fail(MW_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    struct stat st;
    mw_status s = MW_OK;
    char *b = NULL;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        s = mw_fail(MW_ERR_FORMAT, "%s: not a regular file", p);
    else if ((uint64_t)st.st_size > MW_HF_MAX_CONFIG_FILE)
        s = mw_fail(MW_ERR_FORMAT, "%s: %lld bytes, more than the %zu MiB a %s may have", p, (long long)st.st_size,
                    MW_HF_MAX_CONFIG_FILE >> 20, strstr(p, "index.json") ? "weight index" : "config.json");
    else if (!(b = malloc((size_t)st.st_size + 1)))
        s = mw_fail(MW_ERR_NOMEM, "%s: out of memory", p);
    size_t n = s == MW_OK ? (size_t)st.st_size : 0;
    for (size_t got = 0; s == MW_OK && got < n;) {
        ssize_t k = pread(fd, b + got, n - got, (off_t)got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) s = mw_fail(MW_ERR_IO, "cannot read %s: %s", p, k ? strerror(errno) : "unexpected end");
        else got += (size_t)k;
    }
    close(fd);
    if (s != MW_OK) {
        free(b);
        return s;
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    *found = 1;
    return MW_OK;
}

/* dir/config.json into *c, for the weights `weights` of family arch; *found = 0 (and MW_OK) when
 * there is none. */
static mw_status read_config(const char *dir, mw_hf_config *c, int *found, int arch, const char *weights) {
    char p[1200], *buf;
    size_t n;
    snprintf(p, sizeof p, "%s/config.json", dir);
    memset(c, 0, sizeof *c);
    MW_TRY(read_small(p, &buf, &n, found));
    mw_status s = *found ? config_parse(buf, n, p, c, arch, weights) : MW_OK;
    free(buf);
    if (s != MW_OK) *found = 0;
    return s;
}

/* ---- model.safetensors.index.json ------------------------------------------------------------ */

void mw_hf_index_free(mw_hf_index *ix) {
    for (int i = 0; ix->name && i < ix->n; i++) free(ix->name[i]);
    for (int i = 0; ix->shards && i < ix->nshards; i++) free(ix->shards[i]);
    free(ix->name);
    free(ix->shard);
    free(ix->shards);
    memset(ix, 0, sizeof *ix);
}

typedef struct ix_ent {
    const char *name, *shard;
    int id;
} ix_ent;

static int cmp_ent_shard(const void *a, const void *b) {
    return strcmp(((const ix_ent *)a)->shard, ((const ix_ent *)b)->shard);
}
static int cmp_ent_name(const void *a, const void *b) {
    return strcmp(((const ix_ent *)a)->name, ((const ix_ent *)b)->name);
}

mw_status mw_hf_index_parse(const char *text, size_t len, const char *what, mw_hf_index *ix) {
    memset(ix, 0, sizeof *ix);
    mw_json j;
    MW_TRY(mw_json_parse(&j, text, len, what, MW_JSON_MAX_CONFIG));
    mw_status s = MW_OK;
    ix_ent *e = NULL;
    int wm = j.nodes[0].type == MW_JSON_OBJ ? mw_json_get(&j, 0, "weight_map") : -1, n = 0;
    if (j.nodes[0].type != MW_JSON_OBJ) {
        s = mw_fail(MW_ERR_FORMAT, "%s: not a JSON object", what);
        goto out;
    }
    if (wm < 0 || j.nodes[wm].type != MW_JSON_OBJ) {
        s = mw_fail(MW_ERR_FORMAT, "%s: no weight_map object", what);
        goto out;
    }
    for (int c = j.nodes[wm].first; c >= 0; c = j.nodes[c].next) n++;
    if (n == 0) {
        s = mw_fail(MW_ERR_FORMAT, "%s: weight_map is empty", what);
        goto out;
    }
    if (!(e = calloc((size_t)n, sizeof *e))) {
        s = mw_fail(MW_ERR_NOMEM, "out of memory");
        goto out;
    }
    n = 0;
    for (int c = j.nodes[wm].first; c >= 0; c = j.nodes[c].next, n++) {
        const mw_json_node *x = &j.nodes[c];
        size_t sl = x->type == MW_JSON_STR ? strlen(x->str) : 0;
        if (x->type != MW_JSON_STR || sl == 0 || sl > 255 || strchr(x->str, '/') || strcmp(x->str, ".") == 0 ||
            strcmp(x->str, "..") == 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: weight_map's entry for '%.200s' is not a shard file name in the index's "
                                       "directory",
                        what, x->key);
            goto out;
        }
        e[n] = (ix_ent){x->key, x->str, 0};
    }
    qsort(e, (size_t)n, sizeof *e, cmp_ent_shard);
    int ns = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(e[i].shard, e[i - 1].shard) != 0) ns++;
        e[i].id = ns - 1;
    }
    if (ns > MW_HF_MAX_SHARDS) {
        s = mw_fail(MW_ERR_FORMAT, "%s: %d shards, more than the %d memwall opens", what, ns, MW_HF_MAX_SHARDS);
        goto out;
    }
    ix->shards = calloc((size_t)ns, sizeof *ix->shards);
    ix->name = calloc((size_t)n, sizeof *ix->name);
    ix->shard = calloc((size_t)n, sizeof *ix->shard);
    if (!ix->shards || !ix->name || !ix->shard) {
        s = mw_fail(MW_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++)
        if ((i == 0 || e[i].id != e[i - 1].id) && !(ix->shards[ix->nshards++] = strdup(e[i].shard))) {
            s = mw_fail(MW_ERR_NOMEM, "out of memory");
            goto out;
        }
    qsort(e, (size_t)n, sizeof *e, cmp_ent_name);
    for (int i = 0; i < n; i++) {
        if (i > 0 && strcmp(e[i].name, e[i - 1].name) == 0) {
            s = mw_fail(MW_ERR_FORMAT, "%s: tensor '%.200s' appears twice in weight_map", what, e[i].name);
            goto out;
        }
        if (!(ix->name[ix->n] = strdup(e[i].name))) {
            s = mw_fail(MW_ERR_NOMEM, "out of memory");
            goto out;
        }
        ix->shard[ix->n++] = e[i].id;
    }
out:
    free(e);
    mw_json_free(&j);
    if (s != MW_OK) mw_hf_index_free(ix);
    return s;
}

/* ---- a checkpoint: one file or the shards of an index ------------------------------------------ */

void mw_hf_files_close(mw_hf_files *h) {
    for (int i = 0; h->f && i < h->n; i++) mw_st_close(&h->f[i]);
    free(h->f);
    h->f = NULL;
    h->n = 0;
    mw_hf_index_free(&h->ix);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

mw_status mw_hf_files_open(mw_hf_files *h, const char *path) {
    memset(h, 0, sizeof *h);
    char file[1100], index[1200];
    resolve(path, file, sizeof file, h->dir, sizeof h->dir);
    struct stat st;
    /* a directory: model.safetensors as transformers prefers it, else the index */
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", h->dir);
    h->sharded = ends_with(path, ".index.json") ||
                 (stat(path, &st) == 0 && S_ISDIR(st.st_mode) && access(file, F_OK) != 0 && access(index, F_OK) == 0);
    if (!h->sharded) {
        snprintf(h->what, sizeof h->what, "%s", file);
        if (!(h->f = calloc(1, sizeof *h->f))) return mw_fail(MW_ERR_NOMEM, "out of memory");
        mw_status s = mw_st_open(&h->f[0], file);
        if (s != MW_OK) {
            free(h->f);
            h->f = NULL;
            return s;
        }
        h->n = 1;
        return MW_OK;
    }
    if (ends_with(path, ".index.json")) snprintf(index, sizeof index, "%s", path);
    snprintf(h->what, sizeof h->what, "%s", index);
    char *buf;
    size_t len;
    int found;
    MW_TRY(read_small(index, &buf, &len, &found));
    if (!found) return mw_fail(MW_ERR_IO, "cannot open %s: %s", index, strerror(ENOENT));
    mw_status s = mw_hf_index_parse(buf, len, index, &h->ix);
    free(buf);
    MW_TRY(s);
    if (!(h->f = calloc((size_t)h->ix.nshards, sizeof *h->f))) {
        mw_hf_index_free(&h->ix);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    for (; s == MW_OK && h->n < h->ix.nshards; h->n++) {
        char sp[1400];
        snprintf(sp, sizeof sp, "%s/%s", h->dir, h->ix.shards[h->n]);
        if ((s = mw_st_open(&h->f[h->n], sp)) != MW_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", mw_last_error());
            s = mw_fail(s, "%s names shard %s: %s", index, h->ix.shards[h->n], why);
            break;
        }
    }
    for (int i = 0; s == MW_OK && i < h->ix.n; i++)
        if (!mw_st_find(&h->f[h->ix.shard[i]], h->ix.name[i]))
            s = mw_fail(MW_ERR_FORMAT, "%s: weight_map puts %s in %s, which has no such tensor", index,
                        h->ix.name[i], h->ix.shards[h->ix.shard[i]]);
    if (s != MW_OK) mw_hf_files_close(h);
    return s;
}

static int cmp_str(const void *key, const void *elem) { return strcmp(key, *(char *const *)elem); }

const mw_st_tensor *mw_hf_files_find(const mw_hf_files *h, const char *name, const mw_st_file **file) {
    const mw_st_file *f = h->n == 1 && !h->sharded ? &h->f[0] : NULL;
    if (h->sharded) {
        char **p = bsearch(name, h->ix.name, (size_t)h->ix.n, sizeof *h->ix.name, cmp_str);
        if (p) f = &h->f[h->ix.shard[p - h->ix.name]];
    }
    const mw_st_tensor *t = f ? mw_st_find(f, name) : NULL;
    if (file) *file = t ? f : NULL;
    return t;
}

/* every tensor name of the checkpoint, one at a time: i from 0 while it returns non-NULL */
const char *mw_hf_files_name(const mw_hf_files *h, int i) {
    if (h->sharded) return i < h->ix.n ? h->ix.name[i] : NULL;
    return i < h->f[0].n ? h->f[0].t[i].name : NULL;
}

static const mw_st_tensor *find2(const mw_hf_files *h, const char *prefix, const char *name) {
    char b[300];
    snprintf(b, sizeof b, "%s%s", prefix, name);
    return mw_hf_files_find(h, b, NULL);
}

static const char *prefix_of(const mw_hf_files *h) {
    return find2(h, "", "wte.weight") ? "" : find2(h, "transformer.", "wte.weight") ? "transformer." : NULL;
}

/* "[97, 48]" */
static const char *dims_str(char *b, size_t n, int ndim, const int64_t *d) {
    if (ndim == 1) snprintf(b, n, "[%lld]", (long long)d[0]);
    else if (ndim == 2) snprintf(b, n, "[%lld, %lld]", (long long)d[0], (long long)d[1]);
    else snprintf(b, n, "(%d dimensions)", ndim);
    return b;
}

/* ---- inspect --------------------------------------------------------------------------------- */

static mw_status inspect_gpt2(const mw_hf_files *h, mw_hf_shape *shape) {
    const char *pre = prefix_of(h);
    const mw_st_tensor *wte = pre ? find2(h, pre, "wte.weight") : NULL, *wpe = pre ? find2(h, pre, "wpe.weight") : NULL;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || wte->shape[1] != wpe->shape[1] ||
        wte->shape[0] >= (1 << 30) || wte->shape[1] >= (1 << 30) || wpe->shape[0] >= (1 << 30))
        return mw_fail(MW_ERR_FORMAT,
                       "%s: neither GPT-2 weights (no 2-D wte.weight and wpe.weight of one width) nor Llama "
                       "weights (no model.embed_tokens.weight)",
                       h->what);
    shape->arch = MW_ARCH_GPT2;
    shape->tied = 1;
    shape->vocab = (int)wte->shape[0];
    shape->n_embd = (int)wte->shape[1];
    shape->ctx = (int)wpe->shape[0];
    char name[64];
    for (;; shape->n_layer++) {
        snprintf(name, sizeof name, "h.%d.ln_1.weight", shape->n_layer);
        if (!find2(h, pre, name)) break;
    }
    /* config.json beside the weights: the head count, and its shape must be the weights' */
    mw_hf_config c;
    MW_TRY(read_config(h->dir, &c, &shape->config, MW_ARCH_GPT2, h->what));
    static const char *const keys[] = {"n_layer", "n_embd", "vocab_size", "n_positions"};
    const int cv[] = {c.n_layer, c.n_embd, c.vocab, c.ctx},
              wv[] = {shape->n_layer, shape->n_embd, shape->vocab, shape->ctx};
    for (int k = 0; k < 4; k++)
        if (cv[k] && cv[k] != wv[k])
            return mw_fail(MW_ERR_FORMAT, "%s/config.json: %s is %d, but the weights in %s have %d", h->dir, keys[k],
                           cv[k], h->what, wv[k]);
    if (c.ffn && c.ffn != 4 * shape->n_embd)
        return mw_fail(MW_ERR_FORMAT, "%s/config.json: n_inner is %d: memwall's GPT-2 MLP width is 4 x n_embd = %d", h->dir,
                       c.ffn, 4 * shape->n_embd);
    shape->n_head = c.n_head;
    shape->norm_eps = c.norm_eps;
    return MW_OK;
}

/* Tensor i of a Llama of this shape (the COMMON contract: HF's state_dict order and layout);
 * 0 past the last. */
static int llama_tensor(const mw_hf_shape *s, int i, char *name, size_t n, int *ndim, int64_t dims[2]) {
    const int64_t C = s->n_embd, hs = s->n_embd / s->n_head;
    const int per = 9;
    if (i == 0) {
        snprintf(name, n, "model.embed_tokens.weight");
        *ndim = 2, dims[0] = s->vocab, dims[1] = C;
        return 1;
    }
    i--;
    if (i < s->n_layer * per) {
        static const char *const part[] = {"input_layernorm",    "self_attn.q_proj", "self_attn.k_proj",
                                           "self_attn.v_proj",   "self_attn.o_proj", "post_attention_layernorm",
                                           "mlp.gate_proj",      "mlp.up_proj",      "mlp.down_proj"};
        const int64_t out[] = {C, s->n_head * hs, s->n_kv_head * hs, s->n_kv_head * hs, C, C, s->ffn, s->ffn, C};
        const int64_t in[] = {0, C, C, C, s->n_head * hs, 0, C, C, s->ffn};
        int k = i % per;
        snprintf(name, n, "model.layers.%d.%s.weight", i / per, part[k]);
        *ndim = in[k] ? 2 : 1, dims[0] = out[k], dims[1] = in[k];
        return 1;
    }
    i -= s->n_layer * per;
    if (i == 0) {
        snprintf(name, n, "model.norm.weight");
        *ndim = 1, dims[0] = C, dims[1] = 0;
        return 1;
    }
    if (i == 1 && !s->tied) {
        snprintf(name, n, "lm_head.weight");
        *ndim = 2, dims[0] = s->vocab, dims[1] = C;
        return 1;
    }
    return 0;
}

static mw_status inspect_llama(const mw_hf_files *h, mw_hf_shape *shape) {
    mw_hf_config c;
    const mw_st_file *ef;
    const mw_st_tensor *emb = mw_hf_files_find(h, "model.embed_tokens.weight", &ef);
    char cj[1200], b1[64], b2[64];
    snprintf(cj, sizeof cj, "%s/config.json", h->dir);
    MW_TRY(read_config(h->dir, &c, &shape->config, MW_ARCH_LLAMA, h->what));
    if (!shape->config)
        return mw_fail(MW_ERR_FORMAT, "%s: Llama and deepseek-family weights need their config.json (heads, "
                                      "key/value heads, rope_theta, experts): there is none in %s",
                       h->what, h->dir);
    if (c.arch == MW_ARCH_DEEPSEEK) return mw_hf_deepseek_inspect(h, &c, shape);
    if (!emb) return mw_fail(MW_ERR_FORMAT, "%s: tensor model.embed_tokens.weight is missing", h->what);
    if (emb->ndim != 2 || emb->shape[0] < 1 || emb->shape[1] < 1 || emb->shape[0] >= (1 << 30) ||
        emb->shape[1] >= (1 << 30))
        return mw_fail(MW_ERR_FORMAT, "%s: tensor model.embed_tokens.weight has shape %s, not [vocab, hidden]",
                       ef->path, dims_str(b1, sizeof b1, emb->ndim, emb->shape));
    /* the layers the weights have, and no biases */
    long layers = 0;
    const char *name;
    for (int i = 0; (name = mw_hf_files_name(h, i)); i++) {
        if (strncmp(name, "model.", 6) == 0 && ends_with(name, ".bias"))
            return mw_fail(MW_ERR_FORMAT, "%s: tensor %s: memwall's Llama has no biases", h->what, name);
        char *end;
        if (strncmp(name, "model.layers.", 13) == 0 && name[13] >= '0' && name[13] <= '9') {
            long l = strtol(name + 13, &end, 10);
            if (*end == '.' && l < (1 << 20) && l + 1 > layers) layers = l + 1;
        }
    }
    if (!c.n_head) return mw_fail(MW_ERR_FORMAT, "%s: no num_attention_heads", cj);
    const int C = (int)emb->shape[1], V = (int)emb->shape[0];
    if (c.n_embd && c.n_embd != C)
        return mw_fail(MW_ERR_FORMAT, "%s: hidden_size is %d, but model.embed_tokens.weight in %s has shape %s", cj,
                       c.n_embd, ef->path, dims_str(b1, sizeof b1, 2, emb->shape));
    if (c.vocab && c.vocab != V)
        return mw_fail(MW_ERR_FORMAT, "%s: vocab_size is %d, but model.embed_tokens.weight in %s has shape %s", cj,
                       c.vocab, ef->path, dims_str(b1, sizeof b1, 2, emb->shape));
    if (layers == 0) return mw_fail(MW_ERR_FORMAT, "%s: no tensor model.layers.0.*", h->what);
    if (c.n_layer && c.n_layer != layers)
        return mw_fail(MW_ERR_FORMAT, "%s: num_hidden_layers is %d, but %s has %ld layers (model.layers.0 to %ld)", cj,
                       c.n_layer, h->what, layers, layers - 1);
    if (C % c.n_head)
        return mw_fail(MW_ERR_FORMAT, "%s: hidden_size %d is not a multiple of num_attention_heads %d", cj, C,
                       c.n_head);
    if (c.head_dim && c.head_dim * c.n_head != C)
        return mw_fail(MW_ERR_FORMAT, "%s: head_dim is %d, not hidden_size / num_attention_heads = %d / %d", cj,
                       c.head_dim, C, c.n_head);
    const mw_st_tensor *gate = mw_hf_files_find(h, "model.layers.0.mlp.gate_proj.weight", NULL);
    shape->arch = MW_ARCH_LLAMA;
    shape->n_layer = (int)layers, shape->n_head = c.n_head, shape->n_embd = C, shape->vocab = V, shape->ctx = c.ctx;
    shape->n_kv_head = c.n_kv_head, shape->tied = c.tied;
    shape->ffn = c.ffn ? c.ffn : gate && gate->ndim == 2 && gate->shape[0] < (1 << 30) ? (int)gate->shape[0] : 0;
    shape->rope_theta = c.rope_theta, shape->norm_eps = c.norm_eps, shape->sliding_window = c.sliding_window;
    if (!shape->ffn) return mw_fail(MW_ERR_FORMAT, "%s: no intermediate_size, and no 2-D model.layers.0.mlp.gate_proj.weight", cj);
    /* every tensor the configuration implies, with its shape */
    char tn[128];
    int nd;
    int64_t want[2];
    for (int i = 0; llama_tensor(shape, i, tn, sizeof tn, &nd, want); i++) {
        const mw_st_file *f;
        const mw_st_tensor *t = mw_hf_files_find(h, tn, &f);
        if (!t)
            return mw_fail(MW_ERR_FORMAT, "%s: tensor %s is missing%s", h->what, tn,
                           strcmp(tn, "lm_head.weight") == 0 ? " (config.json: tie_word_embeddings is false)" : "");
        if (t->ndim != nd || t->shape[0] != want[0] || (nd == 2 && t->shape[1] != want[1]))
            return mw_fail(MW_ERR_FORMAT, "%s: tensor %s has shape %s, but config.json implies %s", f->path, tn,
                           dims_str(b1, sizeof b1, t->ndim, t->shape), dims_str(b2, sizeof b2, nd, want));
        if (t->dtype == MW_ST_OTHER)
            return mw_fail(MW_ERR_FORMAT, "%s: tensor %s is not a float tensor", f->path, tn);
    }
    return MW_OK;
}

mw_status mw_hf_inspect(const char *path, mw_hf_shape *shape) {
    memset(shape, 0, sizeof *shape);
    mw_hf_files h;
    MW_TRY(mw_hf_files_open(&h, path));
    mw_status s = mw_hf_files_find(&h, "model.embed_tokens.weight", NULL) ? inspect_llama(&h, shape)
                                                                          : inspect_gpt2(&h, shape);
    mw_hf_files_close(&h);
    if (s != MW_OK) memset(shape, 0, sizeof *shape);
    return s;
}

/* ---- load ------------------------------------------------------------------------------------ */


/* A Llama model: the checkpoint must be the model's configuration (config.json included: heads,
 * key/value heads, RoPE's theta, RMSNorm's epsilon, the tied head; ctx may differ). */
static mw_status check_llama(const mw_hf_files *h, const mw_config *mc) {
    mw_hf_shape sh;
    memset(&sh, 0, sizeof sh);
    MW_TRY(inspect_llama(h, &sh));
    if (sh.arch != mc->arch)
        return mw_fail(MW_ERR_FORMAT, "%s/config.json: its model_type is %s's, the model is %s's", h->dir,
                       sh.arch == MW_ARCH_DEEPSEEK ? "the deepseek family" : "Llama",
                       mc->arch == MW_ARCH_DEEPSEEK ? "the deepseek family" : "Llama");
    const int ds = mc->arch == MW_ARCH_DEEPSEEK, dense = !ds || !mc->n_experts || mc->first_dense;
    /* the deepseek family's too (the router's fields where the model has experts) */
    const struct {
        const char *key;
        double file, model;
    } f[] = {{"num_hidden_layers", sh.n_layer, mc->n_layer}, {"num_attention_heads", sh.n_head, mc->n_head},
             {"num_key_value_heads", sh.n_kv_head, mc->n_kv_head}, {"hidden_size", sh.n_embd, mc->n_embd},
             {"intermediate_size", sh.ffn, mc->ffn},
             {"vocab_size", sh.vocab, mc->vocab},
             {"tie_word_embeddings", sh.tied, mc->tied},       {"rope_theta", sh.rope_theta, mc->rope_theta},
             {"rms_norm_eps", sh.norm_eps, mc->norm_eps},
             {"n_routed_experts (experts)", sh.n_experts, mc->n_experts},
             {"num_experts_per_tok", sh.n_experts_tok, mc->n_experts_tok},
             {"n_shared_experts", sh.n_shared, mc->n_shared},
             {"moe_intermediate_size (Mixtral: intermediate_size)", sh.moe_ffn, mc->moe_ffn},
             {"first_k_dense_replace", sh.first_dense, mc->n_experts ? mc->first_dense : 0},
             {"scoring_func (the router: 1 sigmoid)", sh.moe_gate, mc->n_experts ? mc->moe_gate : 0},
             {"norm_topk_prob", sh.norm_topk, mc->n_experts ? mc->norm_topk : 0},
             {"routed_scaling_factor", sh.routed_scale, mc->n_experts ? mc->routed_scale : 1.0},
             {"q_lora_rank", sh.q_lora_rank, mc->q_lora_rank},
             {"kv_lora_rank", sh.kv_lora_rank, mc->kv_lora_rank},
             {"qk_rope_head_dim", sh.qk_rope_dim, mc->qk_rope_dim},
             {"qk_nope_head_dim", sh.qk_nope_dim, mc->qk_nope_dim},
             {"v_head_dim", sh.v_head_dim, mc->v_head_dim}};
    const size_t nf = ds ? sizeof f / sizeof f[0] : 9;
    for (size_t k = 0; k < nf; k++)
        if (f[k].file != f[k].model && (k != 4 || dense)) /* the dense MLP's width: unused without one */
            return mw_fail(MW_ERR_FORMAT, "%s/config.json: %s is %.17g, the model's is %.17g", h->dir, f[k].key,
                           f[k].file, f[k].model);
    if (sh.sliding_window && mc->ctx > sh.sliding_window)
        return mw_fail(MW_ERR_FORMAT, "%s/config.json: sliding_window is %d, the model's context %d: sliding-window "
                                      "attention is not supported (a context up to %d is exact)",
                       h->dir, sh.sliding_window, mc->ctx, sh.sliding_window);
    return MW_OK;
}

typedef struct tp_shard {
    const mw_model *m;
    int i;
} tp_shard;
static int tp_keep(void *ctx, uint64_t whole, size_t *local) {
    const tp_shard *sh = ctx;
    return mw_model_tp_local(sh->m, sh->i, (size_t)whole, local);
}

mw_status mw_hf_load(const char *path, mw_model *m) {
    mw_hf_files h;
    MW_TRY(mw_hf_files_open(&h, path));
    const int llama = mw_model_config(m)->arch != MW_ARCH_GPT2; /* Llama's names and layout: the deepseek family's too */
    const char *pre = llama ? "" : prefix_of(&h);
    mw_status s = llama ? check_llama(&h, mw_model_config(m))
                  : pre ? MW_OK
                        : mw_fail(MW_ERR_FORMAT, "%s: no wte.weight: not GPT-2 weights", h.what);
    if (s == MW_OK && !llama) { /* a config.json beside GPT-2 weights must ask for memwall's GPT-2 */
        mw_hf_config c;
        int found;
        s = read_config(h.dir, &c, &found, MW_ARCH_GPT2, h.what);
        const double want = c.norm_eps > 0 ? c.norm_eps : 1e-5, eps = mw_model_config(m)->norm_eps,
                     have = eps > 0 ? eps : 1e-5; /* 0: GPT-2's 1e-5 */
        char b1[32], b2[32];
        if (s == MW_OK && found && want != have)
            s = mw_fail(MW_ERR_FORMAT, "%s/config.json: layer_norm_epsilon is %s, the model's is %s", h.dir,
                        mw_hf_py_float(want, b1, sizeof b1), mw_hf_py_float(have, b2, sizeof b2));
    }
    const int tp = mw_model_tp(m) > 1; /* --tp: each rank its shard of every tensor, read whole-tensor order */
    for (int i = 0; s == MW_OK && i < mw_model_num_tensors(m); i++) {
        mw_param_info p;
        if ((s = mw_model_tensor(m, i, &p)) != MW_OK) break; /* the disk tier's read may fail */
        float *shard = p.data;
        const size_t shard_n = p.numel;
        if (tp) mw_model_tensor_whole(m, i, &p.ndim, p.dims, &p.numel);
        const mw_st_file *f;
        char full[300];
        snprintf(full, sizeof full, "%s%s", pre, p.name);
        const mw_st_tensor *t = mw_hf_files_find(&h, full, &f);
        int tr = !llama && is_conv1d(p.name, p.ndim);
        int64_t want0 = tr ? p.dims[1] : p.dims[0], want1 = tr ? p.dims[0] : p.dims[1];
        if (!t) {
            s = mw_fail(MW_ERR_FORMAT, "%s: tensor %s is missing", h.what, full);
        } else if (t->ndim != p.ndim || t->shape[0] != want0 || (p.ndim == 2 && t->shape[1] != want1)) {
            char b1[64], b2[64];
            const int64_t w[2] = {want0, want1};
            s = mw_fail(MW_ERR_FORMAT, "%s: tensor %s has shape %s, the model needs %s", f->path, t->name,
                        dims_str(b1, sizeof b1, t->ndim, t->shape), dims_str(b2, sizeof b2, p.ndim, w));
        } else if (tp) {
            tp_shard sh = {m, i};
            memset(shard, 0, shard_n * sizeof(float)); /* the vocabulary's padding rows */
            s = mw_st_read_f32_map(f, t, shard, tr, tp_keep, &sh);
        } else {
            s = mw_st_read_f32(f, t, p.data, tr);
        }
    }
    mw_hf_files_close(&h);
    return s;
}

/* ---- export ---------------------------------------------------------------------------------- */

typedef struct exporter {
    int fd, src_fd;
    const char *path, *src_path;
} exporter;

static mw_status put(exporter *x, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t k = write(x->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) return mw_fail(MW_ERR_IO, "cannot write %s: %s", x->path, strerror(errno));
        p += k;
        n -= (size_t)k;
    }
    return MW_OK;
}

/* count floats of memwall row `row`, from column col0, into dst */
static mw_status get(exporter *x, const mw_hf_src_tensor *t, uint64_t row, uint64_t col0, uint64_t count,
                     float *dst) {
    uint64_t cols = t->ndim == 2 ? (uint64_t)t->dims[1] : (uint64_t)t->dims[0];
    uint64_t at = row * cols + col0;
    if (t->mem) {
        memcpy(dst, t->mem + at, count * 4);
        return MW_OK;
    }
    for (uint64_t got = 0; got < count * 4;) {
        ssize_t k = pread(x->src_fd, (char *)dst + got, count * 4 - got, (off_t)(t->offset + at * 4 + got));
        if (k <= 0) return mw_fail(MW_ERR_IO, "cannot read %s: %s", x->src_path, k ? strerror(errno) : "unexpected end");
        got += (uint64_t)k;
    }
    return MW_OK;
}

#define XBUF (1 << 18) /* floats: 1 MiB */

static mw_status put_tensor(exporter *x, const mw_hf_src_tensor *t, float *buf) {
    if (!is_conv1d(t->name, t->ndim)) { /* as it is, in chunks */
        uint64_t n = (uint64_t)t->dims[0] * (t->ndim == 2 ? (uint64_t)t->dims[1] : 1);
        for (uint64_t i = 0; i < n; i += XBUF / 2) {
            uint64_t k = n - i < XBUF / 2 ? n - i : XBUF / 2;
            MW_TRY(get(x, t, 0, i, k, buf));
            MW_TRY(put(x, buf, k * 4));
        }
        return MW_OK;
    }
    /* (O, I) in memwall -> (I, O) on disk: read a tile of w columns from every row, write them
     * out as w rows. The tile and one output row fit the buffer. */
    uint64_t O = (uint64_t)t->dims[0], I = (uint64_t)t->dims[1];
    if (O == 0 || I == 0 || O >= XBUF / 2)
        return mw_fail(MW_ERR_ARG, "%s: tensor %s (%llu x %llu) cannot be exported", x->path, t->name,
                       (unsigned long long)O, (unsigned long long)I);
    uint64_t w = (XBUF - O) / O;
    float *row = buf + w * O;
    for (uint64_t i0 = 0; i0 < I; i0 += w) {
        uint64_t wi = I - i0 < w ? I - i0 : w;
        for (uint64_t o = 0; o < O; o++) MW_TRY(get(x, t, o, i0, wi, buf + o * wi));
        for (uint64_t i = 0; i < wi; i++) {
            for (uint64_t o = 0; o < O; o++) row[o] = buf[o * wi + i];
            MW_TRY(put(x, row, O * 4));
        }
    }
    return MW_OK;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const mw_hf_src_tensor *)a)->name, ((const mw_hf_src_tensor *)b)->name);
}

/* a finite double as Python's json writes it (repr): the fewest significant digits that read back,
 * positional from 1e-4 to below 1e16 ("50000.0", "0.0001"), else an exponent ("1e-06") */
const char *mw_hf_py_float(double v, char *b, size_t n) {
    int p = 1;
    for (; p < 17; p++) {
        snprintf(b, n, "%.*e", p - 1, v);
        if (strtod(b, NULL) == v) break;
    }
    snprintf(b, n, "%.*e", p - 1, v);
    int e = atoi(strchr(b, 'e') + 1);
    if (v == 0 || (e >= -4 && e < 16)) {
        snprintf(b, n, "%.*f", p - 1 - e > 0 ? p - 1 - e : 0, v);
        if (!strchr(b, '.')) snprintf(b + strlen(b), n - strlen(b), ".0");
    }
    return b;
}

/* config.json as transformers' LlamaConfig writes it (keys sorted as save_pretrained writes
 * them) for LlamaForCausalLM, with this model's shape; memwall's Llama is exactly that
 * architecture (no biases, silu, no RoPE scaling). */
static int llama_config_text(const mw_config *c, char *b, size_t n) {
    char theta[32], eps[32];
    return snprintf(b, n,
                    "{\n"
                    "  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n"
                    "  \"attention_bias\": false,\n"
                    "  \"attention_dropout\": 0.0,\n"
                    "  \"bos_token_id\": null,\n"
                    "  \"eos_token_id\": null,\n"
                    "  \"head_dim\": %d,\n"
                    "  \"hidden_act\": \"silu\",\n"
                    "  \"hidden_size\": %d,\n"
                    "  \"initializer_range\": 0.02,\n"
                    "  \"intermediate_size\": %d,\n"
                    "  \"max_position_embeddings\": %d,\n"
                    "  \"mlp_bias\": false,\n"
                    "  \"model_type\": \"llama\",\n"
                    "  \"num_attention_heads\": %d,\n"
                    "  \"num_hidden_layers\": %d,\n"
                    "  \"num_key_value_heads\": %d,\n"
                    "  \"pretraining_tp\": 1,\n"
                    "  \"rms_norm_eps\": %s,\n"
                    "  \"rope_scaling\": null,\n"
                    "  \"rope_theta\": %s,\n"
                    "  \"tie_word_embeddings\": %s,\n"
                    "  \"torch_dtype\": \"float32\",\n"
                    "  \"use_cache\": true,\n"
                    "  \"vocab_size\": %d\n"
                    "}\n",
                    c->n_embd / c->n_head, c->n_embd, c->ffn, c->ctx, c->n_head, c->n_layer, c->n_kv_head,
                    mw_hf_py_float(c->norm_eps, eps, sizeof eps), mw_hf_py_float(c->rope_theta, theta, sizeof theta),
                    c->tied ? "true" : "false", c->vocab);
}

/* config.json as Hugging Face's GPT-2 has it (GPT2Config, keys sorted as save_pretrained writes
 * them), with this model's shape and LayerNorm epsilon (1e-05 unless imported with another);
 * memwall's GPT-2 is exactly that architecture (tanh GELU, tied embeddings, MLP width 4C). */
static int config_text(const mw_config *c, char *b, size_t n) {
    if (c->arch == MW_ARCH_LLAMA) return llama_config_text(c, b, n);
    if (c->arch == MW_ARCH_DEEPSEEK) return mw_hf_deepseek_config_text(c, b, n);
    char eot[16], eps[32];
    if (c->norm_eps > 0) mw_hf_py_float(c->norm_eps, eps, sizeof eps);
    else snprintf(eps, sizeof eps, "1e-05");
    if (c->vocab > 50256) snprintf(eot, sizeof eot, "50256");
    else snprintf(eot, sizeof eot, "null"); /* no GPT-2 end-of-text token (a byte vocabulary) */
    return snprintf(b, n,
                    "{\n"
                    "  \"activation_function\": \"gelu_new\",\n"
                    "  \"architectures\": [\n    \"GPT2LMHeadModel\"\n  ],\n"
                    "  \"attn_pdrop\": 0.1,\n"
                    "  \"bos_token_id\": %s,\n"
                    "  \"embd_pdrop\": 0.1,\n"
                    "  \"eos_token_id\": %s,\n"
                    "  \"initializer_range\": 0.02,\n"
                    "  \"layer_norm_epsilon\": %s,\n"
                    "  \"model_type\": \"gpt2\",\n"
                    "  \"n_ctx\": %d,\n"
                    "  \"n_embd\": %d,\n"
                    "  \"n_head\": %d,\n"
                    "  \"n_inner\": null,\n"
                    "  \"n_layer\": %d,\n"
                    "  \"n_positions\": %d,\n"
                    "  \"reorder_and_upcast_attn\": false,\n"
                    "  \"resid_pdrop\": 0.1,\n"
                    "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                    "  \"scale_attn_weights\": true,\n"
                    "  \"summary_activation\": null,\n"
                    "  \"summary_first_dropout\": 0.1,\n"
                    "  \"summary_proj_to_labels\": true,\n"
                    "  \"summary_type\": \"cls_index\",\n"
                    "  \"summary_use_proj\": true,\n"
                    "  \"tie_word_embeddings\": true,\n"
                    "  \"torch_dtype\": \"float32\",\n"
                    "  \"use_cache\": true,\n"
                    "  \"vocab_size\": %d\n"
                    "}\n",
                    eot, eot, eps, c->ctx, c->n_embd, c->n_head, c->n_layer, c->ctx, c->vocab);
}

/* src copied to the new file dst (mode 0644) through buf (XBUF floats), synced */
static mw_status copy_synced(const char *src, const char *dst, float *buf) {
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0) return mw_fail(MW_ERR_IO, "cannot open %s: %s", src, strerror(errno));
    exporter x = {open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), -1, dst, NULL};
    mw_status s = x.fd < 0 ? mw_fail(MW_ERR_IO, "cannot create %s: %s", dst, strerror(errno)) : MW_OK;
    while (s == MW_OK) {
        ssize_t k = read(in, buf, XBUF * sizeof(float));
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) s = mw_fail(MW_ERR_IO, "cannot read %s: %s", src, strerror(errno));
        if (k <= 0) break;
        s = put(&x, buf, (size_t)k);
    }
    if (s == MW_OK && fsync(x.fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", dst, strerror(errno));
    if (x.fd >= 0 && close(x.fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", dst, strerror(errno));
    close(in);
    return s;
}

/* mw_hf_export_tensors: see hf.h. */
mw_status mw_hf_export_tensors(mw_hf_src_tensor *t, int n, const char *out_arg, int src_fd, const char *src_path,
                               const mw_config *cfg, const mw_hf_tokfiles *tf) {
    char out[1200], dir[1100];
    size_t al = strlen(out_arg);
    struct stat ost;
    if (al == 0 || al > 1000) return mw_fail(MW_ERR_ARG, "export: the output path is empty or too long");
    if (cfg->arch == MW_ARCH_DEEPSEEK) MW_TRY(mw_hf_deepseek_exportable(cfg));
    if (out_arg[al - 1] == '/' || (stat(out_arg, &ost) == 0 && S_ISDIR(ost.st_mode))) {
        snprintf(dir, sizeof dir, "%.*s", (int)(out_arg[al - 1] == '/' && al > 1 ? al - 1 : al), out_arg);
        snprintf(out, sizeof out, "%s/model.safetensors", dir);
    } else {
        resolve(out_arg, out, sizeof out, dir, sizeof dir);
        if (!dir[0]) snprintf(dir, sizeof dir, "/");
    }
    for (int k = 0; k < MW_HF_TOK_NAMES; k++) {
        int writes = 0;
        for (int i = 0; tf && i < tf->n; i++) writes |= strcmp(tf->dst[i], mw_hf_tok_names[k]) == 0;
        char p[1200];
        struct stat pst;
        snprintf(p, sizeof p, "%s/%s", dir, mw_hf_tok_names[k]);
        if (!writes && stat(p, &pst) == 0)
            return mw_fail(MW_ERR_ARG, "export: %s is there already and this export does not write it (%s): "
                                       "--init hf: would read it as the model's tokenizer; remove it or export "
                                       "elsewhere",
                           p, tf && tf->n ? "its tokenizer has other files" : "it writes no tokenizer");
    }
    MW_TRY(mw_mkdirs(dir));
    qsort(t, (size_t)n, sizeof *t, cmp_name);
    size_t cap = 256 + (size_t)n * 400, len = 0;
    char *h = malloc(cap);
    float *buf = malloc(XBUF * sizeof(float));
    if (!h || !buf) {
        free(h), free(buf);
        return mw_fail(MW_ERR_NOMEM, "out of memory");
    }
    len += (size_t)snprintf(h + len, cap - len, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        int tr = is_conv1d(t[i].name, t[i].ndim);
        uint64_t numel = (uint64_t)t[i].dims[0] * (t[i].ndim == 2 ? (uint64_t)t[i].dims[1] : 1);
        if (t[i].ndim == 2)
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],", t[i].name,
                                    tr ? t[i].dims[1] : t[i].dims[0], tr ? t[i].dims[0] : t[i].dims[1]);
        else
            len += (size_t)snprintf(h + len, cap - len, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],", t[i].name,
                                    t[i].dims[0]);
        len += (size_t)snprintf(h + len, cap - len, "\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                                (unsigned long long)(off + numel * 4));
        off += numel * 4;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while ((8 + len) % 8) h[len++] = ' ';
    char tmp[1300], ctmp[1200], cpath[1200], ctext[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", out, (int)getpid());
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    snprintf(ctmp, sizeof ctmp, "%s/.config.json.tmp.%d", dir, (int)getpid());
    exporter x = {open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644), src_fd, tmp, src_path};
    mw_status s = MW_OK;
    if (x.fd < 0) {
        s = mw_fail(MW_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    } else {
        unsigned char l8[8];
        for (int i = 0; i < 8; i++) l8[i] = (unsigned char)((uint64_t)len >> 8 * i);
        s = put(&x, l8, 8);
        if (s == MW_OK) s = put(&x, h, len);
        for (int i = 0; s == MW_OK && i < n; i++) s = put_tensor(&x, &t[i], buf);
        if (s == MW_OK && fsync(x.fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", tmp, strerror(errno));
        if (close(x.fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", tmp, strerror(errno));
        exporter c = {-1, -1, ctmp, NULL};
        if (s == MW_OK && (c.fd = open(ctmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
            s = mw_fail(MW_ERR_IO, "cannot create %s: %s", ctmp, strerror(errno));
        if (c.fd >= 0) {
            s = put(&c, ctext, (size_t)config_text(cfg, ctext, sizeof ctext));
            if (s == MW_OK && fsync(c.fd) != 0) s = mw_fail(MW_ERR_IO, "cannot sync %s: %s", ctmp, strerror(errno));
            if (close(c.fd) != 0 && s == MW_OK) s = mw_fail(MW_ERR_IO, "cannot close %s: %s", ctmp, strerror(errno));
        }
        char ttmp[2][1200], tpath[2][1200];
        const int nt = tf ? tf->n : 0;
        for (int i = 0; i < nt; i++) {
            snprintf(ttmp[i], sizeof ttmp[i], "%s/.%s.tmp.%d", dir, tf->dst[i], (int)getpid());
            snprintf(tpath[i], sizeof tpath[i], "%s/%s", dir, tf->dst[i]);
            if (s == MW_OK) s = copy_synced(tf->src[i], ttmp[i], buf);
        }
        if (s == MW_OK && rename(tmp, out) != 0)
            s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", tmp, out, strerror(errno));
        if (s == MW_OK && rename(ctmp, cpath) != 0)
            s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", ctmp, cpath, strerror(errno));
        for (int i = 0; s == MW_OK && i < nt; i++)
            if (rename(ttmp[i], tpath[i]) != 0)
                s = mw_fail(MW_ERR_IO, "cannot rename %s to %s: %s", ttmp[i], tpath[i], strerror(errno));
        if (s == MW_OK) s = mw_sync_dir(dir);
        if (s != MW_OK) {
            unlink(tmp), unlink(ctmp);
            for (int i = 0; i < nt; i++) unlink(ttmp[i]);
        }
    }
    free(h);
    free(buf);
    return s;
}

mw_status mw_hf_export(const mw_model *m, const char *out) {
    if (mw_model_plan(m)->offload == MW_OFFLOAD_ALL) /* the tensors are in memory a block at a time */
        return mw_fail(MW_ERR_ARG, "cannot export a model whose parameters are on the disk tier (--offload all) "
                                   "from memory: save a checkpoint and export that (memwall export --ckpt)");
    int n = mw_model_num_tensors(m);
    mw_hf_src_tensor *t = calloc((size_t)n, sizeof *t);
    if (!t) return mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        mw_param_info p;
        mw_model_tensor(m, i, &p);
        t[i] = (mw_hf_src_tensor){p.name, p.ndim, {p.dims[0], p.dims[1]}, p.data, 0};
    }
    mw_status s = mw_hf_export_tensors(t, n, out, -1, NULL, mw_model_config(m), NULL);
    free(t);
    return s;
}
