#include "adamw.h"

#include <math.h>

void mw_adamw_update(float *p, float *g, float *m, float *v, size_t n, const mw_adamw_hp *hp) {
    const float decay = (float)(1.0 - hp->lr * hp->weight_decay);
    const float b1 = (float)hp->beta1, b2 = (float)hp->beta2;
    const float a1 = (float)(1.0 - hp->beta1), a2 = (float)(1.0 - hp->beta2);
    const float step = (float)(hp->lr / (1.0 - pow(hp->beta1, hp->t)));
    const float bc2s = (float)sqrt(1.0 - pow(hp->beta2, hp->t));
    const float eps = (float)hp->eps, gs = hp->grad_scale;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = m[i] * b1 + a1 * gi;
        float vi = v[i] * b2 + a2 * gi * gi;
        float pi = p[i] * decay;
        float denom = sqrtf(vi) / bc2s + eps;
        p[i] = pi - step * (mi / denom);
        m[i] = mi;
        v[i] = vi;
        g[i] = 0.0f;
    }
}
