/* summary_lang.c - the languages of summaries: the headings table, language detection,
 * rendering the sections as text and parsing a text back into sections. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/summary.h"
#include "core/summary_internal.h"

/* The headings table. Adding a language is adding a row (and its words in summary.c). */
static const struct cg__summary_lang langs[] = {
    {"en",
     {"Session intent", "Progress", "Key decisions", "Current state", "Next steps",
      "Important details"},
     "Tool calls"},
    {"de",
     {"Ziel der Sitzung", "Fortschritt", "Wichtige Entscheidungen", "Aktueller Stand",
      "Nächste Schritte", "Wichtige Details"},
     "Werkzeugaufrufe"},
    {"ja",
     {"セッションの目的", "進捗", "主な決定事項", "現在の状況", "次のステップ", "重要な詳細"},
     "ツール呼び出し"},
    {"fr",
     {"Objectif de la session", "Avancement", "Décisions clés", "État actuel", "Prochaines étapes",
      "Détails importants"},
     "Appels d'outils"},
    {"es",
     {"Objetivo de la sesión", "Progreso", "Decisiones clave", "Estado actual", "Próximos pasos",
      "Detalles importantes"},
     "Llamadas a herramientas"},
    {"zh", {"会话目的", "进展", "关键决定", "当前状态", "后续步骤", "重要细节"}, "工具调用"},
};
#define LANG_COUNT (sizeof langs / sizeof langs[0])

const struct cg__summary_lang *cg__summary_lang_get(const char *language)
{
    if (language != NULL)
        for (size_t i = 0; i < LANG_COUNT; i++)
            if (strcmp(langs[i].tag, language) == 0)
                return &langs[i];
    return &langs[0];
}

const char *cg_summary_language(const char *tag)
{
    if (tag == NULL)
        return "en";
    char primary[8];
    size_t n = 0;
    while (tag[n] != '\0' && tag[n] != '-' && tag[n] != '_' && n + 1 < sizeof primary) {
        primary[n] = (char)tolower((unsigned char)tag[n]);
        n++;
    }
    primary[n] = '\0';
    return cg__summary_lang_get(primary)->tag;
}

const char *cg_summary_heading(const char *language, cg_summary_section section)
{
    if ((unsigned)section >= CG_SUMMARY_SECTION_COUNT)
        return "";
    return cg__summary_lang_get(cg_summary_language(language))->headings[section];
}

/* ------------------------------------------------------------------ detection ---------- */

/* Common short words that tell the Latin-script languages apart. */
static const char *const stop_en[] = {"the",  "and",  "is",     "to",  "of",   "you", "it",
                                      "that", "this", "please", "can", "with", "for", "what",
                                      "we",   "are",  "be",     "in",  "on",   "not", NULL};
static const char *const stop_de[] = {
    "der", "die",  "das", "und", "ist", "nicht", "ich", "wir",  "bitte", "mit", "auf",    "für",
    "ein", "eine", "den", "dem", "zu",  "es",    "sie", "noch", "auch",  "wie", "kannst", NULL};
static const char *const stop_fr[] = {"le",  "les",  "et",   "est",  "des",  "une",
                                      "pas", "nous", "pour", "vous", "avec", "dans",
                                      "sur", "que",  "du",   "il",   "peux", NULL};
static const char *const stop_es[] = {"el",   "los", "las", "y",    "es",     "por",
                                      "para", "una", "con", "del",  "puedes", "que",
                                      "lo",   "su",  "al",  "pero", NULL};

struct lang_votes {
    double en, de, fr, es, ja, zh;
};

static bool word_in(const char *w, size_t n, const char *const *list)
{
    for (size_t i = 0; list[i] != NULL; i++)
        if (strlen(list[i]) == n && memcmp(list[i], w, n) == 0)
            return true;
    return false;
}

