/* AdamW over one chunk of parameters (PyTorch's update, op for op). */
#ifndef MW_ADAMW_H
#define MW_ADAMW_H
#include <stddef.h>

typedef struct mw_adamw_hp {
    double lr, beta1, beta2, eps, weight_decay; /* weight_decay 0 for tensors without decay */
    float grad_scale;                           /* clipping coefficient applied to g first */
    int t;                                      /* 1-based step for bias correction */
} mw_adamw_hp;

/* Updates p, m, v (n) from g and zeroes g. Elementwise: bitwise the same for any thread count. */
void mw_adamw_update(float *p, float *g, float *m, float *v, size_t n, const mw_adamw_hp *hp);
#endif
