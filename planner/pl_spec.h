/* planner/pl_spec.h — placeholder */
