/* tests/fuzz/fuzz_util.h — helpers shared by the libFuzzer targets.
 *
 * fuzz_cstr() copies the input into a NUL-terminated buffer (the parsers
 * take C strings; an input with a NUL byte is cut there, as a file reader
 * would refuse it). The caller frees it. fuzz_check() aborts on a broken
 * invariant so that libFuzzer records the input as a crash. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#define fuzz_check(cond, ...)                                                   \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "fuzz invariant failed: %s: ", #cond);              \
            fprintf(stderr, __VA_ARGS__);                                       \
            fprintf(stderr, "\n");                                              \
            abort();                                                            \
        }                                                                       \
    } while (0)

/* Every error message is one line that names a position or a thing. */
#define fuzz_check_msg(err)                                                     \
    fuzz_check((err)->msg[0] && !strchr((err)->msg, '\n'), "bad message '%s'", (err)->msg)

#endif
