/* Hugging Face GPT-2 config.json, parsed from a buffer (for mw_hf_inspect and the fuzzer). */
#ifndef MW_HF_H
#define MW_HF_H
#include <stddef.h>

#include "memwall.h"

#define MW_HF_MAX_CONFIG_FILE ((size_t)16 << 20) /* a config.json larger than this is refused */

/* The shape fields of a config.json; 0 where the file does not give one (absent or null). */
typedef struct mw_hf_config {
    int n_layer, n_head, n_embd, vocab, ctx; /* n_layer, n_head, n_embd, vocab_size, n_positions */
} mw_hf_config;

/* Parses text[0..len) (`what` names it in messages). MW_ERR_FORMAT when it is not a JSON object,
 * its model_type is not "gpt2", or a shape field is not a positive integer below 2^30. */
mw_status mw_hf_config_parse(const char *text, size_t len, const char *what, mw_hf_config *c);
#endif
