/* exchange/xp_program.h — placeholder */
