/* worker/wk_exec.h — placeholder */
