/* exchange/xp_atoms.h — placeholder */
