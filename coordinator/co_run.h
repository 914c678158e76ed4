/* coordinator/co_run.h — placeholder */
