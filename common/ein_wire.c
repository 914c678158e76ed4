/* common/ein_wire.c — placeholder until implemented. */
typedef int placeholder_ein_wire;
