/* memwall: the command-line front end. One option table drives parsing and --help.
 * Exit codes: 0 success, 1 usage or runtime error, 2 the plan does not fit --budget. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/arena.h"
#include "../core/rng.h"
#include "../core/status.h"
#include "../dist/comm_mpi.h"
#include "cli.h"
#include "memwall.h"

typedef struct opt_def {
    const char *name;
    enum kind kind;
    size_t off;
    int cmds;
    const char *help;
} opt_def;

#define C_(f) offsetof(opts, cfg.f)
#define O_(f) offsetof(opts, f)
#define MODEL (CMD_TRAIN | CMD_BENCH | CMD_ESTIMATE | CMD_PLAN)
#define TEXT (CMD_PREPARE | CMD_TOKENIZE | CMD_DETOKENIZE | CMD_SAMPLE | CMD_EVAL)
#define LOADS (CMD_SAMPLE | CMD_EVAL) /* commands that load a trained model */
#define EVERY (MODEL | TEXT | CMD_EXPORT) /* every command */
static const opt_def OPTS[] = {
    {"preset", K_PRESET, O_(preset), MODEL, "model preset: gpt2-tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-175b; llama-tiny, smollm-135m, smollm-360m, smollm-1.7b, tinyllama-1.1b, llama2-7b, llama3-8b, llama2-70b, llama3-70b; moe-tiny, mla-tiny, deepseek-v2-lite, deepseek-v3, mixtral-8x7b (docs/moe.md)"},
    {"arch", K_ARCH, C_(arch), MODEL, "model family: gpt2, llama or deepseek (overrides the preset's; the shape flags then apply)"},
    {"layers", K_INT, C_(n_layer), MODEL, "number of transformer blocks (overrides the preset)"},
    {"heads", K_INT, C_(n_head), MODEL | LOADS, "attention heads (with --init: needed when no config.json gives n_head)"},
    {"dim", K_INT, C_(n_embd), MODEL, "embedding width C"},
    {"vocab", K_INT, C_(vocab), MODEL, "vocabulary size"},
    {"ctx", K_INT, C_(ctx), MODEL, "position-table rows (maximum sequence length)"},
    {"kv-heads", K_INT, C_(n_kv_head), MODEL, "llama: key/value heads, for grouped-query attention (default --heads)"},
    {"ffn", K_INT, C_(ffn), MODEL, "llama: SwiGLU hidden width (default 8/3 x --dim rounded up to 256)"},
    {"rope-theta", K_DBL, C_(rope_theta), MODEL, "llama: rotary embedding base (default 10000; Llama 3: 500000)"},
    {"tied", K_INT, C_(tied), MODEL, "llama: 1 when the LM head is the embedding matrix, 0 for its own (default: the preset's: llama-tiny, tinyllama-1.1b and the Llama 2/3 presets are untied, the SmolLM presets tied; --arch llama on a GPT-2 preset: untied, as Hugging Face's LlamaConfig)"},
    {"experts", K_INT, C_(n_experts), MODEL, "deepseek: routed experts per mixture block (0: every block dense; docs/moe.md)"},
    {"experts-per-tok", K_INT, C_(n_experts_tok), MODEL, "deepseek: routed experts each token is sent to (top-k)"},
    {"shared-experts", K_INT, C_(n_shared), MODEL, "deepseek: shared experts every token passes through (one SwiGLU of this many x --moe-ffn)"},
    {"moe-ffn", K_INT, C_(moe_ffn), MODEL, "deepseek: an expert's SwiGLU hidden width"},
    {"first-dense", K_INT, C_(first_dense), MODEL, "deepseek: the first blocks with a dense SwiGLU MLP of --ffn instead of experts"},
    {"capacity-factor", K_DBL, C_(capacity_factor), MODEL, "deepseek: each expert takes at most ceil(CF x tokens x top-k / experts) of a micro-batch's tokens, later ones over it dropped (docs/moe.md); 0: no cap"},
    {"moe-gate", K_INT, C_(moe_gate), MODEL, "deepseek: router scores: 0 softmax over the experts (DeepSeek-V2, Mixtral), 1 sigmoid with a choosing bias (DeepSeek-V3)"},
    {"norm-topk", K_INT, C_(norm_topk), MODEL, "deepseek: 1 divides a token's top-k weights by their sum"},
    {"routed-scale", K_DBL, C_(routed_scale), MODEL, "deepseek: factor on the routed experts' weights (DeepSeek-V3: 2.5)"},
    {"q-lora-rank", K_INT, C_(q_lora_rank), MODEL, "deepseek, latent attention: q's bottleneck (0: none)"},
    {"kv-lora-rank", K_INT, C_(kv_lora_rank), MODEL, "deepseek: the key/value latent's width; > 0 makes attention multi-head latent attention (0: grouped-query)"},
    {"qk-rope-dim", K_INT, C_(qk_rope_dim), MODEL, "deepseek, latent attention: the rotated part of a q/k head (k's shared by the heads)"},
    {"qk-nope-dim", K_INT, C_(qk_nope_dim), MODEL, "deepseek, latent attention: the unrotated part of a q/k head"},
    {"v-head-dim", K_INT, C_(v_head_dim), MODEL, "deepseek, latent attention: a value head's width"},
    {"batch", K_INT, C_(batch), MODEL, "sequences per micro-batch B"},
    {"batch", K_INT, C_(batch), CMD_EVAL, "sequences per batch (0: the checkpoint's --batch; 1 with --init)"},
    {"seq", K_INT, C_(seq), MODEL, "tokens per sequence T"},
    {"seq", K_INT, C_(seq), CMD_EVAL, "tokens per sequence (0: the checkpoint's --seq; with --init its ctx, at most 1024)"},
    {"accum", K_INT, C_(accum), MODEL, "micro-batches accumulated per optimizer step (with --zero: per rank; the step's global batch is ranks x accum x batch)"},
    {"zero", K_INT, C_(zero), CMD_TRAIN | CMD_ESTIMATE | CMD_PLAN, "data parallelism over the ranks mpirun starts (the MPI build): ZeRO stage 0 (every rank holds every state), 1 (each rank holds the optimizer state of its shard, for every --optim), 2 (and the gradients' sum of its shard, the blocks' passing through one slot) or 3 (and the parameters of its shard, each block gathered into a slot before its forward and its backward); the same bits for any stage and any number of ranks at the same ranks x --accum (docs/zero.md)"},
    {"tp", K_INT, C_(tp), MODEL, "a parallel layout's tensor-parallel ranks T: each holds 1/T of the matrices (column-parallel qkv and fc, row-parallel proj and fc2, a vocab-parallel embedding and head, as Megatron-LM) and of the heads' and MLP's values; train runs it under mpirun -np T x P x D, with --pp P and D = ranks / (T P) data-parallel replicas (--zero 0 to 3 over them), each rank with its own --offload scratch file and --recompute auto's one choice (with --pp: one per stage, its ranks agreeing, joined into one blocks:... value; with --ep: planned by estimate and plan only; docs/cluster.md, docs/parallel.md)"},
    {"pp", K_INT, C_(pp), MODEL, "a parallel layout's pipeline stages P: stage s holds its blocks (the embedding on the first, the head on the last) and the activations of the min(P - s, --microbatches) micro-batches it has in flight under 1F1B; train runs it on mpirun -np P x D ranks (D data-parallel replicas under --zero 0 to 3; a tied embedding's gradient formed on the first stage; docs/parallel.md)"},
    {"dp", K_INT, O_(layout_dp), MODEL, "a parallel layout's data-parallel ranks D (--world = T x P x D), sharded inside each tensor x pipeline group as --zero says"},
    {"sp", K_FLAG, C_(sp), MODEL, "with --tp: sequence parallelism, the norms' and residual's values divided over the T ranks too (Korthikanti et al.)"},
    {"ep", K_INT, C_(ep), MODEL, "a parallel layout's expert-parallel ranks (dividing --dp and the routed experts; the deepseek family): each holds experts/E of every MoE block, ZeRO shards them over --dp/E ranks (docs/cluster.md)"},
    {"vpp", K_INT, C_(vpp), MODEL, "with --pp: model chunks per stage under Megatron's interleaved 1F1B (--layers divisible by --pp x --vpp, --microbatches by --pp); stage s holds chunks s, s + P, ..."},
    {"microbatches", K_INT, O_(microbatches), MODEL, "a parallel layout's micro-batches per step (what --accum is without one), run by the pipeline under 1F1B"},
    {"pp-layers", K_STR, O_(pp_layers), MODEL, "with --pp: an uneven split of the blocks over the stages, e.g. 1,2,2,3 (summing to --layers), or auto (the split whose largest stage's planned peak is least, printed); default an even split"},
    {"search", K_FLAG, O_(search), CMD_ESTIMATE, "the layouts of --world GPUs (tensor x pipeline, plain or interleaved x data x expert parallel x ZeRO stage x recomputation x --sp) whose every rank's plan fits --device-mem or --gpu after the fixed costs, ranked by the cost model's step time, and why each other was dropped; exit 2 when none fits (docs/cluster.md)"},
    {"global-batch", K_INT, O_(global_batch_i), CMD_ESTIMATE, "with --search: sequences per step (default --world x --batch); micro-batches per step = this / (--batch x dp)"},
    {"tflops", K_DBL, O_(tflops), CMD_ESTIMATE, "with --search: the device's peak TFLOP/s (default --gpu's, BF16 or TF32 by --precision)"},
    {"mfu", K_DBL, O_(mfu), CMD_ESTIMATE, "with --search: the fraction of the peak a step reaches (default 0.4, an assumption)"},
    {"intra-bw", K_DBL, O_(intra_bw), CMD_ESTIMATE, "with --search: GB/s one way between GPUs of a node (default --gpu's NVLink / 2)"},
    {"inter-bw", K_DBL, O_(inter_bw), CMD_ESTIMATE, "with --search: GB/s one way per GPU between nodes (default --gpu's network)"},
    {"gpus-per-node", K_INT, O_(gpus_per_node), CMD_ESTIMATE, "with --search: GPUs per node (default 8)"},
    {"top", K_INT, O_(top), CMD_ESTIMATE, "with --search: the fitting layouts shown (default 5)"},
    {"comm-timeout", K_DBL, O_(comm_timeout), CMD_TRAIN, "under mpirun (--zero, --tp, --pp): seconds a rank waits for the others in one exchange, send or receive before it concludes that one stopped and exits (0: forever)"},
    {"world", K_INT, C_(world), CMD_ESTIMATE | CMD_PLAN, "with --zero: the number of ranks to plan for (estimate answers without MPI); with --tp/--pp/--dp: the layout's ranks, T x P x D; each running as many threads as a rank of `mpirun -np N` takes on this machine unless --threads says otherwise (OpenMPI binds each of 2 ranks or fewer to one core: 1 thread; more ranks share the CPUs)"},
    {"steps", K_INT, C_(steps), MODEL, "optimizer steps (bench: timed steps)"},
    {"warmup", K_INT, C_(warmup), CMD_TRAIN, "learning-rate warm-up steps"},
    {"warmup", K_INT, O_(bench_warmup), CMD_BENCH, "untimed warm-up steps"},
    {"lr", K_DBL, C_(lr), MODEL, "peak learning rate (unless given: --optim adafactor and came 1.5e-4, sgd 0.1)"},
    {"min-lr-frac", K_DBL, C_(min_lr_frac), MODEL, "final learning rate as a fraction of --lr"},
    {"weight-decay", K_DBL, C_(weight_decay), MODEL, "weight decay of 2-D weights (AdamW family, Adafactor, CAME: decoupled; sgd: L2)"},
    {"beta1", K_DBL, C_(beta1), MODEL, "first-moment decay (Adafactor: 0 keeps no first moment)"},
    {"beta2", K_DBL, C_(beta2), MODEL, "second-moment decay (AdamW family, CAME)"},
    {"eps", K_DBL, C_(eps), MODEL, "epsilon (Adafactor, CAME: eps1, added to g^2)"},
    {"grad-clip", K_DBL, C_(grad_clip), MODEL, "clip the global gradient norm to this (0: off)"},
    {"precision", K_PRECISION, 0, MODEL, "matrix products' precision: fp32, or bf16 (bfloat16 operands, fp32 accumulation: the FMA family's bits on every CPU, vdpbf16ps where it has AVX512_BF16; AMX tiles with their own bits under --kernel amx, or auto where faster; the checkpoint records which); the norms' outputs, q|k|v, the attention output, the MLP's values and the blocks' gradients are stored as bf16 (the deepseek family's too, latent attention's and the experts' included; docs/precision.md); the weights (fp32 master, rounded as products pack them) and optimizer state stay as they are"},
    {"precision", K_PRECISION, 0, CMD_EVAL, "the matrix products' precision: fp32 or bf16 (default: the checkpoint's, printed; fp32 with --init); --precision fp32 evaluates a bf16-trained model at full precision"},
    {"optim", K_OPTIM, 0, MODEL, "optimizer (docs/optimizers.md): adamw, adamw8bit (8-bit blockwise states), adam4bit (4-bit states), adafactor (factored second moment), came, sgd; each gives the flags it uses its own defaults unless they are given"},
    {"momentum", K_DBL, C_(momentum), MODEL, "sgd: momentum (0: none, no state)"},
    {"beta3", K_DBL, C_(beta3), MODEL, "came: the confidence's decay"},
    {"eps2", K_DBL, C_(eps2), MODEL, "came: the residual's epsilon"},
    {"clip-threshold", K_DBL, C_(clip_threshold), MODEL, "adafactor, came: update clipping threshold (RMS)"},
    {"decay-rate", K_DBL, C_(decay_rate), MODEL, "adafactor: second-moment decay exponent (beta2 of step t = 1 - t^rate)"},
    {"reset-optimizer", K_FLAG, O_(reset_optim), CMD_TRAIN, "with --resume: keep the parameters and the step, start the optimizer's state from zero (to continue under another --optim)"},
    {"seed", K_U64, C_(seed), MODEL | CMD_SAMPLE, "seed of initialisation and data sampling (sample: of sampling)"},
    {"threads", K_INT, C_(threads), MODEL | TEXT, "OpenMP threads (0: all cores; at most 1024)"},
    {"budget", K_SIZE, C_(budget), MODEL, "memory budget, e.g. 512MiB, 2GiB (0: none)"},
    {"recompute", K_RECOMPUTE, 0, MODEL, "activation recomputation: none, selective, full, every:K, every:sqrt, auto (needs --budget; with --zero or --tp the ranks agree on one; not with --tp and --pp), or blocks:LETTERS (n/s/f per block); not given, --offload auto with --budget chooses it (auto; not under --zero)"},
    {"offload", K_OFFLOAD, 0, MODEL, "model states on disk, in a scratch file in --offload-dir streamed by asynchronous I/O (the same bits): none, optimizer (the optimizer's per-parameter state: AdamW's moments, 8-bit or 4-bit codes, ...), optimizer+grads (and the gradients), all (and the parameters; the embeddings' and the head's too, one process without --zero/--tp/--pp; under bf16 their fp32 gradients stay in memory), MODE:resident=K (MODE's states of all but the last K blocks and the head), params=R,grads=R,optim=R (per category the chunks R on disk: parts joined by +, each all, none, embed, head, A-B or A: blocks from 0), auto (fills --budget with the chunks, the embeddings' and head's among the blocks', that save the most transfer per byte, the fastest by predicted step time; under --zero the fastest mode; without --recompute, and without --zero, it chooses the recomputation too)"},
    {"act-offload", K_ACT_OFFLOAD, 0, MODEL, "kept activations on disk, in the disk tier's file in --offload-dir (the same bits): none, checkpoints (each block's input, what recomputation keeps between blocks), all (every value a block keeps for its backward), auto (the least of these that fits --budget); written behind the forward pass and read back ahead of the backward op that needs them, through planned staging buffers (docs/memory.md)"},
    {"act-compress", K_ACT_COMPRESS, 0, MODEL, "kept activations stored quantised: none, 8, 4 or 2 bits per value, in groups of 256 with their own min and scale, stochastic rounding seeded from --seed (changes the numbers, the same bits for any threads, recomputation, --offload, --act-offload, --zero and number of ranks at the same ranks x --accum); the values a model declares tolerant (linear layers', norms' and GELU/SwiGLU inputs, q|k|v, the attention output), never the softmax statistics or the norms' statistics (docs/memory.md); refused with --tp/--sp/--pp/--ep"},
    {"group-rows", K_INT, C_(group_rows), MODEL, "GPT-2 under --recompute full (fp32): rows per group of a recomputed block's MLP, whose forward and backward (LayerNorm, fc, GELU, fc2) run over this many rows at a time so that the 4C-wide values of one group are alive, not of every row; the same bits for any value (docs/memory.md); rounded up to a whole chunk of the quantiser (65536 values over C); where B x T spans fewer than two groups the MLP runs ungrouped; 0: 1024"},
    {"act-compress-max", K_ACT_COMPRESS_MAX, 0, MODEL, "with --recompute auto: let it choose per block, for each value the block keeps for its backward, to keep it, compress it (at 8 bits down to this width: none, 8, 4 or 2), swap it (with --act-offload auto) or recompute it, by the least predicted step time that fits --budget; without it auto never compresses (compression changes the numbers, swapping and recomputation do not); estimate and plan print the choice per value and block and the pins (--recompute blocks:..., --act-layers) that give it again (docs/memory.md)"},
    {"act-layers", K_ACT_LAYERS, 0, MODEL, "the stored activations pinned per block, as --recompute auto prints them: one comma-separated token per block, k (keep), x (swap the block input) or a (swap every kept value), each optionally followed by 8, 4 or 2 (compress the tolerant kept values at that width), e.g. x8,x8,k; with a policy per block (--recompute none, selective, full or blocks:...)"},
    {"offload-dir", K_STR, O_(offload_dir), MODEL, "folder of the disk tier's scratch file (preallocated before step 1, removed at exit); part of the budget: a file larger than its free space does not fit"},
    {"data", K_STR, O_(data), CMD_TRAIN, "token set PREFIX: PREFIX.manifest.json's shards, or PREFIX.train.bin and PREFIX.val.bin"},
    {"data", K_STR, O_(data), CMD_VERIFY, "token set PREFIX (or give PREFIX alone: memwall verify PREFIX), or a token file FILE.bin"},
    {"data", K_STR, O_(data), CMD_EVAL, "token file FILE.bin, or PREFIX (reads PREFIX.val.bin)"},
    {"eval-every", K_INT, C_(eval_every), CMD_TRAIN, "validation loss every N steps (and at the end)"},
    {"eval-batches", K_INT, C_(eval_batches), CMD_TRAIN | CMD_EVAL, "micro-batches per validation (eval: at most; 0: all)"},
    {"json-log", K_STR, O_(json_log), CMD_TRAIN, "write one JSON object per step to FILE (loss, lr, ms, grad_norm, and the step's clock in ms: compute_ms, io_busy_ms, io_read_ms, io_write_ms, io_wait_ms)"},
    {"log-every", K_INT, O_(log_every), CMD_TRAIN, "print a progress line every N steps (0: auto)"},
    {"out", K_STR, O_(ckpt_dir), CMD_TRAIN, "checkpoint directory (saved at the end and every --save-every)"},
    {"save-every", K_INT, C_(save_every), CMD_TRAIN, "save a checkpoint every N steps (0: only at the end)"},
    {"keep", K_INT, C_(keep), CMD_TRAIN, "keep the newest K checkpoints in --out"},
    {"resume", K_STR, O_(resume), CMD_TRAIN, "continue from a checkpoint file or directory, or 'auto' (newest valid in --out)"},
    {"override", K_STR, O_(override), CMD_TRAIN, "with --resume: let these flags differ from the checkpoint (KEY[,KEY...], names without dashes, e.g. steps)"},
    {"init", K_STR, O_(init), CMD_TRAIN | LOADS, "start from hf:PATH (Hugging Face GPT-2, Llama, DeepSeek-V2/V3 or Mixtral weights: model.safetensors, a sharded index.json, or their directory; docs/hf.md)"},
    {"stop-at", K_INT, O_(stop_at), CMD_TRAIN, "stop (and save) after this step; --steps still sets the schedule"},
    {"json", K_FLAG, O_(json), CMD_BENCH | CMD_EVAL | CMD_ESTIMATE | CMD_PLAN, "print one JSON line with the results"},
    {"published", K_FLAG, O_(published), CMD_ESTIMATE, "print the published memory figures (ZeRO's Table 1, DeepSpeed's estimators, Korthikanti et al.'s activations, Megatron-LM's theoretical memory, DeepSeek-V3 in the Megatron-Core MoE report) beside their reproduction from each source's formula, with the sources and why memwall's own count differs (docs/cluster.md), and exit; takes no other option"},
    {"gpu", K_STR, O_(gpu), CMD_ESTIMATE, "a GPU of the table in docs/cluster.md (a100-80g, a100-40g, h100-80g, h200, l40s): print its memory, peak FLOP/s and links, and the fixed costs the plan does not see (CUDA context, NCCL buffers, allocator fragmentation), each with its source, as separate lines beside the plan, never in it"},
    {"device-mem", K_SIZE, O_(device_mem), CMD_ESTIMATE, "the device's memory, e.g. 80GiB or 80GB (GiB = 2^30, GB = 10^9 bytes): the fixed-costs lines of --gpu taken from it (alone: without a GPU's other figures; 0: none)"},
    {"timeline", K_STR, O_(timeline), CMD_PLAN, "draw memory over one step, stacked by category, as FILE.svg; with --pp: the stages' 1F1B schedule, stages as lanes (docs/parallel.md)"},
    {"tokenizer", K_STR, O_(tokenizer), TEXT, "bytes (vocab 256, as gpt2-tiny), gpt2 (GPT-2 BPE, vocab 50257), or PATH: a Hugging Face tokenizer.json or its directory (Llama 2/3: data/llama2, data/llama3); sample, eval: auto (the model's)"},
    {"vocab-dir", K_STR, O_(vocab_dir), TEXT, "GPT-2 vocabulary (encoder.json + vocab.bpe, or tokenizer.json); default data/gpt2"},
    {"in", K_STR, O_(in), CMD_PREPARE, "input: a text file, a directory (one document per file), a quoted glob ('corpus/*.txt') or '-' (stdin); give --in again for more, all into one set (a file two --in reach is refused; names of one file in a folder or glob, as links, are read once)"},
    {"shard-tokens", K_U64, O_(shard_tokens), CMD_PREPARE, "tokens per shard: a set larger than one shard is written as PREFIX.train.000.bin, ... and PREFIX.manifest.json (given: always so, even for one shard)"},
    {"append", K_FLAG, O_(append), CMD_PREPARE, "add the input's documents to the existing set PREFIX as new shards (the old ones are not rewritten; same tokenizer required)"},
    {"split-blank-lines", K_FLAG, O_(split_blank), CMD_PREPARE, "documents are separated by blank lines"},
    {"skip-unreadable", K_FLAG, O_(skip_unreadable), CMD_PREPARE, "with --in DIR: skip the files that cannot be opened (a dangling link, no permission), counting them, instead of stopping at the first"},
    {"memory", K_SIZE, O_(prep_memory), CMD_PREPARE, "the most memory prepare uses (peak RSS), e.g. 256MiB, 2GiB: it reads, tokenizes and writes in pieces that fit, whatever the input's size, counting the tokenizer's word cache; a long document (a file, or a blank-line-separated piece) goes in parts with the ids of the whole; one word (a run of letters, spaces, ... the tokenizer does not split) longer than the memory lets a thread merge is refused"},
    {"prompt", K_STR, O_(prompt), CMD_SAMPLE, "text to continue (default: a document start)"},
    {"tokens", K_INT, O_(gen_tokens), CMD_SAMPLE, "tokens to generate"},
    {"temperature", K_DBL, O_(temperature), CMD_SAMPLE, "softmax temperature (0: greedy)"},
    {"top-k", K_INT, O_(top_k), CMD_SAMPLE, "sample among the k most likely tokens (0: all)"},
    {"top-p", K_DBL, O_(top_p), CMD_SAMPLE, "sample within the smallest set of probability >= p (1: all)"},
    {"out", K_STR, O_(out), CMD_PREPARE, "output prefix: writes PREFIX.train.bin and PREFIX.val.bin, or a sharded set (--shard-tokens)"},
    {"ckpt", K_STR, O_(ckpt), CMD_EXPORT | LOADS, "checkpoint file, or a directory (its newest valid checkpoint)"},
    {"format", K_STR, O_(format), CMD_EXPORT, "output format: safetensors (Hugging Face GPT-2 or Llama, as the checkpoint's model)"},
    {"out", K_STR, O_(out), CMD_EXPORT, "output file, or a directory (gets model.safetensors); config.json goes beside it, missing directories are created"},
    {"tokenizer", K_STR, O_(tokenizer), CMD_EXPORT, "the tokenizer written beside config.json (docs/hf.md): auto (the checkpoint's: GPT-2's vocab.json + merges.txt from --vocab-dir, Llama 2/3's tokenizer.json from data/llama2, data/llama3, none for bytes), PATH (a tokenizer.json or its directory; it must be the checkpoint's), or none"},
    {"vocab-dir", K_STR, O_(vocab_dir), CMD_EXPORT, "GPT-2 vocabulary for --tokenizer auto (encoder.json + vocab.bpe, or tokenizer.json); default data/gpt2"},
    {"val-fraction", K_DBL, O_(val_fraction), CMD_PREPARE, "fraction of the tokens kept for validation: the end of the stream (of each --append part)"},
    {"progress", K_STR, O_(progress), CMD_TRAIN | CMD_BENCH | CMD_EVAL | CMD_PREPARE, "progress lines: auto (redrawn in place on a terminal, a line at a time elsewhere and always under mpirun, whose ranks write to a pseudo-terminal even when the output is a file), plain (a line at a time), tty (in place), none (train: only the steps with a validation loss and the last)"},
    {"kernel", K_STR, O_(kernel), EVERY, "compute kernel: auto (the best this CPU runs), portable, avx2, avx512, avx512bf16 (the FMA family: all give the same bits), amx (bf16 products on AMX tiles, with their own bits; fp32 ones as avx512); auto runs bf16 products on amx where the CPU has AMX-BF16 and it is faster, fp32 ones never; MEMWALL_KERNEL=NAME sets the default"},
};
#define NOPTS (sizeof OPTS / sizeof OPTS[0])
_Static_assert(NOPTS <= CLI_MAX_OPTS, "opts.given holds one name per option table entry at most");

