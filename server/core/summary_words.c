/* summary_words.c - what the extractive summarizer reads in one sentence: how many specific
 * details it carries (numbers with units, ids, paths, versions, hosts, config keys, URLs) and
 * whether it words a decision, progress or a next step, in any language of the table. The
 * word lists are data; they name kinds of statement, not the content of any conversation. */
#include <ctype.h>
#include <string.h>

#include "core/summary_words.h"

/* Markers are matched in the sentence lower-cased (ASCII) with a space added at each end, so
 * a leading space asks for a word start. */
static const char *const decision_words[] = {
    /* en */ " decided",
    " decide to",
    " decision",
    " chose ",
    " chosen",
    " choose ",
    " going with",
    " go with ",
    " agreed",
    " settled on",
    " instead of",
    " switch to",
    " switched to",
    " pin ",
    " pinned",
    " we'll use",
    " we will use",
    " let's use",
    " opted",
    " must ",
    " must not",
    " never ",
    " do not ",
    " don't ",
    /* de */ " entschieden",
    " beschlossen",
    " entscheidung",
    " nehmen wir",
    " verwenden wir",
    " stattdessen",
    " festgelegt",
    " vereinbart",
    " bleiben bei",
    " muss ",
    " darf nicht",
    " niemals",
    " nicht mehr",
    /* ja */ "決定",
    "決め",
    "ことにし",
    "ことにする",
    "採用",
    "方針",
    "にしましょう",
    "を使います",
    "必ず",
    "しないで",
    /* fr */ " décidé",
    " choisi",
    " décision",
    " au lieu de",
    " on garde",
    " il ne faut pas",
    /* es */ " decidimos",
    " decidido",
    " decisión",
    " elegimos",
    " en lugar de",
    " usaremos",
    /* zh */ "决定",
    "选择",
    "采用",
    "改用",
    NULL};

static const char *const progress_words[] = {
    /* en */ " fixed",
    " found",
    " added",
    " updated",
    " changed",
    " implemented",
    " created",
    " removed",
    " wrote",
    " done",
    " completed",
    " passes",
    " passing",
    " passed",
    " merged",
    " resolved",
    " refactored",
    " renamed",
    " installed",
    " deployed",
    " migrated",
    " succeeded",
    " works",
    " now ",
    /* de */ " behoben",
    " gefunden",
    " hinzugefügt",
    " aktualisiert",
    " geändert",
    " implementiert",
    " erstellt",
    " entfernt",
    " erledigt",
    " abgeschlossen",
    " funktioniert",
    " bestanden",
    " jetzt ",
    /* ja */ "修正しました",
    "見つけ",
    "見つかり",
    "追加しました",
    "更新しました",
    "変更しました",
    "完了",
    "実装しました",
    "作成しました",
    "削除しました",
    "成功",
    /* fr */ " corrigé",
    " trouvé",
    " ajouté",
    " terminé",
    " mis à jour",
    /* es */ " corregido",
    " encontré",
    " añadido",
    " terminado",
    " actualizado",
    /* zh */ "修复",
    "完成",
    "添加",
    "找到",
    NULL};

static const char *const next_words[] = {
    /* en */ " next",
    " todo",
    " to do",
    " still need",
    " need to",
    " needs to",
    " remaining",
    " then ",
    " will ",
    " should ",
    " plan ",
    " afterwards",
    " follow-up",
    " later",
    " pending",
    " not yet",
    /* de */ " als nächstes",
    " nächste",
    " noch ",
    " müssen",
    " sollten",
    " danach",
    " offen",
    " später",
    " geplant",
    /* ja */ "次に",
    "次は",
    "予定",
    "必要があります",
    "残り",
    "今後",
    "まだ",
    "これから",
    /* fr */ " ensuite",
    " prochaine",
    " reste à",
    " il faut",
    /* es */ " siguiente",
    " después",
    " falta",
    " hay que",
    " pendiente",
    /* zh */ "下一步",
    "接下来",
    "还需要",
    "待办",
    NULL};

static const char *const error_words[] = {" error",     "error:",   " failed", " failure",
                                          " exception", " fatal",   " denied", " refused",
                                          " timed out", " timeout", " panic",  " traceback",
                                          " cannot ",   " can't ",  " unable", NULL};

/* Units after a number make it a measurement. Lower case; matched as a whole word. */
static const char *const units[] = {
    "ms",      "s",        "sec",   "secs",     "second",  "seconds",  "min",         "mins",
    "minute",  "minutes",  "h",     "hour",     "hours",   "day",      "days",        "kb",
    "mb",      "gb",       "tb",    "kib",      "mib",     "gib",      "b",           "bytes",
    "%",       "tokens",   "rps",   "qps",      "mbps",    "gbps",     "ghz",         "mhz",
    "px",      "k",        "m",     "x",        "times",   "requests", "connections", "workers",
    "threads", "replicas", "cores", "users",    "items",   "rows",     "retries",     "attempts",
    "ports",   "percent",  "mal",   "sekunden", "minuten", "stunden",  "tage",        NULL};

static bool contains(const char *hay, size_t hay_len, const char *needle)
{
    return memmem(hay, hay_len, needle, strlen(needle)) != NULL;
}

