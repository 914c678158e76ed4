/* exchange/xp_naive.h — placeholder */