#define MAX_THREADS 1024 /* --threads, as mw_config_validate allows */

/* The defaults of a command's options, before the command line. */
static void set_defaults(opts *o, int mask) {
    memset(o, 0, sizeof *o);
    mw_config_default(&o->cfg);
    o->preset = "gpt2-tiny";
    o->bench_warmup = 2;
    o->val_fraction = 0.05;
    o->comm_timeout = 900;
    o->prep_memory = 256ull << 20;
    o->shard_tokens = 1ull << 28;
    o->tokenizer = "bytes"; /* one rule: bytes unless --tokenizer gpt2; a loaded model decides */
    o->format = "safetensors";
    o->gen_tokens = 200;
    o->temperature = 1.0;
    o->top_p = 1.0;
    o->kernel = "auto";
    o->progress = "auto";
    if (mask & (LOADS | CMD_EXPORT)) o->tokenizer = "auto";
    if (mask & CMD_EVAL) o->cfg.eval_batches = 0, o->cfg.batch = 0, o->cfg.seq = 0;
}

/* The value placeholder of an option in help: by its kind, or for strings from this table. */
static const struct {
    const char *name;
    int cmds;
    const char *meta;
} METAS[] = {
    {"data", CMD_TRAIN, "PREFIX"},      {"data", CMD_EVAL | CMD_VERIFY, "FILE|PREFIX"}, {"out", CMD_TRAIN, "DIR"},
    {"out", CMD_PREPARE, "PREFIX"},     {"out", CMD_EXPORT, "FILE"},       {"json-log", ~0, "FILE"},
    {"resume", ~0, "FILE|DIR|auto"},    {"init", ~0, "hf:PATH"},           {"timeline", ~0, "FILE.svg"},
    {"tokenizer", ~0, "NAME"},          {"vocab-dir", ~0, "DIR"},          {"in", ~0, "FILE|DIR|-"},
    {"prompt", ~0, "TEXT"},             {"ckpt", ~0, "FILE|DIR"},          {"format", ~0, "NAME"},
    {"kernel", ~0, "NAME"},             {"progress", ~0, "MODE"},             {"offload-dir", ~0, "DIR"},
    {"gpu", ~0, "NAME"},                {"pp-layers", ~0, "N,N,..."},
};
static const char *placeholder(const opt_def *d, int mask) {
    switch (d->kind) {
    case K_INT:
    case K_U64: return "N";
    case K_DBL: return "X";
    case K_SIZE: return "SIZE";
    case K_PRESET: return "NAME";
    case K_ARCH: return "NAME";
    case K_RECOMPUTE: return "POLICY";
    case K_OFFLOAD: return "MODE";
    case K_ACT_OFFLOAD: return "MODE";
    case K_ACT_COMPRESS: return "BITS";
    case K_ACT_COMPRESS_MAX: return "BITS";
    case K_ACT_LAYERS: return "TOKENS";
    case K_OPTIM: return "NAME";
    case K_PRECISION: return "NAME";
    case K_FLAG: return "";
    case K_STR: break;
    }
    for (size_t i = 0; i < sizeof METAS / sizeof METAS[0]; i++)
        if (strcmp(METAS[i].name, d->name) == 0 && (METAS[i].cmds & d->cmds & mask)) return METAS[i].meta;
    return "VALUE";
}

