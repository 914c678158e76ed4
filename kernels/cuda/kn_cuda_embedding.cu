/* kernels/cuda/kn_cuda_embedding.cu — row gather out[t, :] = table[ids[t], :]
 * on the device, with kn_cpu_embedding's block rules (kernels/kn_cpu.h).
 *
 * One thread per output element. An id in [0, rows) outside the table
 * block's rows [v0, v1) writes zeros (vocabulary-parallel split); an id
 * outside [0, rows) is never used as an address: the thread prints the
 * token and the id and traps, so the stream fails with a device error that
 * the worker reports at its next synchronisation (the ids live on the
 * device, the host cannot see them without a copy the CUDA graph would
 * not capture). */
#include "kernels/cuda/kn_cuda_common.cuh"

template <typename TI, typename TT, typename TY>
__global__ void kn_cu_embedding_k(const TT *table, const TI *ids, TY *out, int64_t ntok, int64_t w,
                                  int64_t v0, int64_t v1, int64_t rows, int64_t t0)
{
    int64_t n = ntok * w;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t t = i / w, j = i % w, id = (int64_t)ids[t];
        if (id < 0 || id >= rows) {
            if (j == 0)
                printf("embedding: token %lld has id %lld, outside the table's rows [0, %lld)\n",
                       (long long)(t0 + t), (long long)id, (long long)rows);
            __trap();
        }
        float v = id >= v0 && id < v1 ? ld<TT>(table, (id - v0) * w + j) : 0.0f;
        st<TY>(out, i, v);
    }
}

extern "C" int kn_cuda_embedding(int64_t rows, const kn_block *table, const kn_block *ids,
                                 kn_block *out, void *stream, ein_error *err)
{
    const char *what = "cuda embedding";
    int rc;
    if ((rc = kn_cu_blk(what, "table", table, 2, err)) < 0 ||
        (rc = kn_cu_blk_any(what, "ids", ids, 1, err)) < 0 ||
        (rc = kn_cu_blk(what, "out", out, 2, err)) < 0)
        return rc;
    if (ids->dtype != EIN_I32 && ids->dtype != EIN_I64)
        return kn_cu_fail(err, EIN_EINVAL, "%s: ids are %s; expected i32 or i64", what,
                          ein_dtype_name(ids->dtype));
    if (rows < 1 || table->box.lo[0] < 0 || table->box.hi[0] > rows)
        return kn_cu_fail(err, EIN_ESHAPE, "%s: table block rows [%lld, %lld) are not inside a "
                          "table of %lld rows", what, (long long)table->box.lo[0],
                          (long long)table->box.hi[0], (long long)rows);
    if (ids->box.lo[0] != out->box.lo[0] || ids->box.hi[0] != out->box.hi[0] ||
        table->box.lo[1] != out->box.lo[1] || table->box.hi[1] != out->box.hi[1])
        return kn_cu_fail(err, EIN_ESHAPE, "%s: out block is not ids' tokens by the table's "
                          "columns", what);
    int64_t ntok = out->box.hi[0] - out->box.lo[0], w = out->box.hi[1] - out->box.lo[1];
    if (ntok * w == 0)
        return 0;
    cudaStream_t s = (cudaStream_t)stream;
    unsigned grid = kn_cu_grid(ntok * w, KN_CU_BLOCK);
    int64_t v0 = table->box.lo[0], v1 = table->box.hi[0], t0 = out->box.lo[0];
    KN_CU_DISPATCH(table->dtype, TT, KN_CU_DISPATCH(out->dtype, TY,
        if (ids->dtype == EIN_I32)
            kn_cu_embedding_k<int32_t, TT, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const TT *)table->data, (const int32_t *)ids->data, (TY *)out->data, ntok, w, v0,
                v1, rows, t0);
        else
            kn_cu_embedding_k<int64_t, TT, TY><<<grid, KN_CU_BLOCK, 0, s>>>(
                (const TT *)table->data, (const int64_t *)ids->data, (TY *)out->data, ntok, w, v0,
                v1, rows, t0)));
    return kn_cu_launched(what, err);
}
