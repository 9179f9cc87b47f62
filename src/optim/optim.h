/* The optimizers (docs/optimizers.md): AdamW, 8-bit AdamW, 4-bit Adam, Adafactor, CAME and SGD, as
 * passes over the flat parameter buffer.
 *
 * An optimizer's state is up to two per-element arrays, M and V, of 32, 8 or 4 bits per element
 * (each indexed like the flat buffer; the disk tier can hold them) and a small state that always
 * stays in memory (block scales, factored rows and columns, 1-D second moments), checkpointed with
 * them, plus per-step scratch (sums, new scales). A step is npasses passes over the elements in
 * order; pass k reads the arrays rd[k] and writes wr[k] (bits MW_OA_*). The caller streams each pass
 * in chunks [lo, hi) of any size (in memory: one chunk), calling mw_opt_chunk for each and
 * mw_opt_end_pass after each pass. Every sum is taken in fixed pieces that continue across
 * chunks, and maxima are exact, so the result does not depend on the chunking or the threads. */
#ifndef MW_OPTIM_H
#define MW_OPTIM_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

enum { MW_OA_G = 0, MW_OA_P, MW_OA_M, MW_OA_V }; /* the same indices as the disk tier's arrays */
#define MW_OA_BIT(a) (1u << (a))
#define MW_OPT_MAXPASS 4
#define MW_OPT_PIECE 65536 /* a tensor's sums of squares: pieces of this many elements from its first */
#define MW_OPT_BLOCK8 2048 /* adamw8bit: elements per scale */
#define MW_OPT_BLOCK4 128  /* adam4bit: elements per scale */
enum { MW_OPT_JOIN_NONE = 0, MW_OPT_JOIN_MAX, MW_OPT_JOIN_CHAIN };

extern const float mw_qmap_signed8[256], mw_qmap_unsigned8[256], mw_qmap_signed4[16], mw_qmap_linear4[16];

typedef struct mw_opt_tensor {
    size_t offset, numel;
    int rows, cols; /* cols 0: a 1-D tensor of rows elements */
    int decay;
    /* --tp (src/optim/optim_tp.c): split 0, the tensor is whole; MW_OPT_SHARD_ROWS, it is rank's
     * rows of each of `groups` equal groups of the whole tensor's grows rows, per rows of each
     * (rows beyond a group's are padding: the vocabulary's); MW_OPT_SHARD_COLS, its columns
     * [rank cols, (rank + 1) cols) of gcols. The small state and the scratch are laid out by the
     * whole tensor's dims (one process's layout), the per-element arrays by the shard's. */
    int split, grows, gcols, groups, per, rank;
} mw_opt_tensor;
enum { MW_OPT_SHARD_ROWS = 1, MW_OPT_SHARD_COLS = 2 };

typedef struct mw_opt_hp {
    double lr, beta1, beta2, beta3, eps, eps2, weight_decay, clip_threshold, decay_rate, momentum;
    float coef; /* the clipping coefficient, applied to the gradient first */
    int t;      /* 1-based step */
} mw_opt_hp;

typedef struct mw_opt_layout {
    int kind;    /* mw_optim */
    size_t n;    /* flat elements */
    int ntensors;
    mw_opt_tensor *t;
    int bits[2];                /* M, V: bits per element (0: the optimizer has none) */
    uint64_t state_bytes;       /* the small state (checkpointed) */
    uint64_t scratch_bytes;     /* per step */
    int npasses;
    unsigned rd[MW_OPT_MAXPASS], wr[MW_OPT_MAXPASS];
    int zero_pass;              /* the pass that zeroes the gradients (the last reading them) */
    size_t *st_off, *sc_off;    /* per tensor: its small state (floats) and scratch (doubles) */
    /* How the shards of the elements (--zero 1 to 3, src/dist/zero.c) join pass k's results before
     * mw_opt_end_pass: MW_OPT_JOIN_NONE, elementwise, nothing to join; _MAX, the scratch's first
     * max_floats floats are non-negative maxima (new scales, row and column maxima): their maximum
     * over the shards, exact in any order; _CHAIN, the pass's sums run element after element
     * through the scratch (and the small state it updates per element, a 1-D tensor's V): each
     * shard continues from the one before it, in element order, as one process does chunk by chunk. */
    int join[MW_OPT_MAXPASS];
    size_t max_floats;
    size_t nblocks;             /* the quantised first moment's blocks (adamw8bit: also V's) */
    size_t maxcols;             /* adam4bit: the widest 2-D tensor's columns ... */
    int nthreads;               /* ... and the threads whose column maxima the scratch holds */
    int tp;                     /* --tp: the ranks the shards' whole tensors are divided over (1: none) */
} mw_opt_layout;