/* The default of an option as help prints it, read from the defaults at the option's offset;
 * "" when it has none (flags, strings without a default). */
static void format_default(const opts *o, const opt_def *d, char *buf, size_t n) {
    const void *p = (const char *)o + d->off;
    static const char *RECOMPUTE[] = {"none", "selective", "full", "every", "auto", "blocks"};
    buf[0] = 0;
    switch (d->kind) {
    case K_INT: snprintf(buf, n, "%d", *(const int *)p); break;
    case K_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case K_SIZE: { /* as a size is written: 256MiB, 2GiB (what --budget and --memory take) */
        const uint64_t v = *(const uint64_t *)p;
        if (v && v % (1ull << 30) == 0) snprintf(buf, n, "%lluGiB", (unsigned long long)(v >> 30));
        else if (v && v % (1ull << 20) == 0) snprintf(buf, n, "%lluMiB", (unsigned long long)(v >> 20));
        else snprintf(buf, n, "%llu", (unsigned long long)v);
        break;
    }
    case K_DBL: snprintf(buf, n, "%g", *(const double *)p); break;
    case K_STR:
    case K_PRESET:
        if (*(const char *const *)p) snprintf(buf, n, "%s", *(const char *const *)p);
        break;
    case K_RECOMPUTE:
        if (o->cfg.recompute >= 0 && o->cfg.recompute < (int)(sizeof RECOMPUTE / sizeof RECOMPUTE[0]))
            snprintf(buf, n, "%s", RECOMPUTE[o->cfg.recompute]);
        break;
    case K_ARCH: snprintf(buf, n, "%s", mw_arch_name(o->cfg.arch)); break;
    case K_OFFLOAD: snprintf(buf, n, "%s", o->cfg.offload_spec[0] ? o->cfg.offload_spec : mw_offload_name(o->cfg.offload)); break;
    case K_ACT_OFFLOAD: snprintf(buf, n, "%s", mw_act_offload_name(o->cfg.act_offload)); break;
    case K_ACT_COMPRESS:
        if (o->cfg.act_compress) snprintf(buf, n, "%d", o->cfg.act_compress);
        else snprintf(buf, n, "none");
        break;
    case K_ACT_COMPRESS_MAX:
        if (o->cfg.act_compress_max) snprintf(buf, n, "%d", o->cfg.act_compress_max);
        else snprintf(buf, n, "none");
        break;
    case K_ACT_LAYERS: snprintf(buf, n, "%.40s", o->cfg.act_layers[0] ? o->cfg.act_layers : "none"); break; /* a default: none */
    case K_OPTIM: snprintf(buf, n, "%s", mw_optim_str(o->cfg.optim)); break;
    case K_PRECISION: /* eval's default is the checkpoint's */
        if (!(d->cmds & CMD_EVAL)) snprintf(buf, n, "%s", mw_precision_str(o->cfg.precision));
        break;
    case K_FLAG: break;
    }
}

