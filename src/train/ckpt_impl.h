/* Internal: what the checkpoint's two halves share, the single-process writer and reader
 * (checkpoint.c: the format, its meta text, walk, verify, latest) and the multi-rank paths
 * (ckpt_ranks.c: --tp, --zero, --pp). The format is described at the top of checkpoint.c. */
#ifndef MW_CKPT_IMPL_H
#define MW_CKPT_IMPL_H
#include <stddef.h>
#include <stdint.h>

#include "../graph/model.h"
#include "checkpoint.h"

#define VERSION 1   /* AdamW's checkpoints, as before other optimizers */
#define VERSION2 2  /* every other optimizer's */
#define SREC 16
#define HEADER 32
#define TRAILER 24
#define REC 24
#define MAX_META (1 << 20)
#define MAX_TENSORS (1 << 20)
#define BUF (1 << 20)
static const char END[8] = {'M', 'W', 'C', 'K', 'E', 'N', 'D', 0};

static inline void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> 8 * i);
}
static inline void put64(unsigned char *p, uint64_t v) {
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}
static inline uint32_t get32(const unsigned char *p) {
    return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

/* A file written in order: its offset, and the chain of every CRC written (the trailer's). */
typedef struct mw_ckpt_writer {
    int fd;
    const char *path;
    uint64_t off;
    uint32_t chain; /* crc of every crc written */
} mw_ckpt_writer;

/* The end of the checkpoint file tmp open at fd, whose bytes before it are at and whose CRCs chain
 * to chain: the trailer (written at byte at), fsync, close, rename to final, and dir synced, so that
 * final is a whole file or nothing. fd is closed whatever happens; MW_ERR_IO naming the step that
 * failed (tmp is left for the caller to remove). Every writer ends with it: one process's, --zero's,
 * --tp's, a pipeline's stage 0. */
mw_status mw_ckpt_finish(int fd, const char *tmp, const char *final, const char *dir, uint64_t at, uint32_t chain);
/* n bytes of buf into w; MW_ERR_IO naming w->path on failure. */
mw_status mw_ckpt_wr(mw_ckpt_writer *w, const void *buf, size_t n);
/* crc's 4 bytes into w, chained into w->chain. */
mw_status mw_ckpt_wr_crc(mw_ckpt_writer *w, uint32_t crc);

/* The header and the configuration text (meta, 4096 B; its length *mlen_out) of a checkpoint of
 * c's model (nt tensors) at st. MW_ERR_ARG when the text does not fit. */
mw_status mw_ckpt_head_text_of(const mw_config *c, int nt, const mw_run_state *st, uint64_t train_tokens,
                               unsigned char h[HEADER], char meta[4096], int *mlen_out);
/* ... of m's checkpoint at st */
mw_status mw_ckpt_head_text(const mw_model *m, const mw_run_state *st, uint64_t train_tokens, unsigned char h[HEADER],
                            char meta[4096], int *mlen_out);
/* Tensor t's record (its bytes: *len) into r */
void mw_ckpt_tensor_rec(const mw_param_info *t, unsigned char r[REC + 256], size_t *len);

/* --tp (ckpt_ranks.c): every tensor gathered whole to rank 0, which writes the single-process
 * file (collective over m's tensor-parallel group). */
mw_status mw_ckpt_save_tp(const char *dir, mw_model *m, const mw_run_state *st, uint64_t train_tokens, char *path,
                          size_t path_len);
/* --pp (ckpt_ranks.c): a stage's run of a single-process checkpoint (collective over the stages). */
mw_status mw_ckpt_load_stage(const char *path, mw_model *m, mw_ckpt_info *info, int params_only);
#endif
