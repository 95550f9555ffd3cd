/* clock.h - the process's clocks, in one place so that core/ can take time as an argument. */
#ifndef CG_BASE_CLOCK_H
#define CG_BASE_CLOCK_H

#include <stdint.h>

/* Monotonic time in nanoseconds / milliseconds (CLOCK_MONOTONIC). */
int64_t cg_mono_ns(void);
int64_t cg_mono_ms(void);

/* Wall-clock time in milliseconds since the Unix epoch. */
int64_t cg_wall_ms(void);

#endif