/* Adds the votes of text[0..len): one per stop word, one per two kana or Han characters. */
static void vote_text(const char *s, size_t len, struct lang_votes *v)
{
    size_t kana = 0, han = 0;
    char word[16];
    size_t wn = 0;
    bool too_long = false;
    for (size_t i = 0; i <= len; i++) {
        unsigned char c = i < len ? (unsigned char)s[i] : ' ';
        if (c >= 0xe3 && c <= 0xe9 && i + 2 < len) {
            unsigned cp = ((c & 0x0fu) << 12) | (((unsigned char)s[i + 1] & 0x3fu) << 6) |
                          ((unsigned char)s[i + 2] & 0x3fu);
            if (cp >= 0x3040 && cp <= 0x30ff)
                kana++;
            else if (cp >= 0x4e00 && cp <= 0x9fff)
                han++;
        }
        bool letter = isalpha(c) || c >= 0x80;
        if (letter && c < 0xe0) {
            if (wn + 1 < sizeof word)
                word[wn++] = (char)tolower(c);
            else
                too_long = true;
            continue;
        }
        if (wn > 0 && !too_long) {
            word[wn] = '\0';
            if (word_in(word, wn, stop_en))
                v->en += 1;
            if (word_in(word, wn, stop_de))
                v->de += 1;
            if (word_in(word, wn, stop_fr))
                v->fr += 1;
            if (word_in(word, wn, stop_es))
                v->es += 1;
            /* German's letters: ä ö ü ß (C3 A4, C3 B6, C3 BC, C3 9F). */
            for (size_t k = 0; k + 1 < wn; k++)
                if ((unsigned char)word[k] == 0xc3 &&
                    strchr("\xa4\xb6\xbc\x9f\x84\x96\x9c", word[k + 1]) != NULL)
                    v->de += 0.5;
        }
        wn = 0;
        too_long = false;
    }
    if (kana > 0) {
        v->ja += (double)(kana + han) / 2.0;
    } else {
        v->zh += (double)han / 2.0;
    }
}

static void votes_norm(struct lang_votes *v)
{
    double sum = v->en + v->de + v->fr + v->es + v->ja + v->zh;
    if (sum <= 0)
        return;
    v->en /= sum, v->de /= sum, v->fr /= sum, v->es /= sum, v->ja /= sum, v->zh /= sum;
}

static const char *votes_best(const struct lang_votes *v, const char *tie)
{
    struct {
        const char *tag;
        double score;
    } c[] = {{"en", v->en}, {"de", v->de}, {"fr", v->fr},
             {"es", v->es}, {"ja", v->ja}, {"zh", v->zh}};
    const char *best = "en";
    double best_score = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        if (c[i].score > best_score + 1e-9 || (c[i].score > best_score - 1e-9 && c[i].score > 0 &&
                                               tie != NULL && strcmp(c[i].tag, tie) == 0)) {
            best = c[i].tag;
            best_score = c[i].score;
        }
    }
    return best;
}

#define DETECT_SCAN_MAX (64u << 10) /* bytes of text looked at per role */

static const char *detect_role(const struct cg_conv *conv, size_t from, size_t to, cg_role role,
                               bool *any)
{
    struct lang_votes first = {0}, rest = {0};
    bool have_first = false;
    size_t scanned = 0;
    for (size_t m = from; m < to && scanned < DETECT_SCAN_MAX; m++) {
        const struct cg_message *msg = &conv->messages[m];
        if (msg->role != role)
            continue;
        struct lang_votes *v = have_first ? &rest : &first;
        bool had_text = false;
        for (size_t p = 0; p < msg->n_parts; p++) {
            if (msg->parts[p].kind != CG_PART_TEXT)
                continue;
            const struct cg_str *t = &msg->parts[p].u.text;
            size_t n = t->len;
            if (n > DETECT_SCAN_MAX - scanned)
                n = DETECT_SCAN_MAX - scanned;
            vote_text(t->ptr, n, v);
            scanned += n;
            had_text = had_text || n > 0;
        }
        if (had_text)
            have_first = true;
    }
    if (!have_first)
        return NULL;
    *any = true;
    const char *first_tag = votes_best(&first, NULL);
    votes_norm(&first);
    votes_norm(&rest);
    struct lang_votes sum = {
        first.en + rest.en, first.de + rest.de, first.fr + rest.fr,
        first.es + rest.es, first.ja + rest.ja, first.zh + rest.zh,
    };
    return votes_best(&sum, first_tag);
}

