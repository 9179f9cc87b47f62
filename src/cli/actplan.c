/* The stored activations of a plan as estimate, plan and train print them (--act-offload,
 * --act-compress; docs/memory.md, "Stored activations"): the choice, and per class of block value
 * how many instances are swapped and compressed, their fp32 bytes, what they hold on disk and
 * their compressed bytes. */
#include <stdio.h>
#include <string.h>

#include "../core/arena.h"
#include "cli.h"

static void choice(const mw_plan_summary *p, char *buf, size_t n) {
    if (p->act_pin[0])
        snprintf(buf, n, "--act-layers %.60s%s", p->act_pin, strlen(p->act_pin) > 60 ? "..." : "");
    else if (p->act_compress)
        snprintf(buf, n, "--act-offload %s --act-compress %d", mw_act_offload_name(p->act_offload), p->act_compress);
    else
        snprintf(buf, n, "--act-offload %s --act-compress none", mw_act_offload_name(p->act_offload));
}

/* The token of block l in an --act-layers text ("k", "x8", ...), into tok (4 bytes). */
static void layer_token(const char *pin, int l, char *tok) {
    const char *q = pin;
    for (int i = 0; i < l && q; i++) q = strchr(q, ','), q = q ? q + 1 : NULL;
    size_t n = q ? strcspn(q, ",") : 0;
    if (n > 3) n = 3;
    memcpy(tok, q ? q : "", n);
    tok[n] = 0;
}

static int bit_of(const unsigned char *b, int l) { return l < MW_MAX_BLOCK_POLICIES && (b[l / 8] >> (l % 8) & 1); }

/* --recompute auto's choice per kept value and block (or --act-layers'): the reasons, the pins that
 * give it again, and a row per block: its policy and, per class of value, what it does with it */
static void print_choice(const mw_plan_summary *p, int table) {
    if (p->act_choice[0]) printf("  --recompute auto, per kept value: %s\n", p->act_choice);
    if (p->pred_act_s >= 0 && p->act_choice[0])
        printf("  predicted per micro-batch: recomputation %.4f s, (de)quantisation %.4f s, swaps not hidden %.4f s: "
               "%.4f s\n", p->pred_act_recompute_s, p->pred_act_compress_s, p->pred_act_swap_s, p->pred_act_s);
    if (!p->act_pin[0]) return;
    printf("  pinned by: --recompute %s --act-layers %s\n", p->pin, p->act_pin);
    if (!table) return;
    const char *pol = strncmp(p->pin, "blocks:", 7) == 0 ? p->pin + 7 : "";
    printf("\n  per block (keep: in memory as it is; c8/c4/c2: compressed; swap: on disk; -: not kept, recomputed):\n");
    printf("  %-6s %-10s", "block", "policy");
    for (int i = 0; i < p->nact; i++) printf(" %9.9s", p->act[i].name);
    printf("\n");
    for (int l = 0; l < (int)strlen(pol); l++) {
        char tok[4];
        layer_token(p->act_pin, l, tok);
        const char bits = tok[0] && tok[1] ? tok[1] : 0;
        printf("  %-6d %-10s", l, pol[l] == 'n' ? "none" : pol[l] == 's' ? "selective" : "full");
        for (int i = 0; i < p->nact; i++) {
            const mw_act_class *k = &p->act[i];
            char cell[16];
            const int sw = bit_of(k->swap_l, l), cp = bit_of(k->comp_l, l);
            if (!bit_of(k->kept_l, l) && !sw && !cp) snprintf(cell, sizeof cell, "-");
            else if (sw && cp) snprintf(cell, sizeof cell, "swap+c%c", bits);
            else if (sw) snprintf(cell, sizeof cell, "swap");
            else if (cp) snprintf(cell, sizeof cell, "c%c", bits);
            else snprintf(cell, sizeof cell, "keep");
            printf(" %9s", cell);
        }
        printf("\n");
    }
}

void print_act_plan(const mw_plan_summary *p, int table) {
    print_choice(p, table);
    if (!p->act_offload && !p->act_compress && !p->act_pin[0]) return;
    char ch[96], b1[32], b2[32], b3[32];
    choice(p, ch, sizeof ch);
    uint64_t by = 0, disk = 0, q = 0;
    int sw = 0, cp = 0;
    for (int i = 0; i < p->nact; i++)
        by += p->act[i].bytes, disk += p->act[i].disk_bytes, q += p->act[i].compressed_bytes, sw += p->act[i].swapped,
            cp += p->act[i].compressed;
    if (p->act_why[0] && !p->act_pin[0]) printf("  --act-offload auto: %s -> %s\n", p->act_why, mw_act_offload_name(p->act_offload));
    if (!table) {
        printf("  stored activations (%s): %d swapped, %d compressed of %s kept (fp32); %s on disk, %s compressed\n",
               ch, sw, cp, mw_fmt_bytes(by, b1, sizeof b1), mw_fmt_bytes(disk, b2, sizeof b2), mw_fmt_bytes(q, b3, sizeof b3));
        return;
    }
    printf("\n  stored activations (%s), per class of block value:\n", ch);
    printf("  %-12s %8s %10s %12s %12s %12s\n", "value", "swapped", "compressed", "fp32 bytes", "on disk", "compressed");
    for (int i = 0; i < p->nact; i++) {
        const mw_act_class *k = &p->act[i];
        printf("  %-12s %8d %10d %12s %12s %12s\n", k->name, k->swapped, k->compressed, mw_fmt_bytes(k->bytes, b1, sizeof b1),
               mw_fmt_bytes(k->disk_bytes, b2, sizeof b2), mw_fmt_bytes(k->compressed_bytes, b3, sizeof b3));
    }
    if (!p->nact) printf("  (nothing: no value of this plan is kept from its forward to its backward as the flags ask)\n");
}

