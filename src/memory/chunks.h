/* Chunk-level placement of model states (--offload's explicit forms, issue 35): which block's
 * parameters, gradients and optimizer state live on the disk tier, one mask per block.
 *
 * The forms (docs/memory.md, "The disk tier"):
 *   MODE:resident=K                MODE (optimizer, optimizer+grads or all) for the blocks
 *                                  0 .. L-K-1; the last K blocks keep every state in memory
 *   params=R,grads=R,optim=R       per category (any of the three, each once, any order) the
 *                                  blocks R on disk: all, none, A-B or A (0-based, inclusive)
 * The optimizer state of the tensors before and after the blocks (embeddings, head, final norm)
 * is on disk when any block's is; their parameters and gradients stay in memory. */
#ifndef MW_CHUNKS_H
#define MW_CHUNKS_H
#include <stddef.h>

#include "memwall.h"

/* A block's mask: its categories on disk */
enum { MW_CHUNK_P = 1, MW_CHUNK_G = 2, MW_CHUNK_O = 4 };

/* 1 when s is one of the forms above (not a plain mode), else 0. */
int mw_chunks_is_form(const char *s);
/* Parses form s for a model of L blocks into blk[0 .. L-1] (L < 0: the syntax alone, blk unused)
 * and *widest (the mw_offload_mode that names the categories it puts on disk: all when any
 * parameters, optimizer+grads when any gradients, optimizer when any optimizer state, else none).
 * MW_ERR_ARG with one line naming what is wrong. */
mw_status mw_chunks_parse(const char *s, int L, unsigned char *blk, int *widest);
/* The per-category form of blk[0 .. L-1] ("params=0-3,grads=0-11,optim=all"), when each
 * category's blocks on disk are one range (else the first range and ... : never for auto's). */
void mw_chunks_text(const unsigned char *blk, int L, char *out, size_t n);
#endif
