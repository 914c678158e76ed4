/* coordinator/co_lower.h — placeholder */
