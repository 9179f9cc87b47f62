/* The schedule of one step and its walk (graph_impl.h). Owns: the op list a model pushes
 * (mw_graph_push), the order of a step under a recomputation policy (build_schedule: forward,
 * head, backward with the recomputations each block's policy asks for, the optimizer), the
 * resolution of an access's slot to a value, and the walk that derives every buffer and its
 * lifetime from the kinds' reads and writes, once to measure (the planner) and once to bind (the
 * arena): the estimate is the allocation. May call: the model's def (block_forward/backward,
 * value sizes), src/memory/planner, the disk tier's layout (transfer.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "../dist/tp.h"
#include "../memory/aio.h"
#include "actstore.h"
#include "graph_impl.h"

void mw_graph_push(mw_model *m, int kind, int layer) {
    if (m->nops >= m->ops_cap) { /* build_schedule sizes ops generously; this is a model's bug */
        fprintf(stderr, "memwall: internal: schedule overflow\n");
        abort();
    }
    m->ops[m->nops].kind = (unsigned char)kind;
    m->ops[m->nops].layer = layer;
    m->ops[m->nops].mb = (unsigned short)m->building_mb;
    m->ops[m->nops].bwd = (unsigned char)m->building_bwd;
    m->nops++;
}

/* ---- the schedule ----------------------------------------------------------------------------- */

void mw_graph_push_backward(mw_model *m) { mw_graph_push_backward_range(m, 0, m->cfg.n_layer); }

void mw_graph_push_backward_range(mw_model *m, int lo, int hi) {
    const mw_model_def *a = m->arch;
    if (m->seg > 0) { /* segments [s, e] of seg blocks from the top: keep x_s, redo the rest */
        for (int e = hi - 1; e >= lo;) {
            const int s = e / m->seg * m->seg > lo ? e / m->seg * m->seg : lo;
            for (int l = s; l <= e; l++) a->block_forward(m, l, l < e);
            for (int l = e; l >= s; l--) a->block_backward(m, l, MW_P_NONE);
            e = s - 1;
        }
    } else {
        for (int l = hi - 1; l >= lo; l--) a->block_backward(m, l, m->pol[l]);
    }
}

mw_status mw_graph_build_schedule(mw_model *m) {
    const mw_model_def *a = m->arch;
    const int L = m->cfg.n_layer;
    m->building_mb = m->building_bwd = 0;
    if (m->cfg.pp > 1) return mw_graph_stage_schedule(m);
    m->ops_cap = 64 * L + 64;
    m->ops = malloc(sizeof *m->ops * (size_t)m->ops_cap);
    if (!m->ops) return mw_fail(MW_ERR_NOMEM, "cannot allocate the schedule");
    m->nops = 0;
    mw_graph_push(m, a->k_embed, 0);
    for (int l = 0; l < L; l++) a->block_forward(m, l, 1);
    m->head_op = m->nops;
    if (m->cfg.inference) {
        mw_graph_push(m, a->k_logits, L);
        m->opt_op = -1;
        return MW_OK;
    }
    mw_graph_push(m, a->k_head, L);
    m->building_bwd = 1;
    mw_graph_push_backward(m);
    mw_graph_push(m, a->k_embed_bwd, 0);
    m->opt_op = m->nops;
    mw_graph_push(m, a->k_opt, 0);
    return MW_OK;
}

/* The walk's index of a value: the step's values first (0 .. ngs-1), then block l's nls values
 * (block L's value 0 is the head's input). */
static int value_of_block(const mw_model_def *a, int l, int v) { return a->ngs + l * a->nls + v; }

/* Size, category, name and block (-1: the step's) of the value of index slot. */
static void slot_info(const mw_model *m, int slot, uint64_t *bytes, mw_category *cat, const char **name,
                      int *layer) {
    const mw_model_def *a = m->arch;
    if (slot < a->ngs) {
        a->gslot(m, slot, bytes, cat);
        if (a->gslot_split) *bytes = mw_graph_layout_bytes(m, a->gslot_split[slot], *bytes);
        *name = a->gslot_names[slot];
        *layer = -1;
        return;
    }
    const int v = (slot - a->ngs) % a->nls;
    *bytes = a->lslot_split ? mw_graph_layout_bytes(m, a->lslot_split[v], a->lslot(m, v)) : a->lslot(m, v);
    *cat = MW_CAT_ACTS;
    *name = a->lslot_names[v];
    *layer = (slot - a->ngs) / a->nls;
}

