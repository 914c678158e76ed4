/* exchange/xp_atoms.c — placeholder until implemented. */
typedef int placeholder_xp_atoms;
