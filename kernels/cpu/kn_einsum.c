/* kernels/cpu/kn_einsum.c — placeholder until implemented. */
typedef int placeholder_kn_einsum;
