/* common/io/ein_json.c — see ein_json.h. */
#include "common/io/ein_json.h"

void ein_json_strn(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    for (size_t i = 0; i < n && s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

void ein_json_str(FILE *f, const char *s)
{
    ein_json_strn(f, s, (size_t)-1);
}
