/* Status codes and the per-thread last-error message. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

const char *mw_status_str(mw_status s) {
    switch (s) {
    case MW_OK: return "ok";
    case MW_ERR_ARG: return "invalid argument";
    case MW_ERR_BUDGET: return "budget exceeded";
    case MW_ERR_NOMEM: return "out of memory";
    case MW_ERR_IO: return "I/O error";
    case MW_ERR_FORMAT: return "malformed file";
    case MW_ERR_STOP: return "stopped";
    }
    return "unknown status";
}

const char *mw_last_error(void) { return last_error[0] ? last_error : "no error"; }

mw_status mw_fail(mw_status s, const char *fmt, ...) {
    char raw[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    /* one line: a control character from a file or a name (a newline) is written as \xNN */
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)raw; *p && o + 5 < sizeof last_error; p++) {
        if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(last_error + o, sizeof last_error - o, "\\x%02x", *p);
        else
            last_error[o++] = (char)*p;
    }
    last_error[o] = 0;
    return s;
}
