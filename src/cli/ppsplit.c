/* --pp-layers auto (issue 33 item 1): the split of the blocks over a pipeline's P stages that makes
 * the largest stage's planned peak least. Each stage's peak is the library's plan of that stage (its
 * blocks, the embedding on the first, the head on the last, the min(P - s, M) micro-batches 1F1B
 * keeps in flight on stage s), so the choice is the memory balance of the plans train runs, not
 * of a formula. A dynamic programme over (stage, first block): best[s][f], the least largest peak
 * of stages s .. P - 1 when stage s begins at block f. A stage's plan depends on its place, its
 * number of blocks and, for a model whose blocks differ (deepseek's first dense blocks,
 * --recompute blocks:... letters), which blocks: it is planned once per distinct case. Ties go to
 * the split closest to even (the stages' compute time). May call: the public API (mw_plan). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "cli.h"
#include "ppsplit.h"

/* the plan's peak of stage s holding blocks f .. f + n - 1 (memoised in memo[], 0: not planned) */
static mw_status stage_peak(const mw_config *c, int P, int s, int f, int n, int uniform, uint64_t *memo, uint64_t *peak) {
    const int L = c->n_layer;
    uint64_t *slot = &memo[((size_t)s * (size_t)(uniform ? 1 : L) + (size_t)(uniform ? 0 : f)) * (size_t)(L + 1) + (size_t)n];
    if (!*slot) {
        mw_config k = *c;
        k.pp = P, k.pp_stage = s, k.pp_first = f, k.pp_blocks = n, k.rank = 0;
        mw_plan_summary ps;
        MW_TRY(mw_plan(&k, &ps));
        *slot = ps.peak ? ps.peak : 1;
    }
    *peak = *slot;
    return MW_OK;
}

mw_status pp_split_auto(const mw_config *c, int P, int *blocks, uint64_t *peaks) {
    const int L = c->n_layer;
    if (P < 2 || P > L) return mw_fail(MW_ERR_ARG, "--pp-layers auto: --pp %d stages of %d blocks", P, L);
    if (c->vpp > 1) return mw_fail(MW_ERR_ARG, "--pp-layers auto with --vpp: the interleaved schedule needs an even split");
    const int uniform = c->recompute != MW_RECOMPUTE_BLOCKS && c->first_dense == 0;
    uint64_t *memo = calloc((size_t)P * (size_t)(uniform ? 1 : L) * (size_t)(L + 1), sizeof *memo);
    uint64_t *best = calloc((size_t)P * (size_t)(L + 1), sizeof *best);
    int *take = calloc((size_t)P * (size_t)(L + 1), sizeof *take);
    mw_status st = memo && best && take ? MW_OK : mw_fail(MW_ERR_NOMEM, "out of memory");
    for (int s = P - 1; s >= 0 && st == MW_OK; s--)
        for (int f = s; f <= L - (P - s) && st == MW_OK; f++) { /* every stage before holds a block at least */
            const int left = L - f, most = left - (P - 1 - s), even = (left + (P - s) / 2) / (P - s);
            uint64_t b = UINT64_MAX;
            int bn = 0;
            for (int n = s == P - 1 ? left : 1; n <= most && st == MW_OK; n++) {
                uint64_t pk;
                st = stage_peak(c, P, s, f, n, uniform, memo, &pk);
                const uint64_t v = s == P - 1 ? pk : (pk > best[(size_t)(s + 1) * (L + 1) + f + n] ? pk : best[(size_t)(s + 1) * (L + 1) + f + n]);
                if (v < b || (v == b && abs(n - even) < abs(bn - even))) b = v, bn = n;
            }
            best[(size_t)s * (L + 1) + f] = b, take[(size_t)s * (L + 1) + f] = bn;
        }
    for (int s = 0, f = 0; s < P && st == MW_OK; f += blocks[s], s++) {
        blocks[s] = take[(size_t)s * (L + 1) + f];
        st = stage_peak(c, P, s, f, blocks[s], uniform, memo, &peaks[s]);
    }
    free(memo), free(best), free(take);
    return st;
}