/* An op of block layer's access slot s (MW_SLOT_*) as the walk's index of its value. */
static int resolve_slot(const mw_model_def *a, int s, int layer) {
    if (s < 0) return -1 - s; /* MW_SLOT_STEP(g): g */
    if (s == MW_SLOT_NEXT) return value_of_block(a, layer + 1, 0);
    return value_of_block(a, layer, s);
}

int mw_graph_value_index(const mw_model_def *a, int s, int layer) { return resolve_slot(a, s, layer); }

void mw_graph_pipe_value_bytes(const mw_model *m, uint64_t *act, uint64_t *grad) {
    const mw_model_def *a = m->arch;
    mw_category cat;
    const char *name;
    int lay;
    slot_info(m, value_of_block(a, 0, 0), act, &cat, &name, &lay);
    slot_info(m, resolve_slot(a, a->kinds[a->k_embed_bwd].a[0].slot, 0), grad, &cat, &name, &lay);
}

uint64_t mw_graph_pipe_head_bytes(const mw_model *m) {
    const mw_model_def *a = m->arch;
    mw_category cat;
    const char *name;
    int lay;
    uint64_t b;
    slot_info(m, resolve_slot(a, a->kinds[a->k_head].a[2].slot, 0), &b, &cat, &name, &lay);
    return b;
}

/* The floats of the largest block's staging slot (its segment, padded). */
static uint64_t block_slot_floats(const mw_model *m) {
    uint64_t mx = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const uint64_t n = mw_offload_pad(mw_graph_seg_len(m, 1 + l));
        if (n > mx) mx = n;
    }
    return mx;
}

static float *align_io(float *p) {
    const uintptr_t u = (uintptr_t)p;
    return (float *)((u + MW_AIO_ALIGN - 1) / MW_AIO_ALIGN * MW_AIO_ALIGN);
}

/* A chunk placement: the floats of the blocks that keep array a (MW_ARR_P or G) in memory while
 * others stream it, each block's rounded up to 16 floats (64 bytes, as the table's tensors) */
static uint64_t resident_blocks_floats(const mw_model *m, int a) {
    uint64_t n = 0;
    for (int l = 0; l < m->cfg.n_layer && m->seg_mask && m->nseg == m->cfg.n_layer + 2; l++)
        if (!mw_graph_seg_disk(m, 1 + l, a)) n += (mw_graph_seg_len(m, 1 + l) + 15) / 16 * 16;
    return n;
}

/* ... the bytes of the segments that keep the optimizer's array w (0: M, 1: V) in memory, each
 * rounded up to 64 bytes */
static uint64_t resident_opt_bytes(const mw_model *m, int w) {
    uint64_t n = 0;
    for (int k = 0; k < m->nseg && m->nseg > 1 && m->opt.bits[w]; k++)
        if (!mw_graph_seg_disk(m, k, w ? MW_ARR_V : MW_ARR_M))
            n += (mw_opt_array_bytes(m->opt.bits[w], mw_graph_seg_len(m, k)) + 63) / 64 * 64;
    return n;
}

/* Adds every buffer of the step to pl (planning), or binds m's pointers to placed (offsets from
 * the planner, same order) inside base. The two modes make the same walk. */
