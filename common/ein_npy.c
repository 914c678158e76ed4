/* common/ein_npy.c — placeholder until implemented. */
typedef int placeholder_ein_npy;
