/* worker/wk_backend_cpu.c — placeholder until implemented. */
typedef int placeholder_wk_backend_cpu;
