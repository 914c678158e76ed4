/* common/ir/ein_einsum.c — einsum subscripts checked and split (see
 * ein_einsum.h). */
#include "common/ir/ein_einsum.h"

#include <string.h>

#include "common/ir/ein_program.h" /* EIN_NAME_MAX */

int ein_einsum_parse_flags(const char *s, unsigned flags, ein_einsum_sub *out, ein_error *err)
{
    if (!s || !s[0])
        return ein_fail(err, EIN_EINVAL, "einsum subscripts are empty; expected e.g. 'ij,jk->ik'");
    size_t len = strnlen(s, EIN_NAME_MAX);
    if (len >= EIN_NAME_MAX)
        return ein_fail(err, EIN_EINVAL, "einsum subscripts '%.32s...' are too long (at most %d characters)",
                        s, EIN_NAME_MAX - 1);
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || c == ',')
            continue;
        if (c == '-' && s[i + 1] == '>') {
            i++;
            continue;
        }
        if (c >= ' ' && c < 127)
            return ein_fail(err, EIN_EINVAL,
                            "einsum '%s': unexpected character '%c' at position %zu; expected "
                            "letters a-z, ',' and '->'", s, c, i + 1);
        return ein_fail(err, EIN_EINVAL,
                        "einsum '%s': unexpected byte 0x%02x at position %zu; expected "
                        "letters a-z, ',' and '->'", s, (unsigned char)c, i + 1);
    }
    const char *arrow = strstr(s, "->");
    if (!arrow)
        return ein_fail(err, EIN_EINVAL, "einsum '%s': missing '->'; expected an explicit output "
                        "such as 'ij,jk->ik'", s);
    if (strstr(arrow + 2, "->"))
        return ein_fail(err, EIN_EINVAL, "einsum '%s': more than one '->'; expected one", s);
    if (strchr(arrow + 2, ','))
        return ein_fail(err, EIN_EINVAL, "einsum '%s': ',' after '->'; expected one output "
                        "operand", s);

    ein_einsum_sub r;
    memset(&r, 0, sizeof r);
    const char *p = s;
    for (;;) {
        const char *end = p;
        while (end < arrow && *end != ',')
            end++;
        if (r.nops == 2)
            return ein_fail(err, EIN_EINVAL, "einsum '%s': more than 2 operands; expected 1 or 2", s);
        int k = r.nops++;
        int n = (int)(end - p);
        if (n == 0 && !(flags & EIN_EINSUM_SCALARS))
            return ein_fail(err, EIN_EINVAL, "einsum '%s': operand %d has no indices "
                            "(rank-0 tensors are not supported); expected at least one",
                            s, k + 1);
        if (n > EIN_MAX_RANK)
            return ein_fail(err, EIN_EINVAL, "einsum '%s': operand %d has %d indices; expected at "
                            "most %d",
                            s, k + 1, n, EIN_MAX_RANK);
        for (int i = 0; i < n; i++) {
            if (memchr(p, p[i], (size_t)i))
                return ein_fail(err, EIN_EINVAL, "einsum '%s': index %c repeated in operand %d "
                                "(diagonals are not supported); expected distinct indices",
                                s, p[i], k + 1);
            r.ops[k][i] = p[i];
        }
        r.rank[k] = n;
        if (end == arrow)
            break;
        p = end + 1;
    }
    const char *o = arrow + 2;
    int n = (int)strlen(o);
    if (n == 0 && !(flags & EIN_EINSUM_SCALARS))
        return ein_fail(err, EIN_EINVAL, "einsum '%s': the output has no indices "
                        "(rank-0 results are not supported); expected at least one", s);
    if (n > EIN_MAX_RANK)
        return ein_fail(err, EIN_EINVAL, "einsum '%s': the output has %d indices; expected at most %d",
                        s, n, EIN_MAX_RANK);
    for (int i = 0; i < n; i++) {
        if (memchr(o, o[i], (size_t)i))
            return ein_fail(err, EIN_EINVAL, "einsum '%s': index %c repeated in the output; "
                            "expected distinct indices", s, o[i]);
        int found = 0;
        for (int k = 0; k < r.nops; k++)
            found |= memchr(r.ops[k], o[i], (size_t)r.rank[k]) != NULL;
        if (!found)
            return ein_fail(err, EIN_EINVAL, "einsum '%s': output index %c appears in no operand; "
                            "expected indices of the operands",
                            s, o[i]);
        r.out[i] = o[i];
    }
    r.out_rank = n;
    *out = r;
    return 0;
}

int ein_einsum_parse(const char *s, ein_einsum_sub *out, ein_error *err)
{
    return ein_einsum_parse_flags(s, 0, out, err);
}
