/* worker/wk_exec.c — placeholder until implemented. */
typedef int placeholder_wk_exec;
