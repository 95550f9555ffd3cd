/* backoff.c - retry delays: full jitter, Retry-After, deadline. */
#include "core/backoff.h"

#include <string.h>

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

int64_t cg_backoff_delay(const struct cg_backoff_policy *policy, int retry, uint64_t random)
{
    int64_t base = clamp64(policy->base_ms, 1, CG_BACKOFF_DELAY_MAX_MS);
    int64_t cap = clamp64(policy->max_ms, base, CG_BACKOFF_DELAY_MAX_MS);
    if (retry < 1)
        retry = 1;
    /* Doubling stops at the cap, so the ceiling never overflows whatever the retry number. */
    int64_t ceiling = base;
    for (int k = 1; k < retry && ceiling < cap; k++)
        ceiling = ceiling > cap / 2 ? cap : ceiling * 2;
    if (ceiling > cap)
        ceiling = cap;
    /* The modulo bias is at most ceiling / 2^64, far below anything that matters here. */
    return (int64_t)(random % (uint64_t)(ceiling + 1));
}

cg_backoff_verdict cg_backoff_next(const struct cg_backoff_policy *policy, int attempts,
                                   int64_t retry_after_ms, int64_t now_ms, int64_t deadline_ms,
                                   int64_t min_attempt_ms, uint64_t random, int64_t *delay_ms)
{
    *delay_ms = 0;
    int max_retries = (int)clamp64(policy->max_retries, 0, CG_BACKOFF_RETRIES_MAX);
    if (attempts < 1)
        attempts = 1;
    if (attempts > max_retries)
        return CG_BACKOFF_NO_RETRIES_LEFT;
    if (min_attempt_ms < 0)
        min_attempt_ms = 0;
    /* How long the wait may be; in unsigned arithmetic so that no pair of times overflows. */
    if (deadline_ms < now_ms)
        return CG_BACKOFF_NO_TIME_LEFT;
    uint64_t left = (uint64_t)deadline_ms - (uint64_t)now_ms;
    if (left < (uint64_t)min_attempt_ms)
        return CG_BACKOFF_NO_TIME_LEFT;
    uint64_t room_u = left - (uint64_t)min_attempt_ms;
    int64_t room = room_u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)room_u;

    if (retry_after_ms >= 0) {
        if (retry_after_ms > policy->max_retry_after_ms)
            return CG_BACKOFF_RETRY_AFTER_LONG;
        if (retry_after_ms > room)
            return CG_BACKOFF_NO_TIME_LEFT;
        *delay_ms = retry_after_ms;
        return CG_BACKOFF_RETRY;
    }
    int64_t delay = cg_backoff_delay(policy, attempts, random);
    *delay_ms = delay < room ? delay : room;
    return CG_BACKOFF_RETRY;
}

/* ---------------------------------------------------------------- parsing --- */

static bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

static void trim(const char **s, size_t *len)
{
    while (*len > 0 && is_ows(**s)) {
        (*s)++;
        (*len)--;
    }
    while (*len > 0 && is_ows((*s)[*len - 1]))
        (*len)--;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Reads exactly n digits at s into *out. */
static bool digits(const char *s, size_t n, int *out)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* Leap years in [1, y] of the proleptic Gregorian calendar. */
static int64_t leaps_through(int64_t y)
{
    return y / 4 - y / 100 + y / 400;
}

static bool is_leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Seconds since the epoch of an IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" (29 bytes). */
static bool parse_imf_fixdate(const char *s, size_t len, int64_t *epoch_s)
{
    static const char days[] = "MonTueWedThuFriSatSun";
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    static const int month_days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    static const int before_month[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};

    if (len != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
        s[19] != ':' || s[22] != ':' || s[25] != ' ' || memcmp(s + 26, "GMT", 3) != 0)
        return false;
    bool day_ok = false;
    for (int i = 0; i < 7; i++)
        day_ok |= memcmp(s, days + 3 * i, 3) == 0;
    int month = -1;
    for (int i = 0; i < 12; i++)
        if (memcmp(s + 8, months + 3 * i, 3) == 0)
            month = i;
    int mday, year, hour, minute, second;
    if (!day_ok || month < 0 || !digits(s + 5, 2, &mday) || !digits(s + 12, 4, &year) ||
        !digits(s + 17, 2, &hour) || !digits(s + 20, 2, &minute) || !digits(s + 23, 2, &second))
        return false;
    int mlen = month_days[month] + (month == 1 && is_leap(year) ? 1 : 0);
    if (year < 1970 || mday < 1 || mday > mlen || hour > 23 || minute > 59 || second > 60)
        return false;
    int64_t day_count = 365 * (int64_t)(year - 1970) + leaps_through(year - 1) -
                        leaps_through(1969) + before_month[month] +
                        (month > 1 && is_leap(year) ? 1 : 0) + (mday - 1);
    *epoch_s = day_count * 86400 + hour * 3600 + minute * 60 + second;
    return true;
}

bool cg_backoff_parse_retry_after(const char *value, size_t len, int64_t now_wall_ms,
                                  int64_t *delay_ms)
{
    if (value == NULL)
        return false;
    trim(&value, &len);
    if (len == 0)
        return false;
    if (is_digit(value[0])) {
        int64_t seconds = 0;
        for (size_t i = 0; i < len; i++) {
            if (!is_digit(value[i]))
                return false;
            /* Saturate: "99999999999999999999" is a long wait, not an overflow. */
            if (seconds <= CG_BACKOFF_DELAY_MAX_MS / 1000)
                seconds = seconds * 10 + (value[i] - '0');
        }
        int64_t ms =
            seconds > CG_BACKOFF_DELAY_MAX_MS / 1000 ? CG_BACKOFF_DELAY_MAX_MS : seconds * 1000;
        *delay_ms = ms;
        return true;
    }
    int64_t epoch_s;
    if (!parse_imf_fixdate(value, len, &epoch_s))
        return false;
    int64_t at_ms = epoch_s * 1000;
    int64_t ms = at_ms <= now_wall_ms ? 0 : at_ms - now_wall_ms;
    *delay_ms = ms > CG_BACKOFF_DELAY_MAX_MS ? CG_BACKOFF_DELAY_MAX_MS : ms;
    return true;
}

bool cg_backoff_parse_retry_after_ms(const char *value, size_t len, int64_t *delay_ms)
{
    if (value == NULL)
        return false;
    trim(&value, &len);
    if (len == 0 || !is_digit(value[0]))
        return false;
    int64_t whole = 0;
    size_t i = 0;
    for (; i < len && is_digit(value[i]); i++)
        if (whole <= CG_BACKOFF_DELAY_MAX_MS)
            whole = whole * 10 + (value[i] - '0');
    bool fraction = false;
    if (i < len && value[i] == '.') {
        i++;
        if (i == len)
            return false; /* "1." */
        for (; i < len && is_digit(value[i]); i++)
            fraction |= value[i] != '0';
    }
    if (i != len)
        return false;
    int64_t ms = whole + (fraction ? 1 : 0);
    *delay_ms = ms > CG_BACKOFF_DELAY_MAX_MS ? CG_BACKOFF_DELAY_MAX_MS : ms;
    return true;
}
