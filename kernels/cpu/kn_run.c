/* kernels/cpu/kn_run.c — placeholder until implemented. */
typedef int placeholder_kn_run;
