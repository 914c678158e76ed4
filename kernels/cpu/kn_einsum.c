/* kernels/cpu/kn_einsum.c — einsum on blocks, through OpenBLAS sgemm.
 *
 * Two operands: every letter of extent > 1 ("active") is classified as
 *   batch  in a, b and out      M  in a and out only     N  in b and out only
 *   K      in a and b only      Ra / Rb  in a / b only (summed before the GEMM)
 * and the product is one sgemm per batch index: C[M,N] = A[M,K] B[K,N].
 * An operand is used in place when its M/K (K/N, M/N) letters each form one
 * merged dimension and one of the two is contiguous, which BLAS expresses
 * with a transpose flag and a leading dimension; batch letters may have any
 * stride. Otherwise it is copied into a dense f32 [batch, rows, cols]
 * scratch. Letters of extent 1 never matter (their offset is always 0) and
 * are dropped, so a block that is a thin slice of a tensor still fits.
 * Tiny products (m*n*k below KN_SMALL_GEMM) go through a plain loop, where
 * the call overhead of sgemm would dominate.
 *
 * One operand: a strided copy from a into out, summing the letters that are
 * not in out. */
#include "kernels/kn_cpu.h"
#include "kernels/cpu/kn_internal.h"

#include <cblas.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "common/ir/ein_einsum.h"

#define KN_NLET 26
#define KN_SMALL_GEMM 256
/* Products of at most this many rows go through kn_stream_mm (one read of
 * the weights in their own dtype) rather than sgemm, which packs a copy of
 * them first (tools/bench-kernels -s measures where the two cross). */
#define KN_STREAM_ROWS 16
/* Distinct letters of a two-operand einsum: at most the letters of a and b. */
#define KN_MAXDIM (2 * EIN_MAX_RANK)

typedef struct kn_subs {
    int nin;
    int rank[3];               /* a, b, out (index 2 even with one operand) */
    int let[3][EIN_MAX_RANK];  /* letter numbers 0..25 */
} kn_subs;

/* A parsed and validated einsum over concrete blocks. */
typedef struct kn_es {
    const char *subs;
    kn_subs sp;
    const kn_block *blk[3];
    int64_t ext[KN_NLET];
    int64_t st[3][KN_NLET];    /* row-major element stride of a letter in a block */
    unsigned act[3];           /* active letters (extent > 1) of each block */
} kn_es;

/* An operand as BLAS sees it: f32 data, strides per letter (for batch
 * offsets), transpose flag and leading dimension of the logical matrix. */
typedef struct kn_mat {
    const float *p;            /* f32 data, or NULL when kept in its own dtype */
    const void *raw;           /* the data in dtype dt (p itself when f32) */
    ein_dtype dt;
    const int64_t *st;
    int trans;
    int64_t ld;
} kn_mat;

static const char *const kn_opname[3] = {"a", "b", "out"};

/* The letters of subscripts as numbers: ein_einsum_parse's rules, rank-0
 * operands and outputs allowed. */
static int kn_subs_parse(const char *s, kn_subs *sp, ein_error *err)
{
    memset(sp, 0, sizeof *sp);
    ein_einsum_sub sub;
    int rc = ein_einsum_parse_flags(s, EIN_EINSUM_SCALARS, &sub, err);
    if (rc < 0)
        return rc;
    sp->nin = sub.nops;
    for (int op = 0; op < 3; op++) {
        const char *let = op < 2 ? sub.ops[op] : sub.out;
        sp->rank[op] = op < 2 ? sub.rank[op] : sub.out_rank;
        for (int i = 0; i < sp->rank[op]; i++)
            sp->let[op][i] = let[i] - 'a';
    }
    return 0;
}

int kn_einsum_check(const char *subscripts, int nin, const int *ranks,
                    int out_rank, ein_error *err)
{
    kn_subs sp;
    int rc = kn_subs_parse(subscripts, &sp, err);
    if (rc < 0)
        return rc;
    if (nin != sp.nin)
        return ein_fail(err, EIN_EINVAL, "einsum %s: subscripts name %d operand%s but %d given",
                        subscripts, sp.nin, sp.nin == 1 ? "" : "s", nin);
    for (int i = 0; i < nin; i++)
        if (ranks && ranks[i] != sp.rank[i])
            return ein_fail(err, EIN_ESHAPE, "einsum %s: %s has %d letters but rank %d",
                            subscripts, kn_opname[i], sp.rank[i], ranks[i]);
    if (out_rank != sp.rank[2])
        return ein_fail(err, EIN_ESHAPE, "einsum %s: out has %d letters but rank %d",
                        subscripts, sp.rank[2], out_rank);
    return 0;
}

/* y (+)= x over an index space of `rank` dims: extents ext, element strides
 * sx in x and sy in y. A zero stride in y with `acc` sums along that dim. */
