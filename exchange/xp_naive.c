/* exchange/xp_naive.c — placeholder until implemented. */
typedef int placeholder_xp_naive;
