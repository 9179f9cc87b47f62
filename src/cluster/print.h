/* The text tables of src/cluster: the published memory figures beside their reproduction
 * (`memwall estimate --published`), and a GPU's fixed costs with the source of each figure
 * (`memwall estimate --gpu NAME | --device-mem SIZE`). Calls published.h, gpu.h and src/core. */
#ifndef MW_PRINT_H
#define MW_PRINT_H
#include <stdio.h>

#include "gpu.h"

/* Every published figure of published.h, the figure reproduced from the source's formula, the
 * precision the source prints, and where memwall's own count differs, why. MW_OK, or the status of
 * a formula that failed (a programming error: every input is a constant). */
mw_status mw_print_published(FILE *f);

/* The device line and the fixed costs, each with its source. g may be NULL (--device-mem alone);
 * device_bytes is the memory the costs are taken from; plan_peak (0: none) is compared with what
 * is left. */
void mw_print_fixed_costs(FILE *f, const mw_gpu *g, uint64_t device_bytes, const mw_gpu_fixed *x,
                          uint64_t plan_peak);

/* The same as one JSON object (no newline). */
void mw_print_fixed_costs_json(FILE *f, const mw_gpu *g, uint64_t device_bytes, const mw_gpu_fixed *x,
                               uint64_t plan_peak);
#endif