static void kn_strided(int rank, const int64_t *ext, const float *x, const int64_t *sx,
                       float *y, const int64_t *sy, int acc)
{
    if (rank == 0) {
        *y = acc ? *y + *x : *x;
        return;
    }
    int64_t idx[KN_MAXDIM] = {0};
    const int64_t n = ext[rank - 1], ix = sx[rank - 1], iy = sy[rank - 1];
    for (;;) {
        if (!acc) {
            for (int64_t i = 0; i < n; i++)
                y[i * iy] = x[i * ix];
        } else if (iy == 0) {
            float s = 0.0f;
            for (int64_t i = 0; i < n; i++)
                s += x[i * ix];
            *y += s;
        } else {
            for (int64_t i = 0; i < n; i++)
                y[i * iy] += x[i * ix];
        }
        int d = rank - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < ext[d]) {
                x += sx[d];
                y += sy[d];
                break;
            }
            x -= sx[d] * (ext[d] - 1);
            y -= sy[d] * (ext[d] - 1);
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* y += a * b over an index space (the plain loop for tiny products). */
static void kn_naive2(int rank, const int64_t *ext, const float *a, const int64_t *sa,
                      const float *b, const int64_t *sb, float *y, const int64_t *sy)
{
    if (rank == 0) {
        *y += *a * *b;
        return;
    }
    int64_t idx[KN_MAXDIM] = {0};
    const int64_t n = ext[rank - 1], ia = sa[rank - 1], ib = sb[rank - 1], iy = sy[rank - 1];
    for (;;) {
        if (iy == 0) {
            float s = 0.0f;
            for (int64_t i = 0; i < n; i++)
                s += a[i * ia] * b[i * ib];
            *y += s;
        } else {
            for (int64_t i = 0; i < n; i++)
                y[i * iy] += a[i * ia] * b[i * ib];
        }
        int d = rank - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < ext[d]) {
                a += sa[d];
                b += sb[d];
                y += sy[d];
                break;
            }
            a -= sa[d] * (ext[d] - 1);
            b -= sb[d] * (ext[d] - 1);
            y -= sy[d] * (ext[d] - 1);
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

static void *kn_alloc(int64_t nfloat, const char *subs, ein_error *err)
{
    void *p = malloc((size_t)(nfloat > 0 ? nfloat : 1) * sizeof(float));
    if (!p)
        ein_fail(err, EIN_ENOMEM, "einsum %s: out of memory for %" PRId64 " floats of scratch",
                 subs, nfloat);
    return p;
}

/* The block's data as f32: the block itself when it is f32, else a
 * converted copy (same layout) returned in *tmp for the caller to free. */
static int kn_as_f32(const kn_es *e, int x, const float **out, float **tmp, ein_error *err)
{
    const kn_block *k = e->blk[x];
    *tmp = NULL;
    if (k->dtype == EIN_F32) {
        *out = k->data;
        return 0;
    }
    int64_t n = ein_box_volume(&k->box);
    if (!(*tmp = kn_alloc(n, e->subs, err)))
        return EIN_ENOMEM;
    ein_dtype_to_f32(k->dtype, k->data, *tmp, (size_t)n);
    *out = *tmp;
    return 0;
}

/* Where the f32 result goes: out itself when it is f32, else a scratch
 * that kn_out_finish() converts into out. */
static int kn_out_target(const kn_es *e, float **t, ein_error *err)
{
    const kn_block *o = e->blk[2];
    if (o->dtype == EIN_F32) {
        *t = o->data;
        return 0;
    }
    return (*t = kn_alloc(ein_box_volume(&o->box), e->subs, err)) ? 0 : EIN_ENOMEM;
}

static void kn_out_finish(const kn_es *e, float *t)
{
    const kn_block *o = e->blk[2];
    if (t != o->data) {
        ein_dtype_from_f32(o->dtype, t, o->data, (size_t)ein_box_volume(&o->box));
        free(t);
    }
}

/* g = batch letters, then row letters, then column letters (the order of
 * a canonical operand); returns how many. */
static int kn_order(int *g, const int *batch, int nbt, const int *rows, int nr, const int *cols,
                    int nc)
{
    int ng = 0;
    for (int i = 0; i < nbt; i++)
        g[ng++] = batch[i];
    for (int i = 0; i < nr; i++)
        g[ng++] = rows[i];
    for (int i = 0; i < nc; i++)
        g[ng++] = cols[i];
    return ng;
}

/* Dense row-major strides for the letter list g (later letters inner). */
static int64_t kn_canon(const kn_es *e, const int *g, int ng, int64_t *st)
{
    int64_t s = 1;
    for (int i = ng - 1; i >= 0; i--) {
        st[g[i]] = s;
        s *= e->ext[g[i]];
    }
    return s;
}

/* Do the letters of g form one dimension (each one's stride is the next
 * one's stride times its extent)? Its stride goes to *stride, -1 if g is
 * empty (any stride will do). */
static int kn_merge(const int *g, int ng, const int64_t *st, const int64_t *ext, int64_t *stride)
{
    if (ng == 0) {
        *stride = -1;
        return 1;
    }
    for (int i = 0; i + 1 < ng; i++)
        if (st[g[i]] != st[g[i + 1]] * ext[g[i + 1]])
            return 0;
    *stride = st[g[ng - 1]];
    return 1;
}

static int64_t kn_prod(const int *g, int ng, const int64_t *ext)
{
    int64_t p = 1;
    for (int i = 0; i < ng; i++)
        p *= ext[g[i]];
    return p;
}

/* Can a block with letter strides st serve as the logical matrix
 * [rows, cols] for BLAS? Sets trans (0: row-major, 1: column-major) and ld. */
static int kn_fit(const kn_es *e, const int64_t *st, const int *rows, int nr,
                  const int *cols, int nc, int *trans, int64_t *ld)
{
    int64_t sr, sc;
    int64_t nrows = kn_prod(rows, nr, e->ext), ncols = kn_prod(cols, nc, e->ext);
    if (!kn_merge(rows, nr, st, e->ext, &sr) || !kn_merge(cols, nc, st, e->ext, &sc))
        return 0;
    if (sc == 1 || sc == -1) {
        *ld = sr == -1 ? (ncols > 1 ? ncols : 1) : sr;
        if (*ld >= ncols && *ld >= 1) {
            *trans = 0;
            return 1;
        }
    }
    if (sr == 1 || sr == -1) {
        *ld = sc == -1 ? (nrows > 1 ? nrows : 1) : sc;
        if (*ld >= nrows && *ld >= 1) {
            *trans = 1;
            return 1;
        }
    }
    return 0;
}

/* Make operand x (0: a, 1: b) usable as the matrix [rows, cols] per batch
 * index: in place if it fits, else a dense [batch, rows, cols] copy with its
 * own-only letters summed. Scratch goes to *tmp; canonical strides into cst. */
static int kn_prep(const kn_es *e, int x, const int *batch, int nbt, const int *rows, int nr,
                   const int *cols, int nc, int keep, int64_t *cst, kn_mat *m, float **tmp,
                   ein_error *err)
{
    unsigned own = e->act[x] & ~e->act[1 - x] & ~e->act[2];
    const float *src;
    float *conv;
    int rc;
    *tmp = NULL;
    if (!own && kn_fit(e, e->st[x], rows, nr, cols, nc, &m->trans, &m->ld)) {
        m->st = e->st[x];
        if (keep) {   /* read in place in its own dtype (kn_stream_mm) */
            m->p = e->blk[x]->dtype == EIN_F32 ? e->blk[x]->data : NULL;
            m->raw = e->blk[x]->data;
            m->dt = e->blk[x]->dtype;
            return 0;
        }
        if ((rc = kn_as_f32(e, x, &src, &conv, err)) < 0)
            return rc;
        m->p = m->raw = src;
        m->dt = EIN_F32;
        *tmp = conv;
        return 0;
    }
    int g[KN_MAXDIM], ng = kn_order(g, batch, nbt, rows, nr, cols, nc);
    memset(cst, 0, KN_NLET * sizeof *cst);   /* own letters keep stride 0: summed */
    int64_t total = kn_canon(e, g, ng, cst);
    float *dst = kn_alloc(total, e->subs, err);
    if (!dst)
        return EIN_ENOMEM;
    if ((rc = kn_as_f32(e, x, &src, &conv, err)) < 0) {
        free(dst);
        return rc;
    }
    int64_t ext[EIN_MAX_RANK], sx[EIN_MAX_RANK], sy[EIN_MAX_RANK];
    int nd = 0;
    for (int d = 0; d < e->sp.rank[x]; d++) {
        int L = e->sp.let[x][d];
        if (e->ext[L] <= 1)
            continue;
        ext[nd] = e->ext[L];
        sx[nd] = e->st[x][L];
        sy[nd] = cst[L];
        nd++;
    }
    if (own)
        memset(dst, 0, (size_t)total * sizeof *dst);
    kn_strided(nd, ext, src, sx, dst, sy, own != 0);
    free(conv);
    int64_t ncols = kn_prod(cols, nc, e->ext);
    m->p = m->raw = dst;
    m->dt = EIN_F32;
    m->st = cst;
    m->trans = 0;
    m->ld = ncols > 1 ? ncols : 1;
    *tmp = dst;
    return 0;
}

static int kn_einsum1(const kn_es *e, ein_error *err)
{
    const float *x;
    float *conv, *t;
    int rc;
    if ((rc = kn_as_f32(e, 0, &x, &conv, err)) < 0)
        return rc;
    if ((rc = kn_out_target(e, &t, err)) < 0) {
        free(conv);
        return rc;
    }
    int64_t ext[EIN_MAX_RANK], sx[EIN_MAX_RANK], sy[EIN_MAX_RANK];
    int nd = 0, acc = 0;
    for (int d = 0; d < e->sp.rank[0]; d++) {
        int L = e->sp.let[0][d];
        if (e->ext[L] <= 1)
            continue;
        ext[nd] = e->ext[L];
        sx[nd] = e->st[0][L];
        sy[nd] = e->st[2][L];
        acc |= !(e->act[2] & (1u << L));
        nd++;
    }
    /* Every output letter is a letter of a, so the walk over a covers out. */
    if (acc)
        memset(t, 0, (size_t)ein_box_volume(&e->blk[2]->box) * sizeof *t);
    kn_strided(nd, ext, x, sx, t, sy, acc);
    free(conv);
    kn_out_finish(e, t);
    return 0;
}

/* The plain loop over every active letter (out letters outermost). */
static int kn_einsum2_naive(const kn_es *e, ein_error *err)
{
    const float *a, *b;
    float *ca = NULL, *cb = NULL, *t = NULL;
    int rc;
    if ((rc = kn_as_f32(e, 0, &a, &ca, err)) < 0 || (rc = kn_as_f32(e, 1, &b, &cb, err)) < 0 ||
        (rc = kn_out_target(e, &t, err)) < 0)
        goto done;
    int64_t ext[KN_MAXDIM], sa[KN_MAXDIM], sb[KN_MAXDIM], sy[KN_MAXDIM];
    int nd = 0;
    unsigned done_mask = 0;
    for (int x = 2; x >= 0; x--) {          /* out letters first, then a's, then b's */
        int blk = x == 2 ? 2 : 1 - x;
        for (int d = 0; d < e->sp.rank[blk]; d++) {
            int L = e->sp.let[blk][d];
            if (e->ext[L] <= 1 || (done_mask & (1u << L)))
                continue;
            done_mask |= 1u << L;
            ext[nd] = e->ext[L];
            sa[nd] = e->st[0][L];
            sb[nd] = e->st[1][L];
            sy[nd] = e->st[2][L];
            nd++;
        }
    }
    memset(t, 0, (size_t)ein_box_volume(&e->blk[2]->box) * sizeof *t);
    kn_naive2(nd, ext, a, sa, b, sb, t, sy);
    kn_out_finish(e, t);
    t = NULL;
done:
    free(ca);
    free(cb);
    return rc;
}

/* A two-operand einsum as batched GEMMs: the letter classes (batch, M and
 * N in out's order; K in a's or b's order), the matrix sizes, both
 * operands as BLAS sees them and where C goes (out's f32 target, or a
 * dense [batch, M, N] scratch with canonical strides cstc). */
typedef struct kn_gemm {
    int batch[EIN_MAX_RANK], M[EIN_MAX_RANK], N[EIN_MAX_RANK], K[EIN_MAX_RANK];
    int nbt, nm, nn, nk;
    int64_t m, n, k;
    int64_t csta[KN_NLET], cstb[KN_NLET], cstc[KN_NLET];
    kn_mat a, b;
    float *pc;
    const int64_t *stc;
    int ctrans;
    int64_t ldc;
    int stream;        /* 1: kn_stream_mm (B in its own dtype), else BLAS */
} kn_gemm;

/* Sort the active letters of e into gm's batch, M, N and K and set m, n
 * and k. */
static void kn_classify(const kn_es *e, kn_gemm *gm)
{
    unsigned A = e->act[0], B = e->act[1], O = e->act[2];
    gm->nbt = gm->nm = gm->nn = gm->nk = 0;
    for (int d = 0; d < e->sp.rank[2]; d++) {
        int L = e->sp.let[2][d];
        unsigned bit = 1u << L;
        if (!(O & bit))
            continue;
        if ((A & bit) && (B & bit))
            gm->batch[gm->nbt++] = L;
        else if (A & bit)
            gm->M[gm->nm++] = L;
        else
            gm->N[gm->nn++] = L;
    }
    /* K in a's order, unless a is copied anyway (it has letters to
     * pre-sum): then b's order spares b a copy. */
    int kfrom = (A & ~B & ~O) ? 1 : 0;
    for (int d = 0; d < e->sp.rank[kfrom]; d++) {
        int L = e->sp.let[kfrom][d];
        unsigned bit = 1u << L;
        if ((A & bit) && (B & bit) && !(O & bit))
            gm->K[gm->nk++] = L;
    }
    gm->m = kn_prod(gm->M, gm->nm, e->ext);
    gm->n = kn_prod(gm->N, gm->nn, e->ext);
    gm->k = kn_prod(gm->K, gm->nk, e->ext);
}

/* Where C goes: the f32 target t itself when out's letters fit a matrix
 * [M, N], else a dense [batch, M, N] scratch returned in *cs for the
 * caller to scatter and free. 0 or EIN_ENOMEM. */
static int kn_out_matrix(const kn_es *e, kn_gemm *gm, float *t, float **cs, ein_error *err)
{
    *cs = NULL;
    if (kn_fit(e, e->st[2], gm->M, gm->nm, gm->N, gm->nn, &gm->ctrans, &gm->ldc)) {
        gm->pc = t;
        gm->stc = e->st[2];
        return 0;
    }
    int g[EIN_MAX_RANK], ng = kn_order(g, gm->batch, gm->nbt, gm->M, gm->nm, gm->N, gm->nn);
    memset(gm->cstc, 0, sizeof gm->cstc);
    if (!(*cs = kn_alloc(kn_canon(e, g, ng, gm->cstc), e->subs, err)))
        return EIN_ENOMEM;
    gm->pc = *cs;
    gm->stc = gm->cstc;
    gm->ctrans = 0;
    gm->ldc = gm->n > 1 ? gm->n : 1;
    return 0;
}

/* A few rows of A (a batch of decode steps, up to KN_FEW_ROWS): B in
 * blocks of about KN_FEW_BYTES, each block read from memory once by the
 * first row's sgemv and from cache by the others', where sgemm (OpenBLAS
 * before 0.3.27) first packs a copy of all of B. */
#define KN_FEW_ROWS 16
#define KN_FEW_BYTES (256 << 10)

static void kn_gemm_few_rows(const kn_mat *ma, const kn_mat *mb, int64_t oa, int64_t ob,
                             float *c, int64_t ldc, int m, int n, int k)
{
    int nb = (int)(KN_FEW_BYTES / ((int64_t)sizeof(float) * (k > 0 ? k : 1)));
    if (nb < 16)
        nb = 16;
    for (int j0 = 0; j0 < n; j0 += nb) {
        const int w = n - j0 < nb ? n - j0 : nb;
        for (int i = 0; i < m; i++) {
            const float *x = ma->trans ? ma->p + oa + i : ma->p + oa + (int64_t)i * ma->ld;
            const int incx = ma->trans ? (int)ma->ld : 1;
            float *y = c + (int64_t)i * ldc + j0;
            if (mb->trans) /* B stored [n, k]: rows j0.. of it */
                cblas_sgemv(CblasRowMajor, CblasNoTrans, w, k, 1.0f,
                            mb->p + ob + (int64_t)j0 * mb->ld, (int)mb->ld, x, incx, 0.0f, y, 1);
            else /* B stored [k, n]: columns j0.. of it */
                cblas_sgemv(CblasRowMajor, CblasTrans, k, w, 1.0f, mb->p + ob + j0,
                            (int)mb->ld, x, incx, 0.0f, y, 1);
        }
    }
}

/* One sgemm per batch index (batch letters odometer-style, last fastest). */
static void kn_gemm_batches(const kn_es *e, const kn_gemm *gm)
{
    const kn_mat *ma = &gm->a, *mb = &gm->b;
    const int m = (int)gm->m, n = (int)gm->n, k = (int)gm->k;
    const int64_t *stc = gm->stc;
    float *pc = gm->pc;
    enum CBLAS_TRANSPOSE opa = ma->trans ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE opb = mb->trans ? CblasTrans : CblasNoTrans;
    int64_t idx[EIN_MAX_RANK] = {0}, oa = 0, ob = 0, oc = 0;
    const size_t bsz = ein_dtype_size(mb->dt);
    for (;;) {
        if (gm->stream)
            /* A few rows (a decode step's activations): B read once, in
             * its own dtype, where sgemm (OpenBLAS before 0.3.27) first
             * packs a copy of B, doubling the memory traffic that bounds
             * it, and sgemv reads [in, out] at a fraction of the bandwidth. */
            kn_stream_mm(m, n, k, ma->p + oa, ma->ld, (const char *)mb->raw + ob * bsz,
                         mb->dt, mb->trans, mb->ld, pc + oc, gm->ldc);
        else if (!gm->ctrans && m == 1)
            /* One row by f32 weights [k, n], or one whose elements are
             * strided (a transposed): sgemv, which reads B once in place. */
            cblas_sgemv(CblasRowMajor, mb->trans ? CblasNoTrans : CblasTrans,
                        mb->trans ? n : k, mb->trans ? k : n, 1.0f, mb->p + ob, (int)mb->ld,
                        ma->p + oa, ma->trans ? (int)ma->ld : 1, 0.0f, pc + oc, 1);
        else if (!gm->ctrans && m <= KN_FEW_ROWS && k > 0)
            kn_gemm_few_rows(ma, mb, oa, ob, pc + oc, gm->ldc, m, n, k);
        else if (!gm->ctrans)
            cblas_sgemm(CblasRowMajor, opa, opb, m, n, k, 1.0f, ma->p + oa,
                        (int)ma->ld, mb->p + ob, (int)mb->ld, 0.0f, pc + oc, (int)gm->ldc);
        else /* out is stored [N, M]: C^T = B^T A^T */
            cblas_sgemm(CblasRowMajor, mb->trans ? CblasNoTrans : CblasTrans,
                        ma->trans ? CblasNoTrans : CblasTrans, n, m, k, 1.0f,
                        mb->p + ob, (int)mb->ld, ma->p + oa, (int)ma->ld, 0.0f, pc + oc,
                        (int)gm->ldc);
        int d = gm->nbt - 1;
        for (; d >= 0; d--) {
            int L = gm->batch[d];
            if (++idx[d] < e->ext[L]) {
                oa += ma->st[L];
                ob += mb->st[L];
                oc += stc[L];
                break;
            }
            oa -= ma->st[L] * (e->ext[L] - 1);
            ob -= mb->st[L] * (e->ext[L] - 1);
            oc -= stc[L] * (e->ext[L] - 1);
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* Scatter the dense [batch, M, N] product cs into t in out's letter order. */
static void kn_scatter_out(const kn_es *e, const kn_gemm *gm, const float *cs, float *t)
{
    int64_t ext[EIN_MAX_RANK], sx[EIN_MAX_RANK], sy[EIN_MAX_RANK];
    int nd = 0;
    const int *grp[3] = {gm->batch, gm->M, gm->N};
    const int ngrp[3] = {gm->nbt, gm->nm, gm->nn};
    for (int gi = 0; gi < 3; gi++)
        for (int i = 0; i < ngrp[gi]; i++) {
            int L = grp[gi][i];
            ext[nd] = e->ext[L];
            sx[nd] = gm->cstc[L];
            sy[nd] = e->st[2][L];
            nd++;
        }
    kn_strided(nd, ext, cs, sx, t, sy, 0);
}

static int kn_einsum2(const kn_es *e, ein_error *err)
{
    kn_gemm gm;
    kn_classify(e, &gm);
    const int64_t m = gm.m, n = gm.n, k = gm.k;
    if (m * n * k < KN_SMALL_GEMM)
        return kn_einsum2_naive(e, err);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return ein_fail(err, EIN_EUNSUPPORTED,
                        "einsum %s: GEMM of %" PRId64 "x%" PRId64 "x%" PRId64 " exceeds BLAS int",
                        e->subs, m, n, k);
    float *ta = NULL, *tb = NULL, *t = NULL, *cs = NULL;
    int rc;
    if ((rc = kn_prep(e, 0, gm.batch, gm.nbt, gm.M, gm.nm, gm.K, gm.nk, 0, gm.csta, &gm.a, &ta,
                      err)) < 0 ||
        (rc = kn_out_target(e, &t, err)) < 0 || (rc = kn_out_matrix(e, &gm, t, &cs, err)) < 0)
        goto done;
    /* A few rows of a (rows contiguous) into rows of C: kn_stream_mm reads
     * b once, in place in its own dtype when it fits. One row by f32
     * weights stored [k, n] stays with sgemv, which reads them faster
     * (86-88% of memcpy's traffic against 76-81%); on [n, k] (a
     * checkpoint's [out, in]) kn_stream_mm reads 86-90% against sgemv's
     * 67-72% (tools/bench-kernels -s). */
    gm.stream = m <= KN_STREAM_ROWS && !gm.ctrans && !gm.a.trans;
    if ((rc = kn_prep(e, 1, gm.batch, gm.nbt, gm.K, gm.nk, gm.N, gm.nn, gm.stream, gm.cstb,
                      &gm.b, &tb, err)) < 0)
        goto done;
    if (gm.stream && m == 1 && gm.b.dt == EIN_F32 && !gm.b.trans)
        gm.stream = 0;   /* gm.b.p is the f32 data in place or a dense copy */
    if (gm.a.ld > INT_MAX || gm.b.ld > INT_MAX || gm.ldc > INT_MAX) {
        rc = ein_fail(err, EIN_EUNSUPPORTED, "einsum %s: leading dimension exceeds BLAS int",
                      e->subs);
        goto done;
    }
    kn_gemm_batches(e, &gm);
    if (cs)
        kn_scatter_out(e, &gm, cs, t);
    kn_out_finish(e, t);
    t = NULL;
done:
    if (t && t != e->blk[2]->data)
        free(t);
    free(cs);
    free(ta);
    free(tb);
    return rc;
}

/* Rows of weight per dequantised tile when many rows of a meet quantized
 * weights (a tile of [KN_Q_TILE, k] f32, then sgemm). */
#define KN_Q_TILE 64

/* a [.., k] (any float dtype) by a quantized b [n, k] (issue 36): the one
 * form quantized weights take, "<A>k,nk-><A>n" with <A> a's other letters
 * in order. */
static int kn_einsum_q(const char *subscripts, const kn_block *a, const kn_block *b,
                       kn_block *out, ein_error *err)
{
    kn_subs sp;
    int rc = kn_subs_parse(subscripts, &sp, err);
    if (rc < 0)
        return rc;
    const char *bn = ein_dtype_name(b->dtype);
    int ra = sp.rank[0];
    int ok = sp.nin == 2 && a && out && sp.rank[1] == 2 && ra >= 1 && sp.rank[2] == ra &&
             sp.let[0][ra - 1] == sp.let[1][1] && sp.let[2][ra - 1] == sp.let[1][0] &&
             sp.let[1][0] != sp.let[1][1];
    for (int d = 0; ok && d < ra - 1; d++)
        ok = sp.let[0][d] == sp.let[2][d] && sp.let[0][d] != sp.let[1][0] &&
             sp.let[0][d] != sp.let[1][1];
    if (!ok)
        return ein_fail(err, EIN_EUNSUPPORTED, "einsum %s: b is %s; quantized weights are read "
                        "only as b of \"...k,nk->...n\" (weights [out, in], in contracted)",
                        subscripts, bn);
    if (!ein_dtype_is_float((int)a->dtype) || !ein_dtype_is_float((int)out->dtype))
        return ein_fail(err, EIN_EINVAL, "einsum %s: b is %s but a is %s and out %s; they must "
                        "be %s", subscripts, bn, ein_dtype_name(a->dtype),
                        ein_dtype_name(out->dtype), ein_dtype_float_names());
    if (a->box.rank != ra || b->box.rank != 2 || out->box.rank != ra)
        return ein_fail(err, EIN_ESHAPE, "einsum %s: box ranks do not match the subscripts",
                        subscripts);
    int64_t m = 1;
    for (int d = 0; d < ra - 1; d++) {
        if (a->box.lo[d] != out->box.lo[d] || a->box.hi[d] != out->box.hi[d])
            return ein_fail(err, EIN_ESHAPE, "einsum %s: a and out differ in dim %d",
                            subscripts, d);
        m *= a->box.hi[d] - a->box.lo[d];
    }
    const int blk = ein_dtype_block((int)b->dtype);
    int64_t k = b->box.hi[1] - b->box.lo[1], n = b->box.hi[0] - b->box.lo[0];
    if (a->box.lo[ra - 1] != b->box.lo[1] || a->box.hi[ra - 1] != b->box.hi[1] ||
        out->box.lo[ra - 1] != b->box.lo[0] || out->box.hi[ra - 1] != b->box.hi[0])
        return ein_fail(err, EIN_ESHAPE, "einsum %s: the boxes of a, b and out disagree on k or n",
                        subscripts);
    if (!ein_dtype_box_ok(b->dtype, &b->box))
        return ein_fail(err, EIN_ESHAPE, "einsum %s: b's k interval [%lld, %lld) is not on "
                        "%d-element %s blocks", subscripts, (long long)b->box.lo[1],
                        (long long)b->box.hi[1], blk, bn);
    if (m <= 0 || n <= 0)
        return 0;
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
        return ein_fail(err, EIN_EUNSUPPORTED, "einsum %s: too large for BLAS int", subscripts);
    const int64_t ldb = (int64_t)ein_dtype_bytes(b->dtype, (uint64_t)k);
    const float *x = a->data;
    float *ca = NULL, *c = out->dtype == EIN_F32 ? out->data : NULL, *tile = NULL;
    if (a->dtype != EIN_F32) {
        if (!(ca = kn_alloc(m * k, subscripts, err)))
            return EIN_ENOMEM;
        ein_dtype_to_f32(a->dtype, a->data, ca, (size_t)(m * k));
        x = ca;
    }
    if (!c && !(c = kn_alloc(m * n, subscripts, err))) {
        rc = EIN_ENOMEM;
        goto done;
    }
    if (m <= KN_STREAM_ROWS || k == 0) {
        kn_stream_mm_q(m, n, k, x, k, b->data, b->dtype, ldb, c, n);
    } else {
        int64_t tn = n < KN_Q_TILE ? n : KN_Q_TILE;
        if (!(tile = kn_alloc(tn * k, subscripts, err))) {
            rc = EIN_ENOMEM;
            goto done;
        }
        for (int64_t j0 = 0; j0 < n; j0 += KN_Q_TILE) {
            int64_t w = n - j0 < KN_Q_TILE ? n - j0 : KN_Q_TILE;
            for (int64_t j = 0; j < w; j++)
                ein_dtype_to_f32(b->dtype, (const char *)b->data + (j0 + j) * ldb, tile + j * k,
                                 (size_t)k);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)w, (int)k, 1.0f, x,
                        (int)k, tile, (int)k, 0.0f, c + j0, (int)n);
        }
    }
    if (c != out->data)
        ein_dtype_from_f32(out->dtype, c, out->data, (size_t)(m * n));
done:
    if (c != out->data)
        free(c);
    free(ca);
    free(tile);
    return rc;
}

int kn_cpu_einsum(const char *subscripts, const kn_block *a, const kn_block *b,
                  kn_block *out, ein_error *err)
{
    if (b && ein_dtype_is_block((int)b->dtype))
        return kn_einsum_q(subscripts, a, b, out, err);
    if (a && ein_dtype_is_block((int)a->dtype))
        return ein_fail(err, EIN_EUNSUPPORTED, "einsum %s: a is %s; quantized weights are read "
                        "only as b (weights [out, in])", subscripts, ein_dtype_name(a->dtype));
    kn_es e;
    memset(&e, 0, sizeof e);
    int rc = kn_subs_parse(subscripts, &e.sp, err);
    if (rc < 0)
        return rc;
    e.subs = subscripts;
    if (!a || !out)
        return ein_fail(err, EIN_EINVAL, "einsum %s: missing %s", subscripts, a ? "out" : "a");
    int given = b ? 2 : 1;
    if (given != e.sp.nin)
        return ein_fail(err, EIN_EINVAL, "einsum %s: subscripts name %d operand%s but %d given",
                        subscripts, e.sp.nin, e.sp.nin == 1 ? "" : "s", given);
    e.blk[0] = a;
    e.blk[1] = b;
    e.blk[2] = out;

    int where[KN_NLET];
    int64_t lo[KN_NLET], hi[KN_NLET];
    for (int L = 0; L < KN_NLET; L++)
        where[L] = -1;
    for (int x = 0; x < 3; x++) {
        const kn_block *k = e.blk[x];
        if (!k)
            continue;
        if (!ein_dtype_is_float((int)k->dtype))
            return ein_fail(err, EIN_EINVAL, "einsum %s: %s has dtype %s (%d); einsum computes "
                            "on f32, f16 or bf16 only", subscripts, kn_opname[x],
                            ein_dtype_name(k->dtype), (int)k->dtype);
        if (k->box.rank != e.sp.rank[x])
            return ein_fail(err, EIN_ESHAPE, "einsum %s: %s has %d letters but its box has rank %d",
                            subscripts, kn_opname[x], e.sp.rank[x], k->box.rank);
        int64_t s = 1;
        for (int d = k->box.rank - 1; d >= 0; d--) {
            int L = e.sp.let[x][d];
            if (k->box.hi[d] < k->box.lo[d])
                return ein_fail(err, EIN_ESHAPE, "einsum %s: letter %c is [%" PRId64 ":%" PRId64
                                ") in %s, an inverted interval", subscripts, 'a' + L,
                                k->box.lo[d], k->box.hi[d], kn_opname[x]);
            if (where[L] < 0) {
                where[L] = x;
                lo[L] = k->box.lo[d];
                hi[L] = k->box.hi[d];
            } else if (lo[L] != k->box.lo[d] || hi[L] != k->box.hi[d]) {
                return ein_fail(err, EIN_ESHAPE,
                                "einsum %s: letter %c is [%" PRId64 ":%" PRId64 ") in %s but [%"
                                PRId64 ":%" PRId64 ") in %s", subscripts, 'a' + L, lo[L], hi[L],
                                kn_opname[where[L]], k->box.lo[d], k->box.hi[d], kn_opname[x]);
            }
            e.ext[L] = hi[L] - lo[L];
            e.st[x][L] = s;
            s *= e.ext[L];
            if (e.ext[L] > 1)
                e.act[x] |= 1u << L;
        }
        if (s > 0 && !k->data)
            return ein_fail(err, EIN_EINVAL, "einsum %s: %s has no data", subscripts,
                            kn_opname[x]);
    }
    /* Letters of extent 1 play no part: their offset is always 0. */
    for (int x = 0; x < 3; x++)
        for (int L = 0; L < KN_NLET; L++)
            if (e.ext[L] <= 1)
                e.st[x][L] = 0;

    int64_t nout = ein_box_volume(&out->box);
    if (nout == 0)
        return 0;
    for (int L = 0; L < KN_NLET; L++)
        if (where[L] >= 0 && e.ext[L] == 0) {
            /* An empty summed letter: the sum is 0 (all-zero bits in every dtype). */
            memset(out->data, 0, (size_t)nout * ein_dtype_size(out->dtype));
            return 0;
        }
    return e.sp.nin == 1 ? kn_einsum1(&e, err) : kn_einsum2(&e, err);
}
