/* Thread-local error message storage behind DDPC_ERROR. */
#include "common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static _Thread_local char last_msg_[8192];
static _Thread_local int have_msg_;

ddpc_status ddpc_error_at(ddpc_status st, const char *file, int line, const char *fmt, ...) {
    if (have_msg_) return st;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_msg_, sizeof last_msg_, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof last_msg_ - 64) {
        const char *base = strrchr(file, '/');
        snprintf(last_msg_ + n, sizeof last_msg_ - (size_t)n, " [%s:%d]", base ? base + 1 : file, line);
    }
    have_msg_ = 1;
    return st;
}

const char *ddpc_last_error(void) { return have_msg_ ? last_msg_ : "unknown error"; }

void ddpc_clear_error(void) { have_msg_ = 0; last_msg_[0] = '\0'; }

uint64_t ddpc_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