/* The layout of cfg's optimizer over n flat elements holding the tensors t (copied). */
mw_status mw_opt_layout_init(mw_opt_layout *L, const mw_config *cfg, size_t n, int ntensors, const mw_opt_tensor *t);
void mw_opt_layout_free(mw_opt_layout *L);
/* Bytes of an array of n elements of bits each. */
static inline uint64_t mw_opt_array_bytes(int bits, size_t n) { return ((uint64_t)n * (uint64_t)bits + 7) / 8; }
/* Element lo of an array of bits per element starting at base (lo even for 4 bits). */
static inline void *mw_opt_elem(void *base, int bits, size_t lo) { return (char *)base + (size_t)mw_opt_array_bytes(bits, lo); }

void mw_opt_hp_of(mw_opt_hp *hp, const mw_config *cfg, double lr, float coef, int t);

/* The floats a padded tensor of the table is rounded to for optimizer optim: 16 (64 bytes), or
 * adamw8bit's block of 2048, so that blocks tile the chunks the disk tier streams. */
size_t mw_opt_pad_quantum(int optim);
/* 1 when a chunk boundary at flat element e cuts one of the quantised optimizer's blocks (the
 * chunk on either side holds part of it), else 0. */
int mw_opt_splits(const mw_opt_layout *L, size_t e);
/* Whether pass `pass` has work when the chunks' boundaries cut no block (split 0): adamw8bit's
 * first pass only takes the maxima of blocks the chunks cut. */
int mw_opt_pass_needed(const mw_opt_layout *L, int pass, int split);

/* --tp: how a rank's shards join pass k's statistics over the ranks before mw_opt_end_pass
 * (src/dist/tp_optim.c does it): MW_OPT_TPJ_MAX, the maximum of the scratch's first max_floats
 * floats (exact); MW_OPT_TPJ_SUMS, for each shard i (split != 0) of a factored tensor, its row and
 * column sums (mw_opt_tp_sums), and for each shard, its pieces of the sum of squares collapsed
 * into one (mw_opt_tp_collapse) then summed, in rank order. */
enum { MW_OPT_TPJ_NONE = 0, MW_OPT_TPJ_MAX, MW_OPT_TPJ_SUMS, MW_OPT_TPJ_PIECES };
int mw_opt_tp_join(const mw_opt_layout *L, int pass);
/* MW_OPT_TPJ_SUMS: tensor i's row and column sums in the scratch (*n doubles; NULL when it has
 * none); MW_OPT_TPJ_PIECES: its pieces collapsed into the first (returned; the others zero). */
double *mw_opt_tp_sums(const mw_opt_layout *L, void *scratch, int i, size_t *n);
double *mw_opt_tp_collapse(const mw_opt_layout *L, void *scratch, int i);
/* The whole tensor's element of shard t's element k, or SIZE_MAX for a padding row's. */
size_t mw_opt_tp_whole_index(const mw_opt_tensor *t, size_t k);

/* Before pass 0 of a step: clears the step's sums and maxima. */
void mw_opt_begin(const mw_opt_layout *L, const mw_opt_hp *hp, void *state, void *scratch);
/* Pass `pass` over elements [lo, hi): p, g at element lo (NULL where the pass does not read them),
 * m, v at element lo of their arrays (mw_opt_elem). */
void mw_opt_chunk(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, size_t lo, size_t hi, float *p, float *g,
                  void *m, void *v, void *state, void *scratch);
/* After pass `pass` has seen every element. */
void mw_opt_end_pass(const mw_opt_layout *L, const mw_opt_hp *hp, int pass, void *state, void *scratch);
#endif