mw_status mw_graph_walk(mw_model *m, mw_planner *pl, const mw_pbuf *placed, char *base) {
    const mw_config *c = &m->cfg;
    const mw_model_def *a = m->arch;
    /* a pipeline stage's micro-batches in flight have values of their own: value slot of micro-batch
     * mb is mb * nslots + slot */
    const int L = c->n_layer, last = m->nops - 1, nslots = value_of_block(a, L + 1, 0), nvals = nslots * m->nmb;
    const uint64_t F = sizeof(float), N = (uint64_t)c->batch * c->seq;
    int idx = 0;
#define PERSIST(ptr, bytes, cat, nm)                                                               \
    do {                                                                                           \
        if (placed)                                                                                \
            (ptr) = (void *)(base + placed[idx++].offset);                                         \
        else                                                                                       \
            MW_TRY(mw_planner_add(pl, (nm), -1, (bytes), (cat), 0, last));                         \
    } while (0)
    const int pdisk = mw_graph_params_on_disk(m), gdisk = mw_graph_grads_on_disk(m), g16 = mw_graph_grads_mem16(m);
    /* a block's staging slot: its padded length, O_DIRECT-aligned inside the arena */
    const uint64_t slot_bytes = (pdisk || gdisk) ? block_slot_floats(m) * F + MW_AIO_ALIGN : 0;
    if (mw_graph_params_zero3(m)) { /* the shard's, every rank's resident segments, two block slots
                                       (the block computing, the next one's gather) */
        PERSIST(m->zparams, (m->zhi - m->zlo) * F, MW_CAT_PARAMS, "params_shard");
        PERSIST(m->pres[0], mw_graph_seg_len(m, 0) * F, MW_CAT_PARAMS, "params_pre");
        PERSIST(m->pres[1], mw_graph_seg_len(m, L + 1) * F, MW_CAT_PARAMS, "params_post");
        for (int k = 0; k < 2; k++) PERSIST(m->pslot[k], block_slot_floats(m) * F, MW_CAT_PARAMS, "param_slot");
    } else if (pdisk) { /* the ends in memory, or in buffers for the ops that use them (ends.c, below) */
        m->pres[0] = m->pres[1] = NULL;
        if (!mw_graph_end_disk(m, 0, MW_ARR_P)) PERSIST(m->pres[0], mw_graph_seg_len(m, 0) * F, MW_CAT_PARAMS, "params_pre");
        if (!mw_graph_end_disk(m, 1, MW_ARR_P)) PERSIST(m->pres[1], mw_graph_seg_len(m, L + 1) * F, MW_CAT_PARAMS, "params_post");
        for (int k = 0; k < 3; k++) PERSIST(m->pslot[k], slot_bytes, MW_CAT_PARAMS, "param_slot");
        if (m->pvec_floats) PERSIST(m->pvec, m->pvec_floats * F, MW_CAT_PARAMS, "params_vec"); /* narrow.c */
        if (resident_blocks_floats(m, MW_ARR_P)) /* a chunk placement's blocks kept in memory */
            PERSIST(m->pblk, resident_blocks_floats(m, MW_ARR_P) * F, MW_CAT_PARAMS, "params_resident");
    } else {
        PERSIST(m->params, m->nfloats * F, MW_CAT_PARAMS, "params");
    }
    if (!c->inference) {
        if (gdisk) {
            m->gres[0] = m->gres[1] = NULL;
            if (!mw_graph_end_disk(m, 0, MW_ARR_G)) PERSIST(m->gres[0], mw_graph_seg_len(m, 0) * F, MW_CAT_GRADS, "grads_pre");
            if (!mw_graph_end_disk(m, 1, MW_ARR_G)) PERSIST(m->gres[1], mw_graph_seg_len(m, L + 1) * F, MW_CAT_GRADS, "grads_post");
            for (int k = 0; k < 3; k++) PERSIST(m->gslot[k], slot_bytes, MW_CAT_GRADS, "grad_slot");
            if (resident_blocks_floats(m, MW_ARR_G))
                PERSIST(m->gblk, resident_blocks_floats(m, MW_ARR_G) * F, MW_CAT_GRADS, "grads_resident");
        } else if (mw_graph_grads_zero2(m)) { /* a block's slot; the sum is the shard's (zero_acc) */
            PERSIST(m->gres[0], mw_graph_seg_len(m, 0) * F, MW_CAT_GRADS, "grads_pre");
            PERSIST(m->gres[1], mw_graph_seg_len(m, L + 1) * F, MW_CAT_GRADS, "grads_post");
            PERSIST(m->gslot[0], block_slot_floats(m) * F, MW_CAT_GRADS, "grad_slot");
        } else if (g16) {
            PERSIST(m->gres[0], mw_graph_seg_len(m, 0) * F, MW_CAT_GRADS, "grads_pre");
            PERSIST(m->gres[1], mw_graph_seg_len(m, L + 1) * F, MW_CAT_GRADS, "grads_post");
            PERSIST(m->gslot[0], block_slot_floats(m) * F, MW_CAT_GRADS, "grad_slot");
            PERSIST(m->g16, (m->seg_lo[L + 1] - m->seg_lo[1]) * sizeof(uint16_t), MW_CAT_GRADS, "grads_bf16");
        } else {
            PERSIST(m->grads, m->nfloats * F, MW_CAT_GRADS, "grads");
        }
        if (mw_graph_norm_fused(m)) { /* the norm's sums at the blocks' backward (narrow.c) */
            PERSIST(m->nparts, (m->nfloats + MW_NORM_QUANTUM - 1) / MW_NORM_QUANTUM * sizeof(double), MW_CAT_WORK, "norm_parts");
            PERSIST(m->npend, (uint64_t)MW_NORM_QUANTUM * F, MW_CAT_WORK, "norm_pend");
        }
        const int adam = c->optim == MW_OPTIM_ADAMW;
        const size_t on = mw_graph_opt_sharded(m) ? m->zhi - m->zlo : m->nfloats;
        if (!mw_graph_opt_on_disk(m) && m->opt.bits[0])
            PERSIST(m->m, mw_opt_array_bytes(m->opt.bits[0], on), MW_CAT_OPTIM, adam ? "adam_m" : "optim_m");
        if (!mw_graph_opt_on_disk(m) && m->opt.bits[1])
            PERSIST(m->v, mw_opt_array_bytes(m->opt.bits[1], on), MW_CAT_OPTIM, adam ? "adam_v" : "optim_v");
        for (int w = 0; w < 2 && mw_graph_opt_on_disk(m); w++) /* a chunk placement's segments kept in memory */
            if (m->opt.bits[w] && resident_opt_bytes(m, w))
                PERSIST(m->oblk[w], resident_opt_bytes(m, w), MW_CAT_OPTIM, w ? "optim_v_resident" : "optim_m_resident");
        if (c->dp) { /* the gradients' exchange (src/dist/zero.c) */
            if (c->accum > 1 || c->zero >= 2) PERSIST(m->zacc, (m->zhi - m->zlo) * F, MW_CAT_GRADS, "zero_acc");
            PERSIST(m->zrecv, (uint64_t)c->world * m->zrq * F, MW_CAT_WORK, "zero_recv");
        }
        if (m->opt.state_bytes) PERSIST(m->ostate, m->opt.state_bytes, MW_CAT_OPTIM, "optim_state");
    }
    if (!c->inference && m->nseg == L + 2) { /* the ends on disk: their buffers live for the ops that use them (ends.c) */
        int first[5], elast[5];
        mw_graph_ends_span(m, first, elast);
        static const char *const NM[5] = {"params_pre_op", "params_post_op", "params_tied_op", "grads_pre_op", "grads_post_op"};
        for (int k = 0; k < 5; k++) {
            const int e = k == 1 || k == 4, arr = k < 3 ? MW_ARR_P : MW_ARR_G;
            float **ptr = k < 3 ? &m->pend[k] : &m->gend[k - 3];
            if (!mw_graph_end_disk(m, e, arr) || (k == 2 && !mw_graph_tied(c)) || first[k] < 0 || elast[k] < first[k]) continue;
            if (placed) {
                *ptr = align_io((float *)(void *)(base + placed[idx++].offset));
            } else {
                const uint64_t bytes = mw_offload_pad(mw_graph_seg_len(m, e ? L + 1 : 0)) * F + MW_AIO_ALIGN;
                MW_TRY(mw_planner_add(pl, NM[k], -1, bytes, arr == MW_ARR_P ? MW_CAT_PARAMS : MW_CAT_GRADS, first[k], elast[k]));
            }
        }
    }
    if (placed && slot_bytes) /* the slots' I/O is O_DIRECT: align them */
        for (int k = 0; k < 3; k++) {
            if (pdisk) m->pslot[k] = align_io(m->pslot[k]);
            if (gdisk && !c->inference) m->gslot[k] = align_io(m->gslot[k]);
        }
    PERSIST(m->gw.buf, m->gw.floats * F, MW_CAT_WORK, "gemm_pack");
    if (c->tp > 1) { /* the all-reduces' receive buffer and the loss's statistics (src/dist/tp.c) */
        m->tpq = mw_tp_piece_floats(c);
        PERSIST(m->tpbuf, mw_tp_workspace_floats(c) * F, MW_CAT_WORK, "tp_comm");
    }
    if (c->tp > 1 && c->sp) /* sequence parallelism: the all-gather's whole (N, C) input of the
                               column-parallel products and the reduce-scatter's whole partial sums
                               (fp32), as Megatron's global buffer (held for the step) */
        PERSIST(m->spbuf, N * (uint64_t)c->n_embd * F, MW_CAT_WORK, "tp_sp_gather");
    PERSIST(m->staging, (2 * N + (uint64_t)c->batch * (c->seq + 1)) * sizeof(int32_t), MW_CAT_WORK,
            "token_staging");
    if (c->pp > 1 && !c->inference) { /* a pipeline stage's sends leave from a copy of their value (the
                                         walk frees the value at the send; the transfer runs on) */
        uint64_t ab, gb;
        mw_graph_pipe_value_bytes(m, &ab, &gb);
        if (c->pp_stage < c->pp - 1) PERSIST(m->psend[0], ab, MW_CAT_WORK, "pp_send");
        if (c->pp_stage > 0) PERSIST(m->psend[1], gb, MW_CAT_WORK, "pp_send_grad");
        if (mw_graph_pipe_tied(c) && c->pp_stage == c->pp - 1) { /* the tied embedding's copy for the head,
                                                                    and its input's send to the first stage */
            PERSIST(m->ptied, mw_pipe_tied_floats(m) * F, MW_CAT_PARAMS, "pp_tied_embedding"); /* --tp: its shard */
            PERSIST(m->psend[2], mw_graph_pipe_head_bytes(m), MW_CAT_WORK, "pp_send_head");
        }
    }
    mw_ext ext[MW_MAX_EXT];
    const int next = a->ext(m, ext);
    for (int e = 0; e < next; e++) PERSIST(m->ext[e], ext[e].bytes, ext[e].cat, ext[e].name);
#undef PERSIST
    if (m->dcat) { /* the streamed chunks pass through it during the optimizer
                                            op only: it shares memory with the activations */
        mw_offload_layout lay;
        mw_graph_disk_layout(m, &lay);
        if (placed)
            m->off_stage = base + placed[idx++].offset;
        else
            MW_TRY(mw_planner_add(pl, "offload_stage", -1, lay.staging_bytes, MW_CAT_OPTIM, m->opt_op, m->opt_op));
    }
    if (!c->inference && m->opt.scratch_bytes) { /* the optimizer's sums: during its op only, too */
        if (placed)
            m->oscratch = base + placed[idx++].offset;
        else
            MW_TRY(mw_planner_add(pl, "optim_scratch", -1, m->opt.scratch_bytes, MW_CAT_OPTIM, m->opt_op, m->opt_op));
    }
    /* stored activations (actstore.c): derived from this schedule when planning; a stored
     * instance's cuts change the buffer its accesses use (curp: the pointer when binding) */
    if (!placed) MW_TRY(mw_graph_act_build(m));
    int *cur = malloc(sizeof(int) * (size_t)nvals), *curst = malloc(sizeof(int) * (size_t)nvals);
    char **curp = malloc(sizeof(char *) * (size_t)nvals);
    if (!cur || !curst || !curp) {
        free(cur), free(curst), free(curp);
        return mw_fail(MW_ERR_NOMEM, "out of memory planning");
    }
    for (int i = 0; i < nvals; i++) cur[i] = curst[i] = -1, curp[i] = NULL;
    mw_status st = MW_OK;
    for (int i = 0; i < m->nops && st == MW_OK; i++) {
        const mw_kind *k = mw_graph_kind(m, m->ops[i].kind);
        const int layer = m->ops[i].layer;
        for (int j = 0; j < k->n && st == MW_OK; j++) {
            const int vs = resolve_slot(a, k->a[j].slot, layer), slot = m->ops[i].mb * nslots + vs;
            if (k->a[j].mode == MW_W) {
                const int sid = mw_graph_act_store_of(m, i, j);
                curst[slot] = sid;
                if (placed) {
                    curp[slot] = base + placed[idx].offset;
                    if (sid >= 0) curp[slot] = mw_graph_act_bind_write(m, sid, curp[slot]);
                    cur[slot] = idx++;
                } else {
                    uint64_t bytes;
                    mw_category cat;
                    int lay;
                    const char *name;
                    slot_info(m, vs, &bytes, &cat, &name, &lay);
                    if (sid >= 0) bytes = mw_graph_act_write_bytes(m, sid, bytes);
                    st = mw_planner_add(pl, name, lay, bytes, cat, i, i);
                    if (st == MW_OK) {
                        pl->b[pl->n - 1].tag = m->ops[i].bwd && mw_graph_kind_is_forward(m, m->ops[i].kind);
                        pl->b[pl->n - 1].mb = m->ops[i].mb;
                        cur[slot] = pl->n - 1;
                    }
                }
            } else if (cur[slot] < 0) {
                st = mw_fail(MW_ERR_ARG, "internal: op %s of layer %d reads a value never written",
                             k->name, layer);
            } else {
                if (curst[slot] >= 0) {
                    const int n0 = placed ? 0 : pl->n;
                    st = mw_graph_act_cut(m, curst[slot], i, pl, placed, base, &idx, &cur[slot], &curp[slot]);
                    for (int q = n0; !placed && q < pl->n; q++) pl->b[q].mb = m->ops[i].mb; /* a cut's buffers */
                }
                if (st == MW_OK && !placed) pl->b[cur[slot]].last = i;
            }
            if (st == MW_OK && placed) m->opp[(size_t)i * MW_MAXACC + j] = curp[slot];
        }
    }
    free(cur), free(curst), free(curp);
    return st;
}
