/* The memwall CLI: shared option state and helpers. Only the CLI exits; see main.c. */
#ifndef MW_CLI_H
#define MW_CLI_H
#include <stdio.h>

#include "memwall.h"

enum {
    CMD_TRAIN = 1, CMD_BENCH = 2, CMD_PREPARE = 4, CMD_EXPORT = 8, CMD_TOKENIZE = 16,
    CMD_DETOKENIZE = 32, CMD_SAMPLE = 64, CMD_EVAL = 128, CMD_ESTIMATE = 256, CMD_PLAN = 512,
    CMD_VERIFY = 1024
};
#define CLI_MAX_OPTS 128 /* at least the entries of main.c's option table */
enum kind { K_INT, K_DBL, K_SIZE, K_U64, K_STR, K_FLAG, K_PRESET, K_RECOMPUTE, K_ARCH, K_OFFLOAD, K_OPTIM, K_PRECISION, K_ACT_OFFLOAD, K_ACT_COMPRESS, K_ACT_COMPRESS_MAX, K_ACT_LAYERS };

typedef struct opts {
    mw_config cfg;
    const char *preset, *data, *json_log, *tokenizer, *in, *out, *ckpt_dir, *resume, *init, *ckpt, *format;
    const char *vocab_dir, *prompt, *timeline, *offload_dir;
    const char *kernel;     /* --kernel NAME (parse sets the library's kernel) */
    const char *progress;   /* --progress auto|plain|tty|none (parse sets it for progress_tty) */
    const char *override;   /* train --override KEY[,KEY...] */
    /* the distinct names of the options on the command line (parse): an option given again is
     * recorded once, so this holds at most one name per entry of the option table (main.c asserts
     * that CLI_MAX_OPTS covers the table) and no option is ever dropped, however many are given */
    const char *given[CLI_MAX_OPTS];
    int n_given;
    int log_every, bench_warmup, json, stop_at, split_blank, gen_tokens, top_k, reset_optim, skip_unreadable;
    double val_fraction, temperature, top_p;
    double comm_timeout; /* train --comm-timeout: seconds a rank waits for the others at most */
    uint64_t prep_memory; /* prepare --memory: its peak RSS bound */
    uint64_t shard_tokens; /* prepare --shard-tokens: tokens per shard of a set */
    int append;            /* prepare --append */
    const char *ins[256];  /* prepare: every --in, in order */
    int n_in;
    unsigned shape_given; /* bit k: SHAPE_OPTS[k] (--layers, --heads, --dim, --vocab, --ctx) was given */
    int recompute_implied; /* --offload auto with --budget and no --recompute: recompute auto (parse) */
    int published;         /* estimate --published: the published figures' table (src/cluster) */
    const char *gpu;       /* estimate --gpu NAME: a GPU of src/cluster/gpu.c's table */
    uint64_t device_mem;   /* estimate --device-mem SIZE: the device's memory */
    /* a parallel layout (layout.c): --dp, --microbatches, --pp-layers; layout 1 when any layout
     * flag was given (--tp, --pp, --dp, --sp, --ep, --microbatches, --pp-layers) */
    int layout, layout_dp, microbatches;
    const char *pp_layers;
    /* estimate --search (search.c): the GPUs, the global batch in sequences, the device's peak
     * (TFLOP/s) and the fraction reached, the links (GB/s one way), GPUs per node, rows shown */
    int search, search_world, gpus_per_node, top;
    long global_batch;
    int global_batch_i; /* --global-batch as parsed */
    double tflops, mfu, intra_bw, inter_bw;
} opts;


/* Re-executes the process once with OMP_WAIT_POLICY=passive unless the user set OpenMP's wait
 * policy or spin count (omp_env.c says why); returns when nothing is to be done or exec fails. */
void omp_default_env(char **argv);
/* Called by die before it exits, when set (a data-parallel run aborts every rank). */
extern void (*die_hook)(int code);
/* Called by die with its message, when set: --zero's refusal before the run starts (train.c), which
 * exits, or returns to let die print and exit as usual. */
extern void (*die_refuse_hook)(int code, const char *msg);
/* Prints "memwall: <msg>" on stderr as one line (control characters escaped). */
void die_print(const char *msg);
/* Prints "memwall: <message>" on stderr and exits with code. */
void die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Parses the options of one command (mask) into o, with defaults; exits on a bad option. */
void parse(opts *o, int mask, const char *cmd, int argc, char **argv);
/* Whether option --name was on the command line. */
int opt_given(const opts *o, const char *name);
/* Validates the model configuration and applies --threads. */
void finish_config(opts *o);
/* --init hf:PATH: the shape comes from the weights. */
void apply_init_shape(opts *o);
/* --ckpt: a checkpoint file (verified), or a directory's newest valid one; exits if none. */
void resolve_ckpt(const char *arg, char *path, size_t n, mw_ckpt_info *info);
void print_config(const opts *o, const char *cmd);
void print_plan(const mw_plan_summary *p);
/* The plan's stored activations (src/cli/actplan.c): one line (table 0) or a table per class of
 * value; nothing without --act-offload or --act-compress. JSON: an object. */
