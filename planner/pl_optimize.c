/* planner/pl_optimize.c — placeholder until implemented. */
typedef int placeholder_pl_optimize;
