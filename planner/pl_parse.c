/* planner/pl_parse.c — placeholder until implemented. */
typedef int placeholder_pl_parse;
