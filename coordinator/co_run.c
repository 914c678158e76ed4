/* coordinator/co_run.c — placeholder until implemented. */
typedef int placeholder_co_run;
