/* Internal status helpers. */
#ifndef MW_STATUS_H
#define MW_STATUS_H
#include "memwall.h"

/* Records a printf-style message as this thread's last error and returns s. */
mw_status mw_fail(mw_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define MW_TRY(expr)                                                                               \
    do {                                                                                           \
        mw_status mw_try_s_ = (expr);                                                              \
        if (mw_try_s_ != MW_OK) return mw_try_s_;                                                  \
    } while (0)
#endif
