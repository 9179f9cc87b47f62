/* Internal model functions beyond the public API (src/graph/graph.c). */
#ifndef MW_GRAPH_MODEL_H
#define MW_GRAPH_MODEL_H
#include "memwall.h"

/* Arena-backed token staging of the trainer: 2*B*T + B*(T+1) int32. */
int32_t *mw_model_staging(mw_model *m);
/* Tells the progress function of mw_model_set_progress, if any, that done of total units ran. */
void mw_model_progress(const mw_model *m, int done, int total);
#endif