const char *cg_summary_detect_language(const struct cg_conv *conv, size_t from, size_t to)
{
    if (conv == NULL)
        return "en";
    if (to == 0 || to > conv->n_messages)
        to = conv->n_messages;
    bool any = false;
    const char *tag = detect_role(conv, from, to, CG_ROLE_USER, &any);
    if (tag == NULL)
        tag = detect_role(conv, from, to, CG_ROLE_ASSISTANT, &any);
    return tag != NULL ? tag : "en";
}

/* ------------------------------------------------------------------ render --------------- */

/* A growable string with a cap on nothing but memory (summaries are small). */
bool cg__summary_buf_add(struct cg__summary_buf *b, const char *s, size_t n)
{
    if (b->failed)
        return false;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->data, cap);
        if (p == NULL) {
            b->failed = true;
            return false;
        }
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

bool cg__summary_buf_str(struct cg__summary_buf *b, const char *s)
{
    return cg__summary_buf_add(b, s, strlen(s));
}

static bool section_is_paragraph(int s)
{
    return s == CG_SUMMARY_INTENT || s == CG_SUMMARY_STATE;
}

cg_status cg_summary_render(struct cg_summary *out, struct cg_err *err)
{
    const struct cg__summary_lang *lang = cg__summary_lang_get(cg_summary_language(out->language));
    struct cg__summary_buf b = {0};
    for (int s = 0; s < CG_SUMMARY_SECTION_COUNT; s++) {
        if (s > 0)
            cg__summary_buf_str(&b, "\n");
        cg__summary_buf_str(&b, "## ");
        cg__summary_buf_str(&b, lang->headings[s]);
        cg__summary_buf_str(&b, "\n");
        const struct cg_summary_list *l = &out->sections[s];
        if (l->n == 0)
            cg__summary_buf_str(&b, "-\n");
        for (size_t i = 0; i < l->n; i++) {
            if (!section_is_paragraph(s))
                cg__summary_buf_str(&b, "- ");
            else if (i > 0)
                cg__summary_buf_str(&b, " ");
            cg__summary_buf_str(&b, l->items[i]);
            if (!section_is_paragraph(s) || i + 1 == l->n)
                cg__summary_buf_str(&b, "\n");
        }
    }
    if (b.failed || b.data == NULL) {
        free(b.data);
        return cg_err_set(err, CG_NOMEM, "out of memory for the summary");
    }
    /* No trailing newline: the text ends with the last item. */
    while (b.len > 0 && b.data[b.len - 1] == '\n')
        b.data[--b.len] = '\0';
    free(out->text);
    out->text = b.data;
    out->text_len = b.len;
    return CG_OK;
}

/* ------------------------------------------------------------------ parse ---------------- */

bool cg__summary_list_add(struct cg_summary_list *l, const char *s, size_t n)
{
    char **items = realloc(l->items, (l->n + 1) * sizeof *items);
    if (items == NULL)
        return false;
    l->items = items;
    char *copy = malloc(n + 1);
    if (copy == NULL)
        return false;
    memcpy(copy, s, n);
    copy[n] = '\0';
    l->items[l->n++] = copy;
    return true;
}

static bool ascii_ieq(const char *a, size_t an, const char *b)
{
    size_t bn = strlen(b);
    if (an != bn)
        return false;
    for (size_t i = 0; i < an; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i]))
            return false;
    return true;
}

static void trim(const char **s, size_t *n)
{
    while (*n > 0 && ((*s)[0] == ' ' || (*s)[0] == '\t' || (*s)[0] == '\r')) {
        (*s)++;
        (*n)--;
    }
    while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t' || (*s)[*n - 1] == '\r'))
        (*n)--;
}

