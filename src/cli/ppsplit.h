/* --pp-layers auto (ppsplit.c) */
#ifndef MW_CLI_PPSPLIT_H
#define MW_CLI_PPSPLIT_H
#include <stdint.h>

#include "memwall.h"

/* The split of c's n_layer blocks over P pipeline stages (c: the layout's configuration, its
 * micro-batches, recomputation and data-parallel replicas set) that makes the largest stage's
 * planned peak least, ties to the most even: blocks[s] (P entries, each >= 1) and each stage's
 * planned peak (peaks[s]). MW_ERR_ARG for P < 2, P > n_layer or --vpp; a plan's failure. */
mw_status pp_split_auto(const mw_config *c, int P, int *blocks, uint64_t *peaks);
#endif