static bool any_of(const char *lc, size_t n, const char *const *list)
{
    for (size_t i = 0; list[i] != NULL; i++)
        if (contains(lc, n, list[i]))
            return true;
    return false;
}

size_t cg__summary_lower(const char *s, size_t len, char *out, size_t cap)
{
    size_t n = 0;
    out[n++] = ' ';
    for (size_t i = 0; i < len && n + 2 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        out[n++] = (char)(c < 0x80 ? tolower(c) : c);
    }
    out[n++] = ' ';
    out[n] = '\0';
    return n;
}

void cg__summary_markers(const char *lc, size_t n, bool errors_only, struct cg__summary_words *w)
{
    if (errors_only) {
        w->decision = w->progress = w->next = false;
        w->error = any_of(lc, n, error_words);
        return;
    }
    w->decision = any_of(lc, n, decision_words);
    w->progress = any_of(lc, n, progress_words);
    w->next = any_of(lc, n, next_words);
    w->error = any_of(lc, n, error_words);
}

static bool is_word_sep(unsigned char c)
{
    return c <= ' ' || c >= 0x80 || c == ',' || c == ';' || c == '(' || c == ')' || c == '[' ||
           c == ']' || c == '{' || c == '}' || c == '"' || c == '\'' || c == '`' || c == '<' ||
           c == '>' || c == '|' || c == '*';
}

static bool is_unit(const char *w, size_t n)
{
    char lc[16];
    if (n == 0 || n >= sizeof lc)
        return false;
    for (size_t i = 0; i < n; i++)
        lc[i] = (char)tolower((unsigned char)w[i]);
    while (n > 0 && (lc[n - 1] == '.' || lc[n - 1] == ',' || lc[n - 1] == ':'))
        n--;
    for (size_t i = 0; units[i] != NULL; i++)
        if (strlen(units[i]) == n && memcmp(units[i], lc, n) == 0)
            return true;
    return false;
}

/* The weight of one word as a detail. next/next_len: the following word (for units). */
static double word_weight(const char *w, size_t n, const char *next, size_t next_len)
{
    /* Trailing punctuation ends a sentence or a clause, it is not part of the value. */
    while (n > 0 && strchr(".:!?,=", w[n - 1]) != NULL)
        n--;
    while (n > 0 && (w[0] == ':' || w[0] == '='))
        w++, n--;
    if (n == 0)
        return 0;
    size_t digits = 0, alpha = 0, upper = 0, lower_then_upper = 0, slash = 0, dot = 0, under = 0,
           eq = 0, inner_dash = 0;
    bool url = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)w[i];
        if (c >= '0' && c <= '9')
            digits++;
        else if (isalpha(c)) {
            alpha++;
            if (isupper(c)) {
                upper++;
                if (i > 0 && islower((unsigned char)w[i - 1]))
                    lower_then_upper++;
            }
        } else if (c == '/')
            slash++;
        else if (c == '.' && i > 0 && i + 1 < n)
            dot++;
        else if (c == '_' && i > 0 && i + 1 < n)
            under++;
        else if (c == '=' && i > 0 && i + 1 < n)
            eq++;
        else if (c == '-' && i > 0 && i + 1 < n)
            inner_dash++;
        else if (c == ':' && i + 2 < n && w[i + 1] == '/' && w[i + 2] == '/')
            url = true;
    }
    if (url)
        return 3;
    if (eq > 0)
        return 2.5;
    if (digits > 0 && alpha > 0)
        return 3; /* ids, hosts with numbers, versions with a v, sizes like 512MB */
    if (digits > 0 && (dot > 0 || slash > 0 || inner_dash > 0 || contains(w, n, ":")))
        return 3; /* versions, addresses, dates, times */
    if (digits > 0) {
        double v = digits >= 2 ? 2 : 1;
        if (next != NULL && is_unit(next, next_len))
            v += 1.5;
        return v;
    }
    if (alpha == 0)
        return 0;
    if (slash > 0 && (w[0] == '/' || w[0] == '~' || w[0] == '.' || slash >= 2 || dot > 0))
        return 2.5; /* paths */
    if (dot > 0 && n >= 4)
        return 2; /* file names, host names, dotted keys */
    if (under > 0)
        return 2; /* config keys, identifiers */
    if (lower_then_upper > 0 && n >= 4)
        return 1.5; /* camelCase identifiers */
    if (upper == alpha && alpha >= 4 && n == alpha)
        return 0.5; /* ENV-like names, acronyms */
    return 0;
}

double cg__summary_spec(const char *s, size_t len)
{
    double spec = 0;
    size_t i = 0;
    const char *prev = NULL;
    size_t prev_len = 0;
    size_t backticks = 0;
    for (size_t k = 0; k < len; k++)
        backticks += s[k] == '`';
    while (i < len) {
        while (i < len && is_word_sep((unsigned char)s[i]))
            i++;
        size_t start = i;
        while (i < len && !is_word_sep((unsigned char)s[i]))
            i++;
        if (i == start)
            break;
        if (prev != NULL)
            spec += word_weight(prev, prev_len, s + start, i - start);
        prev = s + start;
        prev_len = i - start;
    }
    if (prev != NULL)
        spec += word_weight(prev, prev_len, NULL, 0);
    spec += (double)(backticks / 2 > 2 ? 2 : backticks / 2) * 1.5;
    return spec > 12 ? 12 : spec;
}
