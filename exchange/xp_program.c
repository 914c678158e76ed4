/* exchange/xp_program.c — placeholder until implemented. */
typedef int placeholder_xp_program;