void (*die_hook)(int code);
void (*die_refuse_hook)(int code, const char *msg);
static int progress_mode; /* --progress: 0 auto, 1 plain, 2 tty, 3 none */
static int die_quiet; /* parse under mpirun, on a rank other than 0: the same refusal as rank 0's */

void die_print(const char *msg) {
    /* one line, always, and one write: stderr is unbuffered, and under mpirun a line written a
     * byte at a time is interleaved with the other ranks' output */
    char line[4 * 8192 + 16];
    size_t n = (size_t)snprintf(line, sizeof line, "memwall: ");
    for (const unsigned char *p = (const unsigned char *)msg; *p && n + 6 < sizeof line; p++)
        if (*p < 0x20 || *p == 0x7f) n += (size_t)snprintf(line + n, sizeof line - n, "\\x%02x", *p);
        else line[n++] = (char)*p;
    line[n++] = '\n';
    fwrite(line, 1, n, stderr);
}

void die(int code, const char *fmt, ...) {
    va_list ap;
    fflush(stdout); /* what was printed comes before the error, in a file or a pipe too */
    char msg[8192];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (die_refuse_hook) die_refuse_hook(code, msg); /* returns only when it leaves the message to die */
    if (!die_quiet) die_print(msg);
    if (die_hook) die_hook(code);
    /* a quiet rank leaves rank 0 time to print the refusal: mpirun stops every rank at the first
     * non-zero exit, which a quiet rank's, first, made before rank 0 had written a line */
    if (die_quiet) sleep(3);
    exit(code);
}

static void usage(FILE *f, const char *cmd, int mask) {
    if (!cmd) {
        fprintf(f, "memwall %s: train GPT-2 and Llama models inside a hard memory budget\n\n"
                   "usage: memwall COMMAND [options]\n\n"
                   "commands:\n"
                   "  train     train a model on token files (memwall train --data PREFIX)\n"
                   "  bench     time training steps on random tokens\n"
                   "  estimate  the memory a training step needs, per category, before it runs\n"
                   "  plan      memory over one step, op by op (--timeline FILE.svg)\n"
                   "  prepare   turn text (files, directories, stdin) into a token set, streamed and sharded\n"
                   "  export    write a checkpoint as Hugging Face safetensors and config.json (GPT-2, Llama)\n"
                   "  sample    generate text from a trained model (KV cache, streamed)\n"
                   "  eval      validation loss and perplexity of a model on a token file\n"
                   "  verify    check every block of a token set against its checksums (memwall verify PREFIX)\n"
                   "  tokenize  print the token ids of stdin\n"
                   "  detokenize  turn token ids on stdin back into text\n"
                   "  help CMD  the options of a command\n",
                MW_VERSION);
        return;
    }
    opts d; /* the defaults parse() starts from: help prints them, so they cannot drift */
    set_defaults(&d, mask);
    fprintf(f, "usage: memwall %s%s [options]\n\noptions:\n", cmd, mask & CMD_VERIFY ? " PREFIX|FILE.bin" : "");
    for (size_t i = 0; i < NOPTS; i++) {
        if (!(OPTS[i].cmds & mask)) continue;
        char left[64], def[96];
        const char *meta = placeholder(&OPTS[i], mask);
        snprintf(left, sizeof left, "--%s%s%s", OPTS[i].name, *meta ? " " : "", meta);
        format_default(&d, &OPTS[i], def, sizeof def);
        if (strstr(OPTS[i].help, "(default ") || strstr(OPTS[i].help, "default:")) def[0] = 0; /* it says its own */
        fprintf(f, "  %-22s %s%s%s%s\n", left, OPTS[i].help, def[0] ? " (default " : "", def, def[0] ? ")" : "");
    }
    if (mask & (CMD_ESTIMATE | CMD_PLAN))
        fprintf(f, "\n  %s also accepts every option of train (memwall help train), so that a train command line\n"
                   "  can be planned as it stands: --init gives the shape, --data is checked against the vocabulary,\n"
                   "  and the options that do not change memory are ignored.\n", cmd);
    if (mask & (CMD_PREPARE | CMD_TOKENIZE | CMD_DETOKENIZE))
        fprintf(f, "\n  The tokenizer is bytes unless --tokenizer gpt2 or PATH (a tokenizer.json) says otherwise; sample and eval follow the model.\n");
}

