/* exchange/xp_program_print.c — ExProg programs as text (see
 * xp_program.h; xp_parse.c reads it back). */
#include "exchange/xp_program.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char **print_names(const xp_program *p, const char *(*atom_name)(int, void *),
                          void *ctx)
{
    char **nm = calloc((size_t)p->nin + 1, sizeof *nm);
    if (!nm)
        return NULL;
    for (int i = 0; i < p->nin; i++) {
        char buf[XP_NAME_MAX + 32];
        if (p->name && p->name[i]) {
            snprintf(buf, sizeof buf, "%s", p->name[i]);
        } else {
            const char *base = atom_name ? atom_name(p->in[i].atom, ctx) : NULL;
            if (base)
                snprintf(buf, sizeof buf, "%s_%d", base, p->in[i].site);
            else
                snprintf(buf, sizeof buf, "A%d_%d", p->in[i].atom, p->in[i].site);
            /* Two copies of one atom on one site: keep names unique. */
            int dup = 0;
            for (int j = 0; j < i; j++)
                dup += nm[j] && strncmp(nm[j], buf, strlen(buf)) == 0 &&
                       (nm[j][strlen(buf)] == 0 || nm[j][strlen(buf)] == 'c');
            if (dup) {
                size_t l = strlen(buf);
                snprintf(buf + l, sizeof buf - l, "c%d", dup);
            }
        }
        nm[i] = strdup(buf);
    }
    return nm;
}

static void print_set(const xp_program *p, FILE *f, const xp_word *s, char **nm)
{
    int first = 1;
    for (int i = 0; i < p->nin; i++) {
        if (!xp_set_has(s, i))
            continue;
        fprintf(f, "%s%s", first ? "" : "+", nm[i] ? nm[i] : "?");
        first = 0;
    }
}

/* A list of targets (site, part, slot): a full run of a partition's slots
 * prints as its name. */
static void print_targets(const xp_program *p, FILE *f, const int *site, const int *part,
                          const int *slot, int n)
{
    for (int i = 0; i < n;) {
        fprintf(f, "%s", i ? ", " : "");
        if (part && part[i] >= 0 && slot[i] == 0) {
            const xp_partition *g = &p->part[part[i]];
            int k = 0;
            while (k < g->size && i + k < n && part[i + k] == part[i] && slot[i + k] == k)
                k++;
            if (k == g->size) {
                fprintf(f, "%s", g->name);
                i += k;
                continue;
            }
        }
        fprintf(f, "%d", site[i]);
        i++;
    }
}

static void print_size(FILE *f, double b)
{
    if (b == 1e9)
        return;
    if (b >= 1e9 && fmod(b, 1e7) == 0)
        fprintf(f, " (size: %.15g GB)", b / 1e9);
    else if (b >= 1e6 && fmod(b, 1e4) == 0)
        fprintf(f, " (size: %.15g MB)", b / 1e6);
    else if (b >= 1e3 && fmod(b, 10) == 0)
        fprintf(f, " (size: %.15g KB)", b / 1e3);
    else
        fprintf(f, " (size: %.17g bytes)", b);
}

/* " [c/k]", " [*" "/k]" (every chunk), or nothing for a whole aggregate. */
static void print_chunk(FILE *f, const xp_action *ac)
{
    if (ac->nchunks <= 1)
        return;
    if (ac->run == ac->nchunks)
        fprintf(f, " [*/%d]", ac->nchunks);
    else if (ac->run > 1)
        fprintf(f, " [%d..%d/%d]", ac->chunk, ac->chunk + ac->run - 1, ac->nchunks);
    else
        fprintf(f, " [%d/%d]", ac->chunk, ac->nchunks);
}

void xp_program_print_membership(const xp_program *p, FILE *f)
{
    for (int i = 0; i < p->npart; i++) {
        const xp_partition *g = &p->part[i];
        fprintf(f, "%s%s = {", i ? ", " : "", g->name);
        for (int k = 0; k < g->size; k++)
            if (g->member[k] < 0)
                fprintf(f, "%s?", k ? ", " : "");
            else
                fprintf(f, "%s%d", k ? ", " : "", g->member[k]);
        fprintf(f, "}");
    }
}

