/* Chunk-level placement of model states (--offload's explicit forms, issue 35): which block's
 * parameters, gradients and optimizer state live on the disk tier, one mask per block.
 *
 * The forms (docs/memory.md, "The disk tier"):
 *   MODE:resident=K                MODE (optimizer, optimizer+grads or all) for the blocks
 *                                  0 .. L-K-1 and the embeddings (K < L); the last K blocks keep
 *                                  every state in memory, and the head with them (K >= 1)
 *   params=R,grads=R,optim=R       per category (any of the three, each once, any order) the
 *                                  chunks R on disk: parts joined by +, each all (every block and
 *                                  both ends), none, embed, head, A-B or A (blocks, 0-based,
 *                                  inclusive): params=embed+0-3+head
 * The ends are the tensors before the blocks (embed: the token embedding, GPT-2's positions) and
 * after them (head: the final norm and an untied LM head); a tied LM head is the embedding. */
#ifndef MW_CHUNKS_H
#define MW_CHUNKS_H
#include <stddef.h>

#include "memwall.h"

/* A block's mask: its categories on disk */
enum { MW_CHUNK_P = 1, MW_CHUNK_G = 2, MW_CHUNK_O = 4 };
/* An end's category named by embed or head (not by all): MW_CHUNK_NAMED << c for category bit c */
#define MW_CHUNK_NAMED 8u

/* 1 when s is one of the forms above (not a plain mode), else 0. */
int mw_chunks_is_form(const char *s);
/* Parses form s for a model of L blocks into blk[0 .. L-1] and ends[0] (embed), ends[1] (head)
 * (L < 0: the syntax alone, blk unused; ends may be NULL) and *widest (the mw_offload_mode that
 * names the categories it puts on disk: all when any parameters, optimizer+grads when any
 * gradients, optimizer when any optimizer state, else none). MW_ERR_ARG with one line naming what
 * is wrong; L == 0 (no model has 0 blocks) is refused. */
mw_status mw_chunks_parse(const char *s, int L, unsigned char *blk, unsigned char ends[2], int *widest);
/* The per-category form of blk[0 .. L-1] and ends ("params=embed+4-11+head,grads=all,optim=none"),
 * when each category's blocks on disk are one range (else the first range: never for auto's). */
void mw_chunks_text(const unsigned char *blk, int L, const unsigned char ends[2], char *out, size_t n);
#endif
