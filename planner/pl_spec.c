/* planner/pl_spec.c — placeholder until implemented. */
typedef int placeholder_pl_spec;
