/* plan --pp P --timeline FILE.svg: a pipeline layout's schedule drawn, the stages as lanes (ranks
 * p x T x D .. share a lane), each micro-batch's forward and backward on them in the order the
 * stage's plan runs them (src/graph/layout.c: min(P - s - 1, M) warm-up forwards, then one forward
 * and one backward, then the backwards left). Times are units, not measurements: a block's forward
 * 1, its backward 2 (and 1 more where --recompute full redoes it), the embedding and the head each
 * count as one block; a stage's op starts when its previous op has ended and its input has arrived
 * (transfers take no time). The bubble, the lanes' idle time over their busy time, is printed beside
 * the textbook's (p - 1) / m, which holds for even stages. May call: main.c's die. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "memwall.h"

typedef struct pop {
    int bwd, mb;
    double t0, t1;
} pop;

/* Simulates the stages' schedules: ops[s * 2M ..] in each stage's order, with their times; returns
 * the makespan. blocks[s]: stage s's blocks. */
static double simulate(int P, int M, const int *blocks, int full, pop *ops) {
    double *fend = calloc((size_t)P * M, sizeof *fend), *bend = calloc((size_t)P * M, sizeof *bend);
    int *next = calloc((size_t)P, sizeof *next); /* each stage's next op */
    if (!fend || !bend || !next) die(1, "out of memory");
    for (int s = 0; s < P; s++) { /* the order (layout.c's mw_graph_stage_schedule) */
        const int w = P - s - 1 < M ? P - s - 1 : M;
        pop *o = ops + (size_t)s * 2 * M;
        int n = 0;
        for (int j = 0; j < w; j++) o[n++] = (pop){0, j, -1, -1};
        for (int j = w; j < M; j++) o[n++] = (pop){0, j, -1, -1}, o[n++] = (pop){1, j - w, -1, -1};
        for (int j = M - w; j < M; j++) o[n++] = (pop){1, j, -1, -1};
    }
    double make = 0;
    for (int progress = 1; progress;) { /* list scheduling: run any op whose input is ready */
        progress = 0;
        for (int s = 0; s < P; s++) {
            if (next[s] == 2 * M) continue;
            pop *o = ops + (size_t)s * 2 * M + next[s];
            const double prev = next[s] ? o[-1].t1 : 0;
            double ready;
            if (!o->bwd) {
                if (s > 0 && fend[(s - 1) * M + o->mb] <= 0) continue;
                ready = s > 0 ? fend[(s - 1) * M + o->mb] : 0;
            } else {
                if (s < P - 1 && bend[(s + 1) * M + o->mb] <= 0) continue;
                ready = s < P - 1 ? bend[(s + 1) * M + o->mb] : fend[s * M + o->mb];
            }
            const double units = blocks[s] + (s == 0) + (s == P - 1); /* the embedding, the head */
            o->t0 = prev > ready ? prev : ready;
            o->t1 = o->t0 + units * (o->bwd ? 2 + full : 1);
            (o->bwd ? bend : fend)[s * M + o->mb] = o->t1;
            if (o->t1 > make) make = o->t1;
            next[s]++, progress = 1;
        }
    }
    free(fend), free(bend), free(next);
    return make;
}

void layout_pipeline_svg(const mw_config *c, const int *blocks, const char *path, int json) {
    const int P = c->pp, M = c->accum > 0 ? c->accum : 1, full = c->recompute == MW_RECOMPUTE_FULL;
    if (P < 2) die(1, "--timeline with a layout draws a pipeline's schedule: give --pp > 1");
    if (c->vpp > 1) die(1, "--timeline with --vpp: drawing the interleaved schedule is not built yet");
    pop *ops = calloc((size_t)P * 2 * M, sizeof *ops);
    if (!ops) die(1, "out of memory");
    const double make = simulate(P, M, blocks, full, ops);
    double busy = 0;
    for (int i = 0; i < P * 2 * M; i++) busy += ops[i].t1 - ops[i].t0;
    const double idle = make * P - busy;
    FILE *f = fopen(path, "w");
    if (!f) die(1, "cannot write %s", path);
    const double W = 960, lane = 34, top = 46, left = 90, sx = (W - left - 20) / make;
    const double H = top + lane * P + 60;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", W, H);
    fprintf(f, "<text x=\"10\" y=\"18\" font-size=\"13\">1F1B, --pp %d, --microbatches %d%s: a stage per lane, "
               "forward (blue) and backward (orange) of each micro-batch</text>\n", P, M,
            full ? ", --recompute full" : "");
    fprintf(f, "<text x=\"10\" y=\"34\">bubble (idle / busy) %.3f; (p - 1) / m = %.3f; unit times: a block's forward 1, "
               "backward %d</text>\n", idle / busy, (double)(P - 1) / M, 2 + full);
    for (int s = 0; s < P; s++) {
        const double y = top + lane * s;
        fprintf(f, "<text x=\"10\" y=\"%.1f\">stage %d (%d)</text>\n", y + lane * 0.6, s, blocks[s]);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#eeeeee\"/>\n", left, y + 3,
                make * sx, lane - 6);
        for (int i = 0; i < 2 * M; i++) {
            const pop *o = ops + (size_t)s * 2 * M + i;
            const double x = left + o->t0 * sx, w = (o->t1 - o->t0) * sx;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\"/>\n", x,
                    y + 3, w, lane - 6, o->bwd ? "#f28e2b" : "#4e79a7");
            if (w > 14)
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"white\" text-anchor=\"middle\">%s%d</text>\n", x + w / 2,
                        y + lane * 0.62, o->bwd ? "B" : "F", o->mb);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">time (units) 0 .. %.0f; the grey is each stage's bubble</text>\n", left,
            top + lane * P + 20, make);
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) die(1, "cannot write %s", path);
    fprintf(json ? stderr : stdout, "  --timeline %s: 1F1B over %d stages, %d micro-batch%s: bubble %.3f of the busy time ((p - 1) / m = %.3f)\n",
           path, P, M, M == 1 ? "" : "es", idle / busy, (double)(P - 1) / M);
    free(ops);
}