void xp_program_print(const xp_program *p, FILE *f,
                      const char *(*atom_name)(int atom, void *ctx), void *ctx)
{
    char **nm = print_names(p, atom_name, ctx);
    if (!nm)
        return;
    fprintf(f, "GPUS: ");
    for (int g = 0, first = 1; g < p->ngpus; g++)
        if (!p->gpu_ok || p->gpu_ok[g]) {
            fprintf(f, "%s%d", first ? "" : ", ", g);
            first = 0;
        }
    fprintf(f, "\n");
    if (p->npart) {
        fprintf(f, "PARTITIONS:");
        for (int i = 0; i < p->npart; i++) {
            const xp_partition *g = &p->part[i];
            if (g->member[0] < 0) {
                fprintf(f, " %s {size %d}", g->name, g->size);
                continue;
            }
            fprintf(f, " %s {", g->name);
            for (int k = 0; k < g->size; k++)
                fprintf(f, "%s%d", k ? ", " : "", g->member[k]);
            fprintf(f, "}");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "IN: ");
    for (int i = 0; i < p->nin; i++) {
        fprintf(f, "%s%s @ %d", i ? "; " : "", nm[i], p->in[i].site);
        print_size(f, p->in[i].bytes);
    }
    fprintf(f, "\nOUT: ");
    int *site = malloc(sizeof(int) * (size_t)(p->nout + p->nact + 1));
    int *part = malloc(sizeof(int) * (size_t)(p->nout + p->nact + 1));
    int *slot = malloc(sizeof(int) * (size_t)(p->nout + p->nact + 1));
    if (!site || !part || !slot)
        goto done;
    for (int o = 0; o < p->nout;) {
        int n = 0;
        /* Consecutive entries of one aggregate print as one target list. */
        while (o + n < p->nout && xp_set_equal(p, p->out[o + n].set, p->out[o].set)) {
            site[n] = p->out[o + n].site;
            part[n] = p->out[o + n].part;
            slot[n] = p->out[o + n].slot;
            n++;
        }
        fprintf(f, "%s", o ? "; " : "");
        print_set(p, f, p->out[o].set, nm);
        fprintf(f, " @ ");
        print_targets(p, f, site, part, slot, n);
        o += n;
    }
    fprintf(f, "\n");
    for (int a = 0; a < p->nact;) {
        const xp_action *ac = &p->act[a];
        print_set(p, f, ac->set, nm);
        print_chunk(f, ac);
        fprintf(f, " @ ");
        if (ac->ndst == 0) {
            int n = 0;
            while (a + n < p->nact && p->act[a + n].ndst == 0 &&
                   p->act[a + n].chunk == ac->chunk && p->act[a + n].run == ac->run &&
                   p->act[a + n].nchunks == ac->nchunks &&
                   xp_set_equal(p, p->act[a + n].set, ac->set)) {
                site[n] = p->act[a + n].src;
                part[n] = p->act[a + n].src_part;
                slot[n] = p->act[a + n].src_slot;
                n++;
            }
            print_targets(p, f, site, part, slot, n);
            a += n;
        } else {
            fprintf(f, "%d", ac->src);
            for (int r = 0; r < ac->nrelay; r++)
                fprintf(f, " -> %d", ac->relay[r]);
            fprintf(f, " -> ");
            print_targets(p, f, ac->dst, ac->dst_part, ac->dst_slot, ac->ndst);
            a++;
        }
        fprintf(f, "\n");
    }
done:
    free(site);
    free(part);
    free(slot);
    for (int i = 0; i < p->nin; i++)
        free(nm[i]);
    free(nm);
}

char *xp_action_format(const xp_program *p, int a, char *buf, int len)
{
    const xp_action *ac = &p->act[a];
    int n = 0, first = 1;
    buf[0] = 0;
#define PUT(...)                                                              \
    do {                                                                      \
        if (n < len)                                                          \
            n += snprintf(buf + n, (size_t)(len - n), __VA_ARGS__);           \
    } while (0)
    for (int i = 0; i < p->nin; i++) {
        if (!xp_set_has(ac->set, i))
            continue;
        if (p->name && p->name[i])
            PUT("%s%s", first ? "" : "+", p->name[i]);
        else
            PUT("%sA%d_%d", first ? "" : "+", p->in[i].atom, p->in[i].site);
        first = 0;
    }
    if (ac->nchunks > 1 && ac->run == ac->nchunks)
        PUT(" [*/%d]", ac->nchunks);
    else if (ac->nchunks > 1 && ac->run > 1)
        PUT(" [%d..%d/%d]", ac->chunk, ac->chunk + ac->run - 1, ac->nchunks);
    else if (ac->nchunks > 1)
        PUT(" [%d/%d]", ac->chunk, ac->nchunks);
    PUT(" @ %d", ac->src);
    for (int r = 0; r < ac->nrelay; r++)
        PUT(" -> %d", ac->relay[r]);
    for (int d = 0; d < ac->ndst; d++)
        PUT("%s%d", d ? ", " : " -> ", ac->dst[d]);
#undef PUT
    return buf;
}