/* The section a heading line names, or -1. */
static int heading_of(const char *line, size_t n, const struct cg__summary_lang *lang)
{
    const char *s = line;
    bool marked = false;
    while (n > 0 && s[0] == '#') {
        s++, n--;
        marked = true;
    }
    trim(&s, &n);
    if (n >= 4 && s[0] == '*' && s[1] == '*') {
        s += 2, n -= 2;
        marked = true;
        if (n >= 2 && s[n - 1] == '*' && s[n - 2] == '*')
            n -= 2;
        else if (n >= 3 && s[n - 1] == ':' && s[n - 2] == '*' && s[n - 3] == '*')
            n -= 3;
    }
    trim(&s, &n);
    if (n > 0 && s[n - 1] == ':')
        n--;
    else if (n >= 3 && memcmp(s + n - 3, "\xef\xbc\x9a", 3) == 0) /* full-width colon */
        n -= 3;
    trim(&s, &n);
    const struct cg__summary_lang *en = cg__summary_lang_get("en");
    for (int k = 0; k < CG_SUMMARY_SECTION_COUNT; k++) {
        if (ascii_ieq(s, n, lang->headings[k]) || ascii_ieq(s, n, en->headings[k]))
            return k;
    }
    (void)marked;
    return -1;
}

cg_status cg_summary_parse(const char *text, size_t len, const char *language,
                           struct cg_summary *out, unsigned *found, struct cg_err *err)
{
    const struct cg__summary_lang *lang = cg__summary_lang_get(cg_summary_language(language));
    *found = 0;
    int section = -1;
    struct cg__summary_buf para = {0};
    size_t pos = 0;
    bool ok = true;
    while (pos <= len && ok) {
        const char *line = text + pos;
        const char *nl = memchr(line, '\n', len - pos);
        size_t n = nl != NULL ? (size_t)(nl - line) : len - pos;
        pos += n + 1;
        const char *s = line;
        size_t sn = n;
        trim(&s, &sn);
        int h = heading_of(s, sn, lang);
        bool item = false;
        if (h < 0 && sn >= 2 && (s[0] == '-' || s[0] == '*') && s[1] == ' ') {
            s += 2, sn -= 2, item = true;
        } else if (h < 0 && sn >= 4 && memcmp(s, "\xe2\x80\xa2", 3) == 0) { /* bullet */
            s += 3, sn -= 3, item = true;
        } else if (h < 0 && sn >= 3 && isdigit((unsigned char)s[0])) {
            size_t k = 0;
            while (k < sn && isdigit((unsigned char)s[k]))
                k++;
            if (k + 1 < sn && (s[k] == '.' || s[k] == ')') && s[k + 1] == ' ')
                s += k + 2, sn -= k + 2, item = true;
        }
        trim(&s, &sn);
        if (h >= 0 || item || sn == 0) {
            if (section >= 0 && para.len > 0)
                ok = cg__summary_list_add(&out->sections[section], para.data, para.len);
            para.len = 0;
        }
        if (h >= 0) {
            section = h;
            *found |= 1u << h;
        } else if (item) {
            /* "-" alone is an empty section's mark, not an item. */
            if (section >= 0 && sn > 0)
                ok = ok && cg__summary_list_add(&out->sections[section], s, sn);
        } else if (sn > 0 && section >= 0 && !(sn == 1 && s[0] == '-')) {
            if (para.len > 0)
                cg__summary_buf_str(&para, " ");
            cg__summary_buf_add(&para, s, sn);
        }
        if (para.failed)
            ok = false;
    }
    if (ok && section >= 0 && para.len > 0)
        ok = cg__summary_list_add(&out->sections[section], para.data, para.len);
    free(para.data);
    if (!ok)
        return cg_err_set(err, CG_NOMEM, "out of memory parsing a summary");
    return CG_OK;
}