void json_act_plan(FILE *f, const mw_plan_summary *p) {
    fprintf(f, "{\"offload\": \"%s\", \"why\": \"%s\", \"compress_bits\": %d, \"disk_bytes\": %llu, \"classes\": [",
            mw_act_offload_name(p->act_offload), p->act_why, p->act_compress, (unsigned long long)p->act_disk);
    for (int i = 0; i < p->nact; i++) {
        const mw_act_class *k = &p->act[i];
        fprintf(f, "%s{\"value\": \"%s\", \"swapped\": %d, \"compressed\": %d, \"bytes\": %llu, \"disk_bytes\": %llu, "
                   "\"compressed_bytes\": %llu}",
                i ? ", " : "", k->name, k->swapped, k->compressed, (unsigned long long)k->bytes,
                (unsigned long long)k->disk_bytes, (unsigned long long)k->compressed_bytes);
    }
    if (!p->act_pin[0] && !p->act_choice[0]) { /* no choice per block: the object as before */
        fprintf(f, "]}");
        return;
    }
    fprintf(f, "], \"pin\": \"%s\", \"choice\": \"%s\", \"pred_recompute_s\": %.6g, \"pred_compress_s\": %.6g, "
               "\"pred_swap_s\": %.6g, \"pred_s\": %.6g}",
            p->act_pin, p->act_choice, p->pred_act_recompute_s, p->pred_act_compress_s, p->pred_act_swap_s, p->pred_act_s);
}

void svg_act_bands(FILE *f, const mw_plan_op *ops, int n, double left, double top, double ph, double bw, double ymax,
                   double lx, double ly) {
    int any_q = 0, any_d = 0;
    for (int i = 0; i < n; i++) any_q |= ops[i].act_compressed != 0, any_d |= ops[i].act_on_disk != 0;
    char b1[32];
    if (any_q) { /* the top of the activations' bar: the stack below it is parameters .. optimizer */
        fprintf(f, "<g id=\"band-activations-compressed\" fill=\"#2f6f6a\">\n");
        for (int i = 0; i < n; i++) {
            if (!ops[i].act_compressed) continue;
            double below = 0;
            for (int j = 0; j <= MW_CAT_ACTS; j++) below += (double)ops[i].live[j];
            const double h = ph * (double)ops[i].act_compressed / ymax, y = top + ph - ph * below / ymax;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>%s, %s: activations "
                       "compressed %s</title></rect>\n",
                    left + i * bw, y, bw * 0.92, h, ops[i].name, ops[i].op, mw_fmt_bytes(ops[i].act_compressed, b1, sizeof b1));
        }
        fprintf(f, "</g>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"#2f6f6a\"/><text x=\"%.0f\" "
                   "y=\"%.0f\">compressed</text>\n", lx, ly, lx + 17, ly + 10);
    }
    if (any_d) { /* out of memory: outlined, above everything in it */
        fprintf(f, "<g id=\"band-activations-on-disk\" fill=\"none\" stroke=\"#76b7b2\" stroke-dasharray=\"2,2\">\n");
        for (int i = 0; i < n; i++) {
            if (!ops[i].act_on_disk) continue;
            double below = 0;
            for (int j = 0; j < MW_CAT_COUNT; j++) below += (double)ops[i].live[j];
            double h = ph * (double)ops[i].act_on_disk / ymax, y = top + ph - ph * below / ymax - h;
            if (y < top - 20) h -= top - 20 - y, y = top - 20; /* more on disk than the axis holds: cut */
            if (h <= 0) continue;
            fprintf(f, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"><title>%s, %s: activations "
                       "swapped to disk %s</title></rect>\n",
                    left + i * bw, y, bw * 0.92, h, ops[i].name, ops[i].op,
                    mw_fmt_bytes(ops[i].act_on_disk, b1, sizeof b1));
        }
        fprintf(f, "</g>\n<rect x=\"%.0f\" y=\"%.0f\" width=\"12\" height=\"12\" fill=\"none\" stroke=\"#76b7b2\" "
                   "stroke-dasharray=\"2,2\"/><text x=\"%.0f\" y=\"%.0f\">swapped (on disk)</text>\n",
                lx, ly + 18, lx + 17, ly + 28);
    }
}
