/* The refusal of a plan that does not fit: over --budget, or a disk tier larger than
 * --offload-dir's room. */
#include "budget.h"

#include <stdio.h>

#include "../core/arena.h"
#include "../core/status.h"
#include "graph.h"

/* The refusal of a plan over --budget, with a hint only a flag that this run accepts can follow:
 * --offload optimizer needs per-parameter optimizer state and, under data parallelism, --zero 1
 * to 3 (each rank's shard on its disk); under --zero 0 the hint is the sharding itself; a --tp/--pp
 * layout has no disk tier. */
void mw_budget_refusal(const mw_model *m) {
    const mw_plan_summary *p = &m->plan;
    const mw_config *c = &m->cfg;
    char b[MW_CAT_COUNT][32], pk[32], bu[32], msg[400];
    int n = 0;
    for (int k = 0; k < MW_CAT_COUNT; k++)
        n += snprintf(msg + n, sizeof msg - n, "%s%s %s", k ? ", " : "", mw_category_name(k),
                      mw_fmt_bytes(p->category[k], b[k], sizeof b[k]));
    char hint[240] = "";
    /* what --zero 1 to 3 shard and --offload optimizer moves: the per-parameter state (every
     * optimizer's, 8-bit and 4-bit codes and a first moment included; not a small state) */
    const int per_param = m->opt.bits[0] || m->opt.bits[1];
    if (mw_config_layout(c) && !c->inference && c->ep > 1) /* --ep refuses the disk tier (mw_config_validate) */
        snprintf(hint, sizeof hint, " (the disk tier is not available with --ep: --recompute divides the activations)");
    else if (p->offload == MW_OFFLOAD_NONE && p->category[MW_CAT_OPTIM] > 0 && !c->inference) {
        mw_fmt_bytes(p->category[MW_CAT_OPTIM], b[0], sizeof b[0]);
        if (c->dp && c->zero == 0 && per_param && c->world > 1)
            snprintf(hint, sizeof hint, " (--zero 0 keeps the whole optimizer state, %s, on every rank: --zero 1 shards it "
                     "over the %d ranks, and with --zero 1 to 3 --offload optimizer --offload-dir DIR moves a rank's shard "
                     "to disk)", b[0], c->world);
        else if (c->dp && c->zero == 0 && per_param)
            snprintf(hint, sizeof hint, " (--zero 0 keeps the whole optimizer state, %s, on the rank: with --zero 1 to 3, "
                     "--offload optimizer --offload-dir DIR moves a rank's shard to disk)", b[0]);
        else if (c->dp && c->zero >= 1 && per_param)
            snprintf(hint, sizeof hint, " (--offload optimizer --offload-dir DIR moves this rank's shard of the optimizer "
                     "state, %s, to disk)", b[0]);
        else if (!c->dp && per_param)
            snprintf(hint, sizeof hint, " (--offload optimizer --offload-dir DIR moves the optimizer state, %s, to disk)",
                     b[0]);
        else if (!c->dp)
            snprintf(hint, sizeof hint, " (--offload optimizer+grads --offload-dir DIR moves the blocks' gradients to "
                     "disk, all their parameters too; --optim %s's state stays in memory)", mw_optim_str(c->optim));
    }
    char disk[1400] = "";
    if (p->disk_short)
        snprintf(disk, sizeof disk, "the disk tier's file needs %llu bytes (%s) but --offload-dir %s can give it %llu "
                 "bytes (%s: its free space, and stale scratch files a run there removes): free some space, choose "
                 "another folder, or offload less", (unsigned long long)p->disk_file,
                 mw_fmt_bytes(p->disk_file, b[1], sizeof b[1]), c->offload_dir, (unsigned long long)p->disk_room,
                 mw_fmt_bytes(p->disk_room, b[2], sizeof b[2]));
    if (p->budget && p->peak > p->budget)
        mw_fail(MW_ERR_BUDGET, "the plan needs %llu bytes (%s) but --budget is %llu bytes (%s): %s%s%s%s",
                (unsigned long long)p->peak, mw_fmt_bytes(p->peak, pk, sizeof pk),
                (unsigned long long)p->budget, mw_fmt_bytes(p->budget, bu, sizeof bu), msg, hint, disk[0] ? "; and " : "",
                disk);
    else
        mw_fail(MW_ERR_BUDGET, "%s", disk);
}
