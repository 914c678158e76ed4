/* kernels/cuda/kn_cuda.h — placeholder */
