/* kernels/cpu/kn_elementwise.c — placeholder until implemented. */
typedef int placeholder_kn_elementwise;
