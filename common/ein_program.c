/* common/ein_program.c — placeholder until implemented. */
typedef int placeholder_ein_program;
