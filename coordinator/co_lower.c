/* coordinator/co_lower.c — placeholder until implemented. */
typedef int placeholder_co_lower;