void print_act_plan(const mw_plan_summary *p, int table);
void json_act_plan(FILE *f, const mw_plan_summary *p);
/* The timeline's stored activations as their own categories: the compressed bytes drawn over the
 * activations' band (inside it), the swapped bytes on disk as an outlined band above the stack (out
 * of memory); legend entries at (lx, ly) when there are any. */
void svg_act_bands(FILE *f, const mw_plan_op *ops, int n, double left, double top, double ph, double bw, double ymax,
                   double lx, double ly);
/* When --offload auto chose the recomputation too (opts.recompute_implied): a line saying what. */
void print_recompute_choice(const opts *o, const mw_plan_summary *p);
/* The disk tier of a created model, when it has one: its file, engine and what it removed. */
void print_offload(const mw_model *m);
/* Creates the model or exits: 2 when the plan does not fit the budget. */
mw_model *create_model(const opts *o);
void json_categories(FILE *f, const mw_model *m);
/* A JSON number with fmt, or null when v is not finite. */
void json_num(FILE *f, const char *fmt, double v);

/* Progress of a long phase (validation, eval, bench) on stderr, never on stdout: on a terminal one
 * line updated in place and erased at the end; elsewhere a line every MEMWALL_PROGRESS_SECONDS
 * (default 10; 0: every unit), so that short phases print nothing. */
typedef struct progress_line {
    const char *what;
    int tty, drawn, quiet; /* quiet: --progress none */
    double every, t0, last;
} progress_line;
void progress_init(progress_line *p, const char *what);
/* --progress (train, bench, eval, prepare): auto (a terminal on fd draws in place; under mpirun,
 * whose ranks write to a pseudo-terminal even when its output is a file, never), plain (a line at a
 * time), tty (in place), none (no progress). progress_tty: whether fd's progress draws in place;
 * progress_quiet: whether there is none. */
int progress_tty(int fd);
int progress_quiet(void);
/* done = 0 starts the phase; done = total ends it. */
void progress_update(progress_line *p, long done, long total);
/* An mw_progress_fn: user is a progress_line. */
void progress_fn(void *user, int done, int total);
/* Tokenizer identities (tokid.c). hf_tokenizer: the tokenizer of the Hugging Face model at PATH
 * of family arch and vocabulary vocab into *id: from tokenizer files beside the weights (returned,
 * the caller frees it), else GPT-2's for a GPT-2 model of exactly 50257 tokens (GPT-2 itself),
 * else unknown (name ""); src (may be NULL) says which. warn_unrecorded: a warning on stderr when d (may be NULL) is a version-1 token file.
 * check_data_tokenizer: exits 1 naming both when d's tokenizer and the model's (who) differ.
 * train_tokenizer: train's check of the data against the resumed checkpoint (ckpt, info) or the
 * --init weights; sets o->cfg.tokenizer, which checkpoints record, and writes its line into line. */
typedef struct mw_tokenizer mw_tokenizer;
/* The GPT-2 vocabulary directory (textcmd.c): --vocab-dir, $MEMWALL_VOCAB_DIR, ./data/gpt2, or
 * data/gpt2 beside the memwall binary's build/ directory (in buf, n bytes, when that one). */
const char *vocab_dir(const opts *o, char *buf, size_t n);
mw_tokenizer *hf_tokenizer(const char *path, int arch, int vocab, mw_tokenizer_id *id, char *src, size_t n);
void warn_unrecorded(const mw_data *d);
void check_data_tokenizer(const mw_data *d, const mw_tokenizer_id *model, const char *who);
void train_tokenizer(opts *o, const mw_data *train, const mw_data *val, const char *ckpt, const mw_ckpt_info *info,
                     char *line, size_t n); /* line: its "  tokenizer: ...\n", printed by the caller after the header */

int cmd_train(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_prepare(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_detokenize(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_estimate(int argc, char **argv);
int cmd_plan(int argc, char **argv);
/* Parallel layouts (layout.c). layout_parse: checks the layout flags against each other and the
 * model (clear one-line refusals, exit 1; train and bench refuse them) and sets o->cfg's. layout_report:
 * estimate and plan of every distinct rank; returns the exit code (2 when a rank does not fit). */
void layout_parse(opts *o, int mask);
/* --pp-layers auto: the split chosen from the stages' plans (src/cli/ppsplit.c), printed, and this
 * rank's stage set; called by finish_config once the shape is final (nothing to do otherwise). */
void layout_finish(opts *o);
/* plan --pp P --timeline FILE.svg: the stages' 1F1B schedule drawn (src/cli/pipesvg.c), its bubble printed */
void layout_pipeline_svg(const mw_config *c, const int *blocks, const char *path, int json); /* json: the line on stderr */
int layout_report(const opts *o, int cmd_plan);
/* estimate --search: every layout of --world GPUs, ranked; returns 2 when none fits. */
int search_report(const opts *o);
#endif
