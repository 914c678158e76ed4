/* planner/pl_optimize.h — placeholder */