static void parse_value(opts *o, const opt_def *d, const char *v) {
    char *end;
    void *p = (char *)o + d->off;
    errno = 0;
    switch (d->kind) {
    case K_INT: {
        long x = strtol(v, &end, 10);
        if (*v == 0 || *end || errno || x < -2147483647L || x > 2147483647L)
            die(1, "--%s expects an integer, got '%s'", d->name, v);
        *(int *)p = (int)x;
        break;
    }
    case K_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == 0 || *v == '-' || *end || errno)
            die(1, "--%s expects a non-negative integer, got '%s'", d->name, v);
        *(uint64_t *)p = x;
        break;
    }
    case K_DBL: {
        double x = strtod(v, &end);
        if (*v == 0 || *end || errno || !isfinite(x))
            die(1, "--%s expects a number, got '%s'", d->name, v);
        *(double *)p = x;
        break;
    }
    case K_SIZE:
        if (!mw_parse_size(v, (uint64_t *)p))
            die(1, "--%s expects a size like 1073741824, 512MiB or 2GiB, got '%s'", d->name, v);
        break;
    case K_STR:
    case K_PRESET: *(const char **)p = v; break;
    case K_FLAG:
    case K_ARCH: break; /* parse() applies --arch between the preset and the shape flags */
    case K_RECOMPUTE:
        if (mw_recompute_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    case K_OFFLOAD:
        if (mw_offload_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    case K_ACT_OFFLOAD:
        if (mw_act_offload_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    case K_ACT_COMPRESS:
        if (mw_act_compress_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    case K_ACT_COMPRESS_MAX:
        if (mw_act_compress_max_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    case K_ACT_LAYERS:
        if (mw_act_layers_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    case K_OPTIM:
        if (mw_optim_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    case K_PRECISION:
        if (mw_precision_parse(&o->cfg, v) != MW_OK) die(1, "%s", mw_last_error());
        break;
    }
}

/* The compute kernel, before any compute: name (--kernel), or NULL for MEMWALL_KERNEL, else auto.
 * A bad name or one this CPU cannot run is a usage error here, not the library's fallback to auto
 * with a warning. The flag wins over the variable, with a note when they differ. */
static void choose_kernel(const char *name) {
    const char *env = getenv("MEMWALL_KERNEL");
    if (mw_kernel_set(name) != MW_OK) die(1, "%s%s", name ? "--kernel: " : "", mw_last_error());
    if (name && env && *env && strcmp(env, name) != 0)
        fprintf(stderr, "memwall: note: --kernel %s overrides MEMWALL_KERNEL=%s\n", name, env);
}

/* the deepseek family's flags */
static const char *const DS_FLAGS[] = {"experts", "experts-per-tok", "shared-experts", "moe-ffn", "first-dense",
                                       "capacity-factor", "moe-gate", "norm-topk", "routed-scale", "q-lora-rank",
                                       "kv-lora-rank", "qk-rope-dim", "qk-nope-dim", "v-head-dim"};

/* the shape options that --init hf: checks against the weights */
static const char *const SHAPE_OPTS[5] = {"layers", "heads", "dim", "vocab", "ctx"};
static const size_t SHAPE_OFF[5] = {C_(n_layer), C_(n_head), C_(n_embd), C_(vocab), C_(ctx)};

void parse(opts *o, int mask, const char *cmd, int argc, char **argv) {
    set_defaults(o, mask);
    /* the command line alone decides here, alike on every rank mpirun starts: rank 0 says it once */
    die_quiet = mw_mpi_launched_rank() > 0;
    /* estimate and plan take a train command line as it stands (see usage) */
    const int accept = mask & (CMD_ESTIMATE | CMD_PLAN) ? mask | CMD_TRAIN : mask;
    char ignored[CLI_MAX_OPTS * 32] = ""; /* ", --NAME" for distinct names (each under 28 bytes) */
    const char *arch = NULL;
    /* the preset first, so that the shape flags override it wherever they stand */
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && arch) { /* --arch switches the preset's family: its own defaults */
            const int a = strcmp(arch, "llama") == 0 ? MW_ARCH_LLAMA : strcmp(arch, "deepseek") == 0 ? MW_ARCH_DEEPSEEK : MW_ARCH_GPT2;
            if (o->cfg.arch != a) {
                o->cfg.arch = a;
                o->cfg.n_kv_head = o->cfg.ffn = 0;
                o->cfg.rope_theta = o->cfg.norm_eps = 0.0;
                o->cfg.tied = a == MW_ARCH_GPT2; /* Hugging Face's LlamaConfig: untied */
                mw_config_arch_defaults(&o->cfg); /* another family's experts and latents cleared */
                if (a != MW_ARCH_GPT2) o->cfg.n_kv_head = o->cfg.ffn = 0, o->cfg.rope_theta = o->cfg.norm_eps = 0.0;
            }
        }
        for (int i = 0; i < argc; i++) {
            const char *a = argv[i];
            if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
                usage(stdout, cmd, mask);
                exit(0);
            }
            if (strncmp(a, "--", 2) != 0) die(1, "%s: unexpected argument '%s'", cmd, a);
            const char *name = a + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const opt_def *d = NULL;
            for (size_t k = 0; k < NOPTS && !d; k++) /* the command's own entry first */
                if ((OPTS[k].cmds & mask) && strlen(OPTS[k].name) == len &&
                    strncmp(OPTS[k].name, name, len) == 0)
                    d = &OPTS[k];
            for (size_t k = 0; k < NOPTS && !d; k++)
                if ((OPTS[k].cmds & accept) && strlen(OPTS[k].name) == len &&
                    strncmp(OPTS[k].name, name, len) == 0)
                    d = &OPTS[k];
            if (d && !(d->cmds & mask) && pass == 1 && strcmp(d->name, "data") != 0 &&
                strcmp(d->name, "init") != 0 && !opt_given(o, d->name)) { /* each name once: it fits */
                size_t u = strlen(ignored);
                snprintf(ignored + u, sizeof ignored - u, "%s--%s", u ? ", " : "", d->name);
            }
            if (!d) die(1, "%s: unknown option '--%.*s' (see memwall help %s)", cmd, (int)len, name, cmd);
            if (pass == 1 && !opt_given(o, d->name)) o->given[o->n_given++] = d->name; /* one per name: fits */
            const char *v = NULL;
            if (d->kind == K_FLAG) {
                if (eq) die(1, "--%s takes no value", d->name);
                if (pass == 1) *(int *)((char *)o + d->off) = 1;
                continue;
            }
            if (eq)
                v = eq + 1;
            else if (i + 1 < argc)
                v = argv[++i];
            else
                die(1, "--%s needs a value", d->name);
            if (d->kind == K_ARCH) { /* after every --preset (pass 0 ends), before the shape flags */
                if (pass == 1) continue;
                if (strcmp(v, "gpt2") != 0 && strcmp(v, "llama") != 0 && strcmp(v, "deepseek") != 0)
                    die(1, "--arch must be gpt2, llama or deepseek (got '%s')", v);
                arch = v;
                continue;
            }
            if ((pass == 0) != (d->kind == K_PRESET)) continue;
            if (strcmp(d->name, "in") == 0 && (mask & CMD_PREPARE)) { /* repeated: every one, in order */
                if (o->n_in == (int)(sizeof o->ins / sizeof o->ins[0]))
                    die(1, "prepare: at most %d --in (give a directory or a glob)", (int)(sizeof o->ins / sizeof o->ins[0]));
                o->ins[o->n_in++] = v;
            }
            parse_value(o, d, v);
            for (int k = 0; k < 5; k++) o->shape_given |= (unsigned)(d->off == SHAPE_OFF[k]) << k;
            if (d->kind == K_PRESET && mw_config_preset(&o->cfg, v) != MW_OK)
                die(1, "%s", mw_last_error());
        }
    }
    /* the Llama fields belong to the Llama family; what its flags left unset gets the defaults */
    if (o->cfg.arch == MW_ARCH_GPT2) {
        const char *ll[] = {"kv-heads", "ffn", "rope-theta", "tied"};
        for (int k = 0; k < 4; k++)
            if (opt_given(o, ll[k]))
                die(1, "--%s is for the Llama family (--arch llama or a Llama preset)", ll[k]);
    } else {
        mw_config_arch_defaults(&o->cfg);
    }
    if (o->cfg.arch != MW_ARCH_DEEPSEEK && !o->init) { /* the experts' and the latents' flags: the deepseek
                                                          * family's (--init: apply_init_shape checks them) */
        for (size_t k = 0; k < sizeof DS_FLAGS / sizeof DS_FLAGS[0]; k++)
            if (opt_given(o, DS_FLAGS[k]))
                die(1, "--%s is for the deepseek family (--arch deepseek or a preset of it: moe-tiny, mla-tiny, "
                       "deepseek-v2-lite, deepseek-v3, mixtral-8x7b)", DS_FLAGS[k]);
    }
    /* --optim brings its hyperparameters' defaults, for the flags not given */
    if (opt_given(o, "optim")) {
        mw_config d = o->cfg;
        mw_optim_defaults(&d);
        static const struct {
            const char *flag;
            size_t off;
        } HP[] = {{"lr", offsetof(mw_config, lr)}, {"beta1", offsetof(mw_config, beta1)}, {"beta2", offsetof(mw_config, beta2)},
                  {"beta3", offsetof(mw_config, beta3)}, {"eps", offsetof(mw_config, eps)},
                  {"eps2", offsetof(mw_config, eps2)}, {"weight-decay", offsetof(mw_config, weight_decay)},
                  {"momentum", offsetof(mw_config, momentum)}, {"clip-threshold", offsetof(mw_config, clip_threshold)},
                  {"decay-rate", offsetof(mw_config, decay_rate)}};
        for (size_t k = 0; k < sizeof HP / sizeof HP[0]; k++)
            if (!opt_given(o, HP[k].flag)) memcpy((char *)&o->cfg + HP[k].off, (char *)&d + HP[k].off, sizeof(double));
    }
    layout_parse(o, mask); /* --tp, --pp, --dp, --sp, --ep: a parallel layout (layout.c) */
    if (o->search) { /* estimate --search: --world GPUs, every layout (search.c) */
        if (o->layout || opt_given(o, "zero")) die(1, "--search chooses the layout and the ZeRO stage: drop --tp/--pp/--dp/--sp/--ep/--zero/--microbatches");
        if (!opt_given(o, "world") || o->cfg.world < 1) die(1, "--search needs --world N (the GPUs)");
        o->search_world = o->cfg.world;
        o->cfg.world = 1;
        o->global_batch = o->global_batch_i;
        if (opt_given(o, "global-batch") && o->global_batch < 1) die(1, "--global-batch must be >= 1");
        if (opt_given(o, "mfu") && !(o->mfu > 0 && o->mfu <= 1)) die(1, "--mfu is a fraction of the peak, in (0, 1], got %g", o->mfu);
        /* what the search chooses or does not plan: given, it would be ignored in silence */
        static const char *const NOT_SEARCHED[] = {"recompute", "accum", "budget", "offload"};
        for (size_t k = 0; k < sizeof NOT_SEARCHED / sizeof *NOT_SEARCHED; k++)
            if (opt_given(o, NOT_SEARCHED[k]) && (k != 3 || o->cfg.offload != MW_OFFLOAD_NONE))
                die(1, "--search with --%s: drop it (the search chooses the recomputation, the micro-batches from "
                       "--global-batch, and the memory from --device-mem or --gpu; it plans no --offload)",
                    NOT_SEARCHED[k]);
        static const char *const POSITIVE[] = {"top", "gpus-per-node", "tflops", "intra-bw", "inter-bw"};
        for (size_t k = 0; k < sizeof POSITIVE / sizeof *POSITIVE; k++)
            if (opt_given(o, POSITIVE[k]) && !(k < 2 ? (k ? o->gpus_per_node : o->top) > 0
                                                     : (k == 2 ? o->tflops : k == 3 ? o->intra_bw : o->inter_bw) > 0))
                die(1, "--%s must be > 0", POSITIVE[k]);
    } else {
        static const char *const SEARCH_ONLY[] = {"global-batch", "tflops", "mfu", "intra-bw", "inter-bw", "gpus-per-node", "top"};
        for (size_t k = 0; k < sizeof SEARCH_ONLY / sizeof *SEARCH_ONLY; k++)
            if (opt_given(o, SEARCH_ONLY[k])) die(1, "--%s is for estimate --search", SEARCH_ONLY[k]);
    }
    if (!o->layout && !o->search && (opt_given(o, "zero") || opt_given(o, "world"))) { /* data parallelism */
        if (!opt_given(o, "zero")) die(1, "--world %d needs --zero STAGE (what to plan for each rank)", o->cfg.world);
        o->cfg.dp = 1;
        if (!opt_given(o, "world")) o->cfg.world = 1;
        if (o->cfg.world < 1 || o->cfg.world > (1 << 20)) die(1, "--world must be in 1..%d, got %d", 1 << 20, o->cfg.world);
    }
    /* one budget, one decision: --offload auto with --budget chooses the recomputation with the
     * placement unless --recompute is given (a resume then takes the checkpoint's, as for any flag
     * not given; finish_config drops it past the blocks auto can choose for). Not under --zero:
     * each rank would time the ops on its own and might choose another policy, which the ranks'
     * agreement check refuses */
    if (o->cfg.offload == MW_OFFLOAD_AUTO && o->cfg.budget && !opt_given(o, "recompute") && !o->cfg.dp) {
        o->cfg.recompute = MW_RECOMPUTE_AUTO;
        o->recompute_implied = 1;
    }
    /* one rule for every command: OpenMP is never asked for an absurd team (libgomp crashes) */
    if (o->cfg.threads < 0 || o->cfg.threads > MAX_THREADS)
        die(1, "--threads must be in 0..%d (0: all cores), got %d", MAX_THREADS, o->cfg.threads);
    if (ignored[0]) fprintf(stderr, "memwall: note: %s ignores %s (no effect on memory)\n", cmd, ignored);
    choose_kernel(opt_given(o, "kernel") ? o->kernel : NULL);
    static const char *const PROGRESS[] = {"auto", "plain", "tty", "none"};
    progress_mode = -1;
    for (int k = 0; k < 4; k++)
        if (strcmp(o->progress, PROGRESS[k]) == 0) progress_mode = k;
    if (progress_mode < 0) die(1, "--progress must be auto, plain, tty or none (got '%s')", o->progress);
    die_quiet = 0;
}

int opt_given(const opts *o, const char *name) {
    for (int i = 0; i < o->n_given; i++)
        if (strcmp(o->given[i], name) == 0) return 1;
    return 0;
}

/* Validates the model configuration and applies --threads. */
void finish_config(opts *o) {
    if (o->offload_dir) {
        if (!*o->offload_dir || strlen(o->offload_dir) >= sizeof o->cfg.offload_dir)
            die(1, "--offload-dir: a folder path of 1 to %zu bytes", sizeof o->cfg.offload_dir - 1);
        snprintf(o->cfg.offload_dir, sizeof o->cfg.offload_dir, "%s", o->offload_dir);
        if (o->cfg.offload == MW_OFFLOAD_NONE && o->cfg.act_offload == MW_ACT_OFFLOAD_NONE && !strpbrk(o->cfg.act_layers, "xa"))
            die(1, "--offload-dir %s without --offload or --act-offload: say what goes there (--offload optimizer or auto, --act-offload checkpoints)", o->offload_dir);
    }
    if (o->cfg.act_compress_max && o->cfg.recompute != MW_RECOMPUTE_AUTO) /* the library plans it as none */
        die(1, "--act-compress-max lets --recompute auto compress kept values: give --recompute auto (or --act-compress "
               "BITS for every block)");
    if (o->recompute_implied && o->cfg.recompute == MW_RECOMPUTE_AUTO && o->cfg.n_layer > MW_MAX_BLOCK_POLICIES)
        o->cfg.recompute = MW_RECOMPUTE_NONE, o->recompute_implied = 0;
    /* estimate and plan --zero --world N: a rank's threads as train's ranks take them by default
     * under `mpirun -np N` on this machine, OpenMPI's binding included (train has set its own
     * from its rank's CPUs already) */
    if (o->cfg.dp && o->cfg.threads == 0 && !opt_given(o, "threads")) o->cfg.threads = mw_mpi_planned_rank_cpus(o->cfg.world);
    o->cfg.threads = mw_set_threads(o->cfg.threads);
    layout_finish(o); /* --pp-layers auto: planned now that the shape is final */
}

/* --init hf:PATH of the deepseek family (DeepseekV2/V3, Mixtral): config.json gives every field
 * (mw_hf_inspect checked each tensor against it); a flag that says otherwise is refused, but for
 * --capacity-factor (no config.json has one: Hugging Face's models drop nothing) and --ctx */
static void apply_init_deepseek(opts *o, const mw_hf_shape *sh) {
    mw_config *c = &o->cfg;
    const struct {
        const char *flag;
        double *dmine;
        int *mine;
        double file;
    } f[] = {{"kv-heads", NULL, &c->n_kv_head, sh->n_kv_head},
             {"ffn", NULL, &c->ffn, sh->ffn},
             {"tied", NULL, &c->tied, sh->tied},
             {"rope-theta", &c->rope_theta, NULL, sh->rope_theta},
             {"experts", NULL, &c->n_experts, sh->n_experts},
             {"experts-per-tok", NULL, &c->n_experts_tok, sh->n_experts_tok},
             {"shared-experts", NULL, &c->n_shared, sh->n_shared},
             {"moe-ffn", NULL, &c->moe_ffn, sh->moe_ffn},
             {"first-dense", NULL, &c->first_dense, sh->first_dense},
             {"moe-gate", NULL, &c->moe_gate, sh->moe_gate},
             {"norm-topk", NULL, &c->norm_topk, sh->norm_topk},
             {"routed-scale", &c->routed_scale, NULL, sh->routed_scale},
             {"q-lora-rank", NULL, &c->q_lora_rank, sh->q_lora_rank},
             {"kv-lora-rank", NULL, &c->kv_lora_rank, sh->kv_lora_rank},
             {"qk-rope-dim", NULL, &c->qk_rope_dim, sh->qk_rope_dim},
             {"qk-nope-dim", NULL, &c->qk_nope_dim, sh->qk_nope_dim},
             {"v-head-dim", NULL, &c->v_head_dim, sh->v_head_dim}};
    for (size_t k = 0; k < sizeof f / sizeof f[0]; k++) {
        const double mine = f[k].dmine ? *f[k].dmine : *f[k].mine;
        if (opt_given(o, f[k].flag) && mine != f[k].file)
            die(1, "--%s %.17g disagrees with --init %s, whose config.json gives %.17g (drop --%s)", f[k].flag, mine,
                o->init, f[k].file, f[k].flag);
        if (f[k].dmine) *f[k].dmine = f[k].file;
        else *f[k].mine = (int)f[k].file;
    }
    c->norm_eps = sh->norm_eps;
    if (!opt_given(o, "capacity-factor")) c->capacity_factor = 0.0;
    const int ctx_given = !!(o->shape_given & 16u);
    const int windowed = sh->sliding_window && !ctx_given && c->ctx > sh->sliding_window;
    if (windowed) c->ctx = sh->sliding_window;
    if (sh->sliding_window && c->ctx > sh->sliding_window)
        die(1, "--init %s: --ctx %d is beyond config.json's sliding_window %d: sliding-window attention is not "
               "supported; pass --ctx %d or less (attention within the window is exact)",
            o->init, c->ctx, sh->sliding_window, sh->sliding_window);
    char att[96], mlp[96];
    if (sh->kv_lora_rank)
        snprintf(att, sizeof att, "MLA q=%d kv=%d rope %d nope %d v %d", sh->q_lora_rank, sh->kv_lora_rank,
                 sh->qk_rope_dim, sh->qk_nope_dim, sh->v_head_dim);
    else
        snprintf(att, sizeof att, "GQA kv heads %d", sh->n_kv_head);
    if (sh->n_experts)
        snprintf(mlp, sizeof mlp, "%d experts of %d top-%d, %d shared, %d dense (F=%d), %s%s x%g", sh->n_experts,
                 sh->moe_ffn, sh->n_experts_tok, sh->n_shared, sh->first_dense, sh->ffn,
                 sh->moe_gate ? "sigmoid" : "softmax", sh->norm_topk ? " renormalised" : "", sh->routed_scale);
    else
        snprintf(mlp, sizeof mlp, "dense F=%d", sh->ffn);
    fprintf(o->json ? stderr : stdout,
            "  init: %s: deepseek family L=%d C=%d V=%d heads %d, %s, %s, rope_theta %g, rms_norm_eps %g, %s head "
            "(config.json; every tensor agrees), ctx %d (%s)\n",
            o->init + 3, sh->n_layer, sh->n_embd, sh->vocab, sh->n_head, att, mlp, sh->rope_theta, sh->norm_eps,
            sh->tied ? "tied" : "untied", c->ctx,
            ctx_given ? "--ctx" : windowed ? "config.json's sliding_window, below max_position_embeddings" : "config.json");
}

/* --init hf:PATH: the shape comes from the weights' tensors, the head count from config.json or
 * --heads. A shape flag that disagrees with them is refused, and so is an unknown head count.
 * Llama weights: config.json gives the whole configuration (the family, key/value heads, MLP
 * width, RoPE theta, RMSNorm epsilon, the tied head), and --ctx may shorten (or lengthen) the
 * context, which no tensor fixes. */
void apply_init_shape(opts *o) {
    if (!o->init) return;
    if (strncmp(o->init, "hf:", 3) != 0)
        die(1, "--init expects hf:PATH (a Hugging Face model.safetensors, model.safetensors.index.json or their directory)");
    const char *path = o->init + 3;
    mw_hf_shape sh;
    if (mw_hf_inspect(path, &sh) != MW_OK) die(1, "%s", mw_last_error());
    const int llama = sh.arch == MW_ARCH_LLAMA, ctx_given = !!(o->shape_given & 16u);
    int heads_given = !!(o->shape_given & 2u);
    if (!sh.n_head && !heads_given)
        die(1, "--init %s: the head count is unknown (%s): pass --heads N", o->init,
            sh.config ? "its config.json has no n_head" : "no config.json beside the weights");
    int weights[5] = {sh.n_layer, sh.n_head ? sh.n_head : o->cfg.n_head, sh.n_embd, sh.vocab,
                      llama && ctx_given ? o->cfg.ctx : sh.ctx};
    int *mine[5] = {&o->cfg.n_layer, &o->cfg.n_head, &o->cfg.n_embd, &o->cfg.vocab, &o->cfg.ctx};
    for (int k = 0; k < 5; k++) {
        if ((o->shape_given >> k & 1u) && *mine[k] != weights[k])
            die(1, "--%s %d disagrees with --init %s, whose %s %d (drop --%s)", SHAPE_OPTS[k], *mine[k],
                o->init, k == 1 ? "config.json gives" : "weights give", weights[k], SHAPE_OPTS[k]);
        *mine[k] = weights[k];
    }
    o->preset = "hf";
    const int ds = sh.arch == MW_ARCH_DEEPSEEK;
    if (opt_given(o, "arch") && o->cfg.arch != sh.arch)
        die(1, "--arch %s disagrees with --init %s, whose weights are %s (drop --arch)", mw_arch_name(o->cfg.arch),
            o->init, ds ? "the deepseek family's" : llama ? "Llama's" : "GPT-2's");
    o->cfg.arch = sh.arch;
    if (ds) {
        apply_init_deepseek(o, &sh);
        return;
    }
    for (size_t k = 0; k < sizeof DS_FLAGS / sizeof DS_FLAGS[0]; k++)
        if (opt_given(o, DS_FLAGS[k]))
            die(1, "--%s is for the deepseek family: --init %s holds %s weights", DS_FLAGS[k], o->init,
                llama ? "Llama" : "GPT-2");
    if (!llama) o->cfg.n_kv_head = o->cfg.ffn = 0, o->cfg.tied = 1, o->cfg.rope_theta = 0.0, o->cfg.norm_eps = sh.norm_eps;
    if (llama) { /* the Llama fields: config.json's, and a flag that says otherwise is refused */
        const struct {
            const char *flag;
            double mine, file;
        } f[] = {{"kv-heads", o->cfg.n_kv_head, sh.n_kv_head},
                 {"ffn", o->cfg.ffn, sh.ffn},
                 {"tied", o->cfg.tied, sh.tied},
                 {"rope-theta", o->cfg.rope_theta, sh.rope_theta}};
        for (size_t k = 0; k < sizeof f / sizeof f[0]; k++)
            if (opt_given(o, f[k].flag) && f[k].mine != f[k].file)
                die(1, "--%s %.17g disagrees with --init %s, whose config.json gives %.17g (drop --%s)", f[k].flag,
                    f[k].mine, o->init, f[k].file, f[k].flag);
        /* Mistral: attention over at most sliding_window positions is full attention, so the
         * model runs exactly at a context up to the window: that context by default, and a
         * --ctx beyond it is refused */
        const int windowed = sh.sliding_window && !ctx_given && o->cfg.ctx > sh.sliding_window;
        if (windowed) o->cfg.ctx = sh.sliding_window;
        if (sh.sliding_window && o->cfg.ctx > sh.sliding_window)
            die(1, "--init %s: --ctx %d is beyond config.json's sliding_window %d: sliding-window attention is not "
                   "supported; pass --ctx %d or less (attention within the window is exact)",
                o->init, o->cfg.ctx, sh.sliding_window, sh.sliding_window);
        o->cfg.n_kv_head = sh.n_kv_head, o->cfg.ffn = sh.ffn, o->cfg.tied = sh.tied;
        o->cfg.rope_theta = sh.rope_theta, o->cfg.norm_eps = sh.norm_eps;
        fprintf(o->json ? stderr : stdout,
                "  init: %s: llama L=%d C=%d F=%d V=%d (safetensors shapes; config.json agrees), heads %d, kv heads "
                "%d, rope_theta %g, rms_norm_eps %g, %s head (config.json), ctx %d (%s)\n",
                path, sh.n_layer, sh.n_embd, sh.ffn, sh.vocab, sh.n_head, sh.n_kv_head, sh.rope_theta, sh.norm_eps,
                sh.tied ? "tied" : "untied", o->cfg.ctx,
                ctx_given ? "--ctx" : windowed ? "config.json's sliding_window, below max_position_embeddings" : "config.json");
        return;
    }
    char eps[64] = ""; /* GPT-2's 1e-5 unsaid */
    if (sh.norm_eps > 0) snprintf(eps, sizeof eps, ", layer_norm_epsilon %g (config.json)", sh.norm_eps);
    fprintf(o->json ? stderr : stdout, /* stdout holds only the JSON line then */
            "  init: %s: L=%d C=%d V=%d ctx=%d (safetensors shapes%s), heads %d (%s)%s\n", path, sh.n_layer,
           sh.n_embd, sh.vocab, sh.ctx, sh.config ? "; config.json agrees" : "", o->cfg.n_head,
           sh.n_head ? "config.json" : "--heads", eps);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int progress_tty(int fd) {
    return progress_mode == 2 || (progress_mode == 0 && isatty(fd) && mw_mpi_launched_size() == 0);
}

int progress_quiet(void) { return progress_mode == 3; }

void progress_init(progress_line *p, const char *what) {
    const char *e = getenv("MEMWALL_PROGRESS_SECONDS");
    char *end;
    double every = e && *e ? strtod(e, &end) : 10.0;
    if (e && *e && (*end || !(every >= 0))) every = 10.0;
    *p = (progress_line){.what = what, .tty = progress_tty(2), .quiet = progress_quiet(), .every = every};
    p->t0 = p->last = mono_s();
}

void progress_update(progress_line *p, long done, long total) {
    if (p->quiet) return;
    double now = mono_s();
    if (done <= 0) {
        p->t0 = p->last = now;
        p->drawn = 0;
        return;
    }
    /* a terminal's line is redrawn at most every 0.1 s (MEMWALL_PROGRESS_SECONDS may ask for more) */
    const double every = p->tty && p->every > 0.1 ? 0.1 : p->every;
    if (now - p->last < every && !(p->tty && done >= total)) return;
    double el = now - p->t0, left = el / done * (total - done);
    if (p->tty && done >= total) { /* the phase is over: erase its line */
        if (p->drawn) fprintf(stderr, "\r\033[K");
        p->drawn = 0;
    } else {
        fprintf(stderr, "%s  %s %ld/%ld (%.0f%%) | %.1f s, about %.0f s left%s", p->tty ? "\r\033[K" : "", p->what,
                done, total, 100.0 * done / total, el, left, p->tty ? "" : "\n");
        p->drawn = 1;
    }
    fflush(stderr);
    p->last = now;
}

void progress_fn(void *user, int done, int total) { progress_update(user, done, total); }

void json_num(FILE *f, const char *fmt, double v) {
    if (isfinite(v)) fprintf(f, fmt, v);
    else fputs("null", f);
}

void resolve_ckpt(const char *arg, char *path, size_t n, mw_ckpt_info *info) {
    struct stat st;
    if (stat(arg, &st) != 0) die(1, "--ckpt %s: %s", arg, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        int skipped = 0;
        if (mw_ckpt_latest(arg, path, n, info, &skipped) != MW_OK) die(1, "%s", mw_last_error());
        if (!path[0]) die(1, "--ckpt %s: no valid checkpoint there", arg);
        if (skipped) { /* never silently: the user may expect the newest */
            fflush(stdout);
            fprintf(stderr, "memwall: note: --ckpt %s: using %s; %d newer checkpoint file(s) there do not verify\n",
                    arg, path, skipped);
        }
    } else {
        snprintf(path, n, "%s", arg);
        if (mw_ckpt_verify(path, info) != MW_OK) die(1, "%s", mw_last_error());
    }
}

/* The model's name: the preset, or "custom (gpt2-tiny with --layers 96 ...)" when flags changed
 * its shape. */
static void model_label(const opts *o, char *buf, size_t n) {
    const mw_config *c = &o->cfg;
    mw_config p = *c;
    if (mw_config_preset(&p, o->preset) != MW_OK) { /* not a preset: "hf" (--init) */
        snprintf(buf, n, "%s", o->preset);
        return;
    }
    const struct { const char *flag; int want, got; } f[] = {
        {"layers", p.n_layer, c->n_layer}, {"heads", p.n_head, c->n_head}, {"dim", p.n_embd, c->n_embd},
        {"vocab", p.vocab, c->vocab},      {"ctx", p.ctx, c->ctx},         {"kv-heads", p.n_kv_head, c->n_kv_head},
        {"ffn", p.ffn, c->ffn},            {"tied", p.tied, c->tied},
        {"experts", p.n_experts, c->n_experts}, {"experts-per-tok", p.n_experts_tok, c->n_experts_tok},
        {"shared-experts", p.n_shared, c->n_shared}, {"moe-ffn", p.moe_ffn, c->moe_ffn},
        {"first-dense", p.first_dense, c->first_dense}, {"moe-gate", p.moe_gate, c->moe_gate},
        {"norm-topk", p.norm_topk, c->norm_topk}, {"q-lora-rank", p.q_lora_rank, c->q_lora_rank},
        {"kv-lora-rank", p.kv_lora_rank, c->kv_lora_rank}, {"qk-rope-dim", p.qk_rope_dim, c->qk_rope_dim},
        {"qk-nope-dim", p.qk_nope_dim, c->qk_nope_dim}, {"v-head-dim", p.v_head_dim, c->v_head_dim}};
    char with[320] = "";
    size_t u = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].want != f[i].got && u < sizeof with)
            u += (size_t)snprintf(with + u, sizeof with - u, " --%s %d", f[i].flag, f[i].got);
    if (p.arch != c->arch && u < sizeof with)
        u += (size_t)snprintf(with + u, sizeof with - u, " --arch %s", mw_arch_name(c->arch));
    if (p.rope_theta != c->rope_theta && c->arch == MW_ARCH_LLAMA && u < sizeof with)
        u += (size_t)snprintf(with + u, sizeof with - u, " --rope-theta %g", c->rope_theta);
    if (u) snprintf(buf, n, "custom (%s with%s)", o->preset, with);
    else snprintf(buf, n, "%s", o->preset);
}

void print_config(const opts *o, const char *cmd) {
    const mw_config *c = &o->cfg;
    char b[32], label[400]; /* "custom (PRESET with" and the flags model_label lists */
    model_label(o, label, sizeof label);
    /* estimate and plan show only what changes memory: no steps, seed or accumulation */
    int run = strcmp(cmd, "estimate") != 0 && strcmp(cmd, "plan") != 0;
    char llama[128] = "";
    if (c->arch == MW_ARCH_LLAMA || (c->arch == MW_ARCH_DEEPSEEK && !c->kv_lora_rank))
        snprintf(llama, sizeof llama, " KV=%d F=%d %s", c->n_kv_head, c->ffn, c->tied ? "tied" : "untied");
    else if (c->arch == MW_ARCH_DEEPSEEK)
        snprintf(llama, sizeof llama, " MLA q=%d kv=%d rope=%d nope=%d v=%d F=%d %s", c->q_lora_rank, c->kv_lora_rank,
                 c->qk_rope_dim, c->qk_nope_dim, c->v_head_dim, c->ffn, c->tied ? "tied" : "untied");
    char moe[160] = "";
    if (c->arch == MW_ARCH_DEEPSEEK && c->n_experts) {
        char cap[48] = "no capacity cap";
        if (c->capacity_factor > 0) snprintf(cap, sizeof cap, "capacity factor %g", c->capacity_factor);
        snprintf(moe, sizeof moe, " | experts %d top-%d, shared %d, of %d, %d dense first, %s", c->n_experts,
                 c->n_experts_tok, c->n_shared, c->moe_ffn, c->first_dense, cap);
    }
    printf("memwall %s | %s L=%d H=%d%s C=%d V=%d ctx=%d%s (%.2fM params", cmd, label, c->n_layer, c->n_head, llama,
           c->n_embd, c->vocab, c->ctx, moe, mw_config_num_params(c) / 1e6);
    if (c->arch == MW_ARCH_DEEPSEEK && c->n_experts)
        printf(", %.2fM active per token", mw_config_active_params(c, 1) / 1e6);
    printf(") | B=%d T=%d", c->batch, c->seq);
    if (run) printf(" accum=%d | %d step%s", c->accum, c->steps, c->steps == 1 ? "" : "s");
    printf(" | threads %d", c->threads);
    if (!run && c->dp && !opt_given(o, "threads"))
        printf(" a rank (%d rank%s of mpirun on this machine's %ld CPUs%s; --threads plans another count)", c->world,
               c->world == 1 ? "" : "s", sysconf(_SC_NPROCESSORS_ONLN),
               c->world <= 2 ? ", each bound to one core as OpenMPI binds 2 ranks or fewer" : "");
    if (run) printf(" | kernel %s", mw_kernel_get_for(c->precision));
    if (c->precision != MW_PRECISION_FP32) printf(" | precision %s", mw_precision_str(c->precision));
    if (c->dp) printf(" | --zero %d over %d rank%s", c->zero, c->world, c->world == 1 ? "" : "s");
    if (run) printf(" | seed %llu", (unsigned long long)c->seed);
    printf(" | budget %s\n", c->budget ? mw_fmt_bytes(c->budget, b, sizeof b) : "none");
    if (strcmp(cmd, "train") != 0) return;
    static const char *const NAMES[MW_OPTIM_COUNT] = {"AdamW", "8-bit AdamW", "4-bit Adam", "Adafactor", "CAME", "SGD"};
    printf("  %s lr %g (min %g, warm-up %d, cosine)", NAMES[c->optim], c->lr, c->lr * c->min_lr_frac, c->warmup);
    switch (c->optim) {
    case MW_OPTIM_SGD: printf(" momentum %g", c->momentum); break;
    case MW_OPTIM_ADAFACTOR:
        printf(" beta1 %g decay-rate %g eps %g clip-threshold %g", c->beta1, c->decay_rate, c->eps, c->clip_threshold);
        break;
    case MW_OPTIM_CAME:
        printf(" betas %g/%g/%g eps %g/%g clip-threshold %g", c->beta1, c->beta2, c->beta3, c->eps, c->eps2,
               c->clip_threshold);
        break;
    default: printf(" betas %g/%g eps %g", c->beta1, c->beta2, c->eps); break;
    }
    printf(" wd %g clip %g\n", c->weight_decay, c->grad_clip);
}

void print_plan(const mw_plan_summary *p) {
    char b[32];
    printf("  plan:");
    for (int k = 0; k < MW_CAT_COUNT; k++)
        printf(" %s %s%s", mw_category_name(k), mw_fmt_bytes(p->category[k], b, sizeof b),
               k + 1 < MW_CAT_COUNT ? "," : "");
    printf(" | peak %s", mw_fmt_bytes(p->peak, b, sizeof b));
    if (p->budget) printf(" of budget %s", mw_fmt_bytes(p->budget, b, sizeof b));
    printf(" | recompute %s\n", p->policy);
    print_act_plan(p, 0);
    if (p->disk_file) {
        char f[32], s[32];
        char on[160] = "", r[32], w[32];
        size_t u = 0;
        for (int k = 0; k < MW_CAT_COUNT; k++)
            if (p->disk[k] && u < sizeof on)
                u += (size_t)snprintf(on + u, sizeof on - u, "%s%s %s", u ? ", " : "", mw_category_name(k),
                                      mw_fmt_bytes(p->disk[k], b, sizeof b));
        if (p->act_disk && u < sizeof on)
            u += (size_t)snprintf(on + u, sizeof on - u, "%sswapped activations %s", u ? ", " : "",
                                  mw_fmt_bytes(p->act_disk, b, sizeof b));
        printf("  disk tier (--%s %s): %s in a scratch file of %s; per step %s read, %s written, streamed "
               "through %s of staging in memory\n", p->offload == MW_OFFLOAD_NONE ? p->act_pin[0] ? "act-layers" : "act-offload" : "offload",
               p->offload == MW_OFFLOAD_NONE ? p->act_pin[0] ? "per block" : mw_act_offload_name(p->act_offload) : p->offload_pin, on, mw_fmt_bytes(p->disk_file, f, sizeof f),
               mw_fmt_bytes(p->disk_read, r, sizeof r), mw_fmt_bytes(p->disk_write, w, sizeof w),
               mw_fmt_bytes(p->disk_staging, s, sizeof s));
        if (p->disk_room)
            printf("  disk tier: --offload-dir can give the file %s (free space, and stale scratch files): %s\n",
                   mw_fmt_bytes(p->disk_room, b, sizeof b), p->disk_short ? "DOES NOT FIT" : "fits");
    }
    if (p->pred_disk_s >= 0)
        printf("  disk tier: predicted %.2f s per step for its transfers (measured here: %.2f GB/s read, %.2f GB/s write)\n",
               p->pred_disk_s, p->disk_read_bw / 1e9, p->disk_write_bw / 1e9);
    if (p->pred_step_s >= 0)
        printf("  disk tier: predicted %.2f s per step with its transfers overlapping compute (compute %.2f s)\n",
               p->pred_step_s, p->pred_compute_s);
    if (p->offload_why[0]) printf("  --offload auto: %s -> %s\n", p->offload_why, p->offload_pin);
}

void print_recompute_choice(const opts *o, const mw_plan_summary *p) {
    if (o->recompute_implied && o->cfg.recompute == MW_RECOMPUTE_AUTO)
        printf("  --offload auto with --budget and no --recompute chose the recomputation too: --recompute auto -> %s "
               "(to run exactly this plan: --recompute %s)\n", p->policy, p->pin);
}

void print_offload(const mw_model *m) {
    mw_offload_report r;
    if (!mw_model_offload_info(m, &r)) return;
    char b[32];
    printf("  disk tier: %s (%s, %s, %s)\n", r.path, mw_fmt_bytes(r.file_bytes, b, sizeof b), r.engine,
           r.direct ? "O_DIRECT" : "through the page cache: this file system refuses O_DIRECT");
    if (r.note[0]) printf("  disk tier: %s\n", r.note);
    if (r.stale)
        printf("  disk tier: removed %d stale scratch file(s) of killed runs (%s)\n", r.stale,
               mw_fmt_bytes(r.stale_bytes, b, sizeof b));
}

/* Creates the model or exits: 2 when the plan does not fit the budget. */
mw_model *create_model(const opts *o) {
    mw_model *m;
    mw_status s = mw_model_create(&m, &o->cfg);
    if (s == MW_ERR_BUDGET) die(2, "%s", mw_last_error());
    if (s != MW_OK) die(1, "%s", mw_last_error());
    return m;
}

void json_categories(FILE *f, const mw_model *m) {
    uint64_t cat[MW_CAT_COUNT], peak;
    mw_model_memory(m, cat, &peak);
    fprintf(f, "\"peak_bytes\": %llu, \"peak_rss_bytes\": %llu, \"categories\": {",
            (unsigned long long)peak, (unsigned long long)mw_peak_rss());
    for (int k = 0; k < MW_CAT_COUNT; k++)
        fprintf(f, "%s\"%s\": %llu", k ? ", " : "", mw_category_name(k), (unsigned long long)cat[k]);
    fprintf(f, "}, \"recompute\": \"%s\", \"recompute_pin\": \"%s\"", mw_model_plan(m)->policy,
            mw_model_plan(m)->pin);
    if (mw_model_plan(m)->act_pin[0]) fprintf(f, ", \"act_layers_pin\": \"%s\"", mw_model_plan(m)->act_pin);
    const mw_plan_summary *p = mw_model_plan(m);
    mw_offload_report r;
    const int has = mw_model_offload_info(m, &r);
    fprintf(f, ", \"offload\": \"%s\", \"disk\": {\"file_bytes\": %llu, \"read_bytes_per_step\": %llu, "
               "\"write_bytes_per_step\": %llu, \"bytes_read\": %llu, \"bytes_written\": %llu, \"engine\": \"%s\"}",
            mw_offload_name(p->offload), (unsigned long long)p->disk_file, (unsigned long long)p->disk_read,
            (unsigned long long)p->disk_write, (unsigned long long)r.bytes_read, (unsigned long long)r.bytes_written,
            has ? r.engine : "");
    if (p->offload_pin[0] && strcmp(p->offload_pin, mw_offload_name(p->offload))) /* a chunk placement: "offload" is its widest mode */
        fprintf(f, ", \"offload_pin\": \"%s\"", p->offload_pin);
}

int main(int argc, char **argv) {
    static const struct {
        const char *name;
        int (*fn)(int, char **);
        int mask;
    } cmds[] = {{"train", cmd_train, CMD_TRAIN}, {"bench", cmd_bench, CMD_BENCH},
                {"prepare", cmd_prepare, CMD_PREPARE}, {"export", cmd_export, CMD_EXPORT},
                {"tokenize", cmd_tokenize, CMD_TOKENIZE}, {"detokenize", cmd_detokenize, CMD_DETOKENIZE},
                {"sample", cmd_sample, CMD_SAMPLE}, {"eval", cmd_eval, CMD_EVAL},
                {"estimate", cmd_estimate, CMD_ESTIMATE}, {"plan", cmd_plan, CMD_PLAN},
                {"verify", cmd_verify, CMD_VERIFY}};
    omp_default_env(argv);
    if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
        usage(argc < 2 ? stderr : stdout, NULL, 0);
        return argc < 2 ? 1 : 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        choose_kernel(NULL);
        printf("memwall %s\nkernel %s (this CPU runs %s; --kernel or MEMWALL_KERNEL chooses)\n", MW_VERSION,
               mw_kernel_get(), mw_kernels_available());
        if (strcmp(mw_kernel_get_for(MW_PRECISION_BF16), mw_kernel_get()) != 0)
            printf("bf16 products: kernel %s (the %s family's bits)\n", mw_kernel_get_for(MW_PRECISION_BF16),
                   mw_numerics_family(MW_PRECISION_BF16));
        return 0;
    }
    const char *name = argv[1];
    int help = strcmp(name, "help") == 0;
    if (help) {
        if (argc < 3) {
            usage(stdout, NULL, 0);
            return 0;
        }
        name = argv[2];
    }
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(name, cmds[i].name) == 0) {
            if (help) {
                usage(stdout, name, cmds[i].mask);
                if (fflush(stdout) != 0 || ferror(stdout)) die(1, "cannot write the output: %s", strerror(errno));
                return 0;
            }
        {
            int rc = cmds[i].fn(argc - 2, argv + 2);
            if (fflush(stdout) != 0 || ferror(stdout)) die(1, "cannot write the output: %s", strerror(errno));
            return rc;
        }
        }
    die(1, "unknown command '%s' (commands: train, bench, estimate, plan, prepare, verify, export, sample, eval, tokenize, detokenize, help)", name);
    return 1;
}
