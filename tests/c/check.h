/* The assertion macros and exit status shared by the C unit tests. */
#ifndef DDPC_TESTS_CHECK_H
#define DDPC_TESTS_CHECK_H

#include <stdio.h>

static int check_failures_;

/* EXPECT(cond) or EXPECT(cond, fmt, ...): records a failure with file:line
 * and the condition (or the formatted message), and carries on. */
#define EXPECT(...) EXPECT_PICK_(__VA_ARGS__, EXPECTF_, EXPECTF_, EXPECTF_, EXPECTF_, EXPECTF_, EXPECTF_, EXPECTF_, EXPECTF_, \
                                 EXPECT1_, unused)(__VA_ARGS__)
#define EXPECT_PICK_(a, b, c, d, e, f, g, h, i, name, ...) name
#define EXPECT1_(cond)                                                             \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond);    \
            check_failures_++;                                                     \
        }                                                                          \
    } while (0)
#define EXPECTF_(cond, ...)                                                        \
    do {                                                                           \
        if (!(cond)) {                                                             \
            fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                        \
            fprintf(stderr, __VA_ARGS__);                                          \
            fputc('\n', stderr);                                                   \
            check_failures_++;                                                     \
        }                                                                          \
    } while (0)

/* The exit status of a test program; the driver looks for "tests passed". */
static inline int check_finish(const char *suite) {
    if (check_failures_) {
        fprintf(stderr, "%s: %d failures\n", suite, check_failures_);
        return 1;
    }
    printf("all %s tests passed\n", suite);
    return 0;
}

#endif
