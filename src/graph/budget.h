/* The refusal of a plan that does not fit (src/graph/budget.c). */
#ifndef MW_GRAPH_BUDGET_H
#define MW_GRAPH_BUDGET_H
#include "graph.h"

/* Sets the last error (MW_ERR_BUDGET) for m's plan, which does not fit: the bytes it needs against
 * --budget, by category, with a hint that names only flags this run accepts, and/or the disk
 * tier's file against --offload-dir's room. */
void mw_budget_refusal(const mw_model *m);
#endif
