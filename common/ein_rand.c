/* common/ein_rand.c — placeholder until implemented. */
typedef int placeholder_ein_rand;
