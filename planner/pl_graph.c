/* planner/pl_graph.c — placeholder until implemented. */
typedef int placeholder_pl_graph;
