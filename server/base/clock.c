/* clock.c - clock_gettime wrappers. */
#include "base/clock.h"

#include <time.h>

int64_t cg_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t cg_mono_ms(void)
{
    return cg_mono_ns() / 1000000;
}

int64_t cg_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
