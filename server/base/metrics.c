/* metrics.c - the metrics registry (metrics.h): families, label sets, sharded cells, the
 * Prometheus text exposition.
 *
 * Memory. The cells of a family's label sets live in chunks of SERIES_PER_CHUNK label sets,
 * made when the first label set of the chunk is. A chunk holds one block per slot (the
 * exclusive slots, then the shared one), each block starting on its own cache line, so a
 * thread counting into its slot writes lines no other thread writes; a label set's cells in
 * slot s are `stride` cells after its cells in slot s - 1. The memory of a family grows with
 * the label sets it uses, not with its cap.
 *
 * Publication. A label set is filled, then its pointer stored and the family's count of
 * label sets raised with release order; the exposition reads the count with acquire order
 * and so sees only complete label sets, without taking the family's lock. Label sets are
 * never removed, so their pointers stay valid until cg_metrics_free.
 *
 * Replaced families. A family made by cg_metrics_gauge_set_family has no label sets of the
 * kind above: it holds one set of samples (struct sample_set), swapped whole under the
 * family's lock by cg_metric_family_replace and rendered under that lock, so a render sees
 * one set from its first sample to its last; the set swapped out is freed after the lock is
 * let go. Replacements are rare (a periodic refresh) and renders short, so the lock is
 * not contended in practice.
 */
#include "base/metrics.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SERIES_PER_CHUNK 64
#define CACHE_LINE 64
#define MAX_SLOTS 4096
#define NAME_MAX_BYTES 200
#define HELP_MAX_BYTES 1024
#define REFUSED_FAMILY "ctxguard_metrics_series_refused_total"

typedef _Atomic uint64_t cell_t;

struct cg_metric {
    struct cg_metric_family *family;
    cell_t *cells;          /* this label set's cells in slot 0 (NULL for gauges) */
    size_t stride;          /* cells from one slot's block to the next */
    uint32_t nslots;        /* exclusive slots; the shared slot's block is the one after */
    _Atomic uint64_t gauge; /* gauges: the value's bits */
    uint64_t hash;          /* of the values, to skip most comparisons when resolving */
    char *values[CG_METRICS_MAX_LABELS];
};

/* The samples of a replaced family, each with its copies of the label values. */
struct sample_set {
    size_t n;
    struct set_sample {
        char *values[CG_METRICS_MAX_LABELS];
        uint64_t hash;
        double value;
    } samples[];
};

struct cg_metric_family {
    struct cg_metrics *registry;
    char *name;
    char *help;
    cg_metric_type type;
    size_t nlabels;
    char *labels[CG_METRICS_MAX_LABELS];
    size_t nbuckets;
    double buckets[CG_METRICS_MAX_BUCKETS];
    size_t width;            /* cells per label set and slot: 1 for counters, nbuckets + 2 (the
                              * buckets, +Inf, the sum's bits) for histograms, 0 for gauges */
    cg_metrics_read_cb read; /* callback families: one unlabelled sample */
    void *read_ctx;
    bool replaced;          /* cg_metrics_gauge_set_family: samples in `set`, no label sets */
    struct sample_set *set; /* replaced families: the current samples (NULL: none yet) */
    uint32_t max_series;

    pthread_mutex_t lock;      /* resolving and making label sets */
    struct cg_metric **series; /* max_series entries, the first nseries filled */
    _Atomic uint32_t nseries;
    cell_t **chunks; /* ceil(max_series / SERIES_PER_CHUNK) entries */
    _Atomic uint64_t refused;
    struct cg_metric_family *next; /* registration order */
};

struct cg_metrics {
    uint32_t nslots;
    _Atomic uint32_t next_slot;
    pthread_mutex_t lock; /* the family list */
    struct cg_metric_family *first, *last;
};

/* ---------------------------------------------------------------- registry -------- */

struct cg_metrics *cg_metrics_new(unsigned slots)
{
    struct cg_metrics *m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    m->nslots = slots > MAX_SLOTS ? MAX_SLOTS : slots;
    atomic_init(&m->next_slot, 0);
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

static void sample_set_free(struct sample_set *set, size_t nlabels)
{
    if (set == NULL)
        return;
    for (size_t i = 0; i < set->n; i++)
        for (size_t k = 0; k < nlabels; k++)
            free(set->samples[i].values[k]);
    free(set);
}

static void family_free(struct cg_metric_family *f)
{
    uint32_t n = atomic_load(&f->nseries);
    for (uint32_t i = 0; i < n; i++) {
        for (size_t k = 0; k < f->nlabels; k++)
            free(f->series[i]->values[k]);
        free(f->series[i]);
    }
    if (f->chunks != NULL)
        for (size_t c = 0; c < (f->max_series + SERIES_PER_CHUNK - 1) / SERIES_PER_CHUNK; c++)
            free(f->chunks[c]);
    free(f->chunks);
    free(f->series);
    sample_set_free(f->set, f->nlabels);
    for (size_t k = 0; k < f->nlabels; k++)
        free(f->labels[k]);
    free(f->name);
    free(f->help);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

void cg_metrics_free(struct cg_metrics *m)
{
    if (m == NULL)
        return;
    struct cg_metric_family *f = m->first;
    while (f != NULL) {
        struct cg_metric_family *next = f->next;
        family_free(f);
        f = next;
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

uint32_t cg_metrics_slot_claim(struct cg_metrics *m)
{
    if (m == NULL)
        return CG_METRICS_SHARED_SLOT;
    uint32_t slot = atomic_fetch_add(&m->next_slot, 1);
    /* Past the end the counter keeps growing harmlessly (2^32 claims are not made). */
    return slot < m->nslots ? slot : CG_METRICS_SHARED_SLOT;
}

/* ---------------------------------------------------------------- families -------- */

static bool is_name(const char *s, bool colons)
{
    size_t n = s == NULL ? 0 : strlen(s);
    if (n == 0 || n > NAME_MAX_BYTES)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool letter =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colons && c == ':');
        if (!letter && !(i > 0 && c >= '0' && c <= '9'))
            return false;
    }
    return true;
}

static size_t count_list(const char *const *list)
{
    size_t n = 0;
    while (list != NULL && list[n] != NULL)
        n++;
    return n;
}

/* The family's settings checked; err says what is wrong. */
static cg_status check_family(const char *name, const char *help, cg_metric_type type,
                              const char *const *labels, const double *buckets, size_t nbuckets,
                              uint32_t max_series, struct cg_err *err)
{
    if (!is_name(name, true))
        return cg_err_set(err, CG_INVALID_ARGUMENT, "metric name '%.60s' is not valid",
                          name ? name : "");
    if (help == NULL || strlen(help) > HELP_MAX_BYTES)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "metric %.60s: help missing or too long", name);
    size_t nlabels = count_list(labels);
    if (nlabels > CG_METRICS_MAX_LABELS)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "metric %.60s: more than %d labels", name,
                          CG_METRICS_MAX_LABELS);
    for (size_t i = 0; i < nlabels; i++) {
        if (!is_name(labels[i], false) || strncmp(labels[i], "__", 2) == 0 ||
            (type == CG_METRIC_HISTOGRAM && strcmp(labels[i], "le") == 0))
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "metric %.60s: label name '%.60s' is "
                              "not valid",
                              name, labels[i]);
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[i], labels[j]) == 0)
                return cg_err_set(err, CG_INVALID_ARGUMENT, "metric %.60s: label '%.60s' twice",
                                  name, labels[i]);
    }
    if (type == CG_METRIC_HISTOGRAM) {
        if (buckets == NULL || nbuckets == 0 || nbuckets > CG_METRICS_MAX_BUCKETS)
            return cg_err_set(err, CG_INVALID_ARGUMENT, "metric %.60s: 1 to %d buckets", name,
                              CG_METRICS_MAX_BUCKETS);
        for (size_t i = 0; i < nbuckets; i++)
            if (!isfinite(buckets[i]) || (i > 0 && !(buckets[i] > buckets[i - 1])))
                return cg_err_set(err, CG_INVALID_ARGUMENT,
                                  "metric %.60s: buckets must be finite and rising", name);
    }
    if (max_series > CG_METRICS_MAX_SERIES)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "metric %.60s: max_series over %d", name,
                          CG_METRICS_MAX_SERIES);
    return CG_OK;
}

/* What a registration asks for beyond name, help and labels. */
struct family_kind {
    cg_metric_type type;
    const double *buckets; /* histograms */
    size_t nbuckets;
    cg_metrics_read_cb read; /* callback families */
    void *read_ctx;
    bool replaced; /* cg_metrics_gauge_set_family */
};

/* Whether f is what a second registration describes. */
static bool same_family(const struct cg_metric_family *f, const char *const *labels,
                        const struct family_kind *kind)
{
    cg_metric_type type = kind->type;
    const double *buckets = kind->buckets;
    size_t nbuckets = kind->nbuckets;
    if (f->type != type || f->nlabels != count_list(labels) || f->read != kind->read ||
        f->read_ctx != kind->read_ctx || f->replaced != kind->replaced)
        return false;
    for (size_t i = 0; i < f->nlabels; i++)
        if (strcmp(f->labels[i], labels[i]) != 0)
            return false;
    if (type == CG_METRIC_HISTOGRAM &&
        (f->nbuckets != nbuckets || memcmp(f->buckets, buckets, nbuckets * sizeof *buckets)))
        return false;
    return true;
}

static struct cg_metric_family *family_new(const char *name, const char *help, cg_metric_type type,
                                           const char *const *labels, const double *buckets,
                                           size_t nbuckets, uint32_t max_series)
{
    struct cg_metric_family *f = calloc(1, sizeof *f);
    if (f == NULL)
        return NULL;
    pthread_mutex_init(&f->lock, NULL);
    f->type = type;
    f->max_series = max_series ? max_series : CG_METRICS_DEFAULT_SERIES;
    f->name = strdup(name);
    f->help = strdup(help);
    f->series = calloc(f->max_series, sizeof *f->series);
    f->chunks =
        calloc((f->max_series + SERIES_PER_CHUNK - 1) / SERIES_PER_CHUNK, sizeof *f->chunks);
    bool ok = f->name != NULL && f->help != NULL && f->series != NULL && f->chunks != NULL;
    f->nlabels = count_list(labels);
    for (size_t i = 0; i < f->nlabels; i++)
        ok = (f->labels[i] = strdup(labels[i])) != NULL && ok;
    if (type == CG_METRIC_HISTOGRAM) {
        f->nbuckets = nbuckets;
        memcpy(f->buckets, buckets, nbuckets * sizeof *buckets);
    }
    f->width = type == CG_METRIC_COUNTER ? 1 : type == CG_METRIC_HISTOGRAM ? nbuckets + 2 : 0;
    atomic_init(&f->nseries, 0);
    atomic_init(&f->refused, 0);
    if (!ok) {
        family_free(f);
        return NULL;
    }
    return f;
}

/* Registers (or finds) a family; the common part of the public constructors. */
static struct cg_metric_family *family_register(struct cg_metrics *m, const char *name,
                                                const char *help, const char *const *labels,
                                                const struct family_kind *kind, uint32_t max_series,
                                                struct cg_err *err)
{
    if (m == NULL) {
        cg_err_set(err, CG_INVALID_ARGUMENT, "no metrics registry");
        return NULL;
    }
    cg_metric_type type = kind->type;
    const double *buckets = kind->buckets;
    size_t nbuckets = kind->nbuckets;
    if (check_family(name, help, type, labels, buckets, nbuckets, max_series, err) != CG_OK)
        return NULL;
    pthread_mutex_lock(&m->lock);
    struct cg_metric_family *f;
    for (f = m->first; f != NULL; f = f->next)
        if (strcmp(f->name, name) == 0)
            break;
    if (f != NULL) {
        if (!same_family(f, labels, kind)) {
            cg_err_set(err, CG_ALREADY_EXISTS, "metric %.60s: registered before, differently",
                       name);
            f = NULL;
        }
    } else if ((f = family_new(name, help, type, labels, buckets, nbuckets, max_series)) == NULL) {
        cg_err_set(err, CG_NOMEM, "out of memory");
    } else {
        f->registry = m;
        f->read = kind->read;
        f->read_ctx = kind->read_ctx;
        f->replaced = kind->replaced;
        if (m->last != NULL)
            m->last->next = f;
        else
            m->first = f;
        m->last = f;
    }
    pthread_mutex_unlock(&m->lock);
    return f;
}

struct cg_metric_family *cg_metrics_counter_family(struct cg_metrics *m, const char *name,
                                                   const char *help, const char *const *labels,
                                                   uint32_t max_series, struct cg_err *err)
{
    struct family_kind kind = {.type = CG_METRIC_COUNTER};
    return family_register(m, name, help, labels, &kind, max_series, err);
}

struct cg_metric_family *cg_metrics_gauge_family(struct cg_metrics *m, const char *name,
                                                 const char *help, const char *const *labels,
                                                 uint32_t max_series, struct cg_err *err)
{
    struct family_kind kind = {.type = CG_METRIC_GAUGE};
    return family_register(m, name, help, labels, &kind, max_series, err);
}

struct cg_metric_family *cg_metrics_gauge_set_family(struct cg_metrics *m, const char *name,
                                                     const char *help, const char *const *labels,
                                                     uint32_t max_series, struct cg_err *err)
{
    struct family_kind kind = {.type = CG_METRIC_GAUGE, .replaced = true};
    return family_register(m, name, help, labels, &kind, max_series, err);
}

struct cg_metric_family *cg_metrics_histogram_family(struct cg_metrics *m, const char *name,
                                                     const char *help, const char *const *labels,
                                                     const double *buckets, size_t nbuckets,
                                                     uint32_t max_series, struct cg_err *err)
{
    struct family_kind kind = {
        .type = CG_METRIC_HISTOGRAM, .buckets = buckets, .nbuckets = nbuckets};
    return family_register(m, name, help, labels, &kind, max_series, err);
}

cg_status cg_metrics_callback(struct cg_metrics *m, const char *name, const char *help,
                              cg_metric_type type, cg_metrics_read_cb read, void *ctx,
                              struct cg_err *err)
{
    if (read == NULL || type == CG_METRIC_HISTOGRAM)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "metric %.60s: a callback gives a counter or a gauge", name);
    struct cg_err local;
    cg_err_clear(&local);
    struct family_kind kind = {.type = type, .read = read, .read_ctx = ctx};
    struct cg_metric_family *f = family_register(m, name, help, CG_NO_LABELS, &kind, 1, &local);
    if (f == NULL) {
        if (err != NULL)
            *err = local;
        return local.code;
    }
    return CG_OK;
}

/* ---------------------------------------------------------------- label sets ------ */

static uint64_t hash_values(const char *const *values, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        for (const unsigned char *p = (const unsigned char *)values[i]; *p; p++)
            h = (h ^ *p) * 1099511628211ull;
        h = (h ^ 0xff) * 1099511628211ull; /* no value contains 0xff as a separator would */
    }
    return h;
}

static struct cg_metric *find_series(struct cg_metric_family *f, const char *const *values,
                                     uint64_t hash)
{
    uint32_t n = atomic_load_explicit(&f->nseries, memory_order_relaxed);
    for (uint32_t i = 0; i < n; i++) {
        struct cg_metric *s = f->series[i];
        if (s->hash != hash)
            continue;
        size_t k = 0;
        while (k < f->nlabels && strcmp(s->values[k], values[k]) == 0)
            k++;
        if (k == f->nlabels)
            return s;
    }
    return NULL;
}

/* The cells of label set `index` in slot 0, making its chunk when it is the first there.
 * Under the family's lock. NULL when out of memory. */
static cell_t *series_cells(struct cg_metric_family *f, uint32_t index, size_t *stride)
{
    size_t per_slot = SERIES_PER_CHUNK * f->width * sizeof(cell_t);
    per_slot = (per_slot + CACHE_LINE - 1) / CACHE_LINE * CACHE_LINE;
    *stride = per_slot / sizeof(cell_t);
    cell_t **chunk = &f->chunks[index / SERIES_PER_CHUNK];
    if (*chunk == NULL) {
        size_t bytes = per_slot * ((size_t)f->registry->nslots + 1);
        void *mem = aligned_alloc(CACHE_LINE, bytes);
        if (mem == NULL)
            return NULL;
        memset(mem, 0, bytes); /* zero is a valid value of every cell (and of a double) */
        *chunk = mem;
    }
    return *chunk + (size_t)(index % SERIES_PER_CHUNK) * f->width;
}

static struct cg_metric *series_new(struct cg_metric_family *f, const char *const *values,
                                    uint64_t hash)
{
    uint32_t index = atomic_load_explicit(&f->nseries, memory_order_relaxed);
    struct cg_metric *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->family = f;
    s->hash = hash;
    s->nslots = f->registry->nslots;
    atomic_init(&s->gauge, 0);
    bool ok = true;
    for (size_t k = 0; k < f->nlabels; k++)
        ok = (s->values[k] = strdup(values[k])) != NULL && ok;
    if (ok && f->width > 0)
        ok = (s->cells = series_cells(f, index, &s->stride)) != NULL;
    if (!ok) {
        for (size_t k = 0; k < f->nlabels; k++)
            free(s->values[k]);
        free(s);
        return NULL;
    }
    f->series[index] = s;
    atomic_store_explicit(&f->nseries, index + 1, memory_order_release);
    return s;
}

struct cg_metric *cg_metric_get(struct cg_metric_family *f, const char *const *values)
{
    if (f == NULL)
        return NULL;
    size_t n = count_list(values);
    bool valid = n == f->nlabels && !f->replaced;
    for (size_t k = 0; valid && k < n; k++)
        valid = strlen(values[k]) <= CG_METRICS_MAX_VALUE_BYTES;
    if (!valid) {
        atomic_fetch_add(&f->refused, 1);
        return NULL;
    }
    uint64_t hash = hash_values(values, n);
    pthread_mutex_lock(&f->lock);
    struct cg_metric *s = find_series(f, values, hash);
    if (s == NULL && atomic_load_explicit(&f->nseries, memory_order_relaxed) < f->max_series)
        s = series_new(f, values, hash);
    pthread_mutex_unlock(&f->lock);
    if (s == NULL)
        atomic_fetch_add(&f->refused, 1);
    return s;
}

uint64_t cg_metric_family_refused(const struct cg_metric_family *f)
{
    return f == NULL ? 0 : atomic_load(&f->refused);
}

/* ---------------------------------------------------------------- replaced families */

/* Whether the first set->n samples hold the label set values (of hash). */
static bool set_has(const struct sample_set *set, size_t nlabels, const char *const *values,
                    uint64_t hash)
{
    for (size_t i = 0; i < set->n; i++) {
        const struct set_sample *s = &set->samples[i];
        if (s->hash != hash)
            continue;
        size_t k = 0;
        while (k < nlabels && strcmp(s->values[k], values[k]) == 0)
            k++;
        if (k == nlabels)
            return true;
    }
    return false;
}

/* Whether a sample's label values may be kept: each there and not too long. */
static bool sample_valid(const struct cg_metric_sample *in, size_t nlabels)
{
    for (size_t k = 0; k < nlabels; k++)
        if (in->values[k] == NULL || strlen(in->values[k]) > CG_METRICS_MAX_VALUE_BYTES)
            return false;
    return true;
}

cg_status cg_metric_family_replace(struct cg_metric_family *f,
                                   const struct cg_metric_sample *samples, size_t n,
                                   struct cg_err *err)
{
    if (f == NULL || !f->replaced)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "not a replaced metric family");
    if (samples == NULL && n > 0)
        return cg_err_set(err, CG_INVALID_ARGUMENT, "metric %.60s: no samples", f->name);
    size_t cap = n < f->max_series ? n : f->max_series;
    struct sample_set *set = malloc(sizeof *set + cap * sizeof set->samples[0]);
    if (set == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    set->n = 0;
    uint64_t refused = 0;
    for (size_t i = 0; i < n; i++) {
        const struct cg_metric_sample *in = &samples[i];
        uint64_t hash = sample_valid(in, f->nlabels) ? hash_values(in->values, f->nlabels) : 0;
        if (set->n == f->max_series || !sample_valid(in, f->nlabels) ||
            set_has(set, f->nlabels, in->values, hash)) {
            refused++;
            continue;
        }
        struct set_sample *s = &set->samples[set->n];
        memset(s->values, 0, sizeof s->values);
        bool ok = true;
        for (size_t k = 0; k < f->nlabels; k++)
            ok = (s->values[k] = strdup(in->values[k])) != NULL && ok;
        if (!ok) {
            for (size_t k = 0; k < f->nlabels; k++)
                free(s->values[k]);
            sample_set_free(set, f->nlabels);
            return cg_err_set(err, CG_NOMEM, "out of memory");
        }
        s->hash = hash;
        s->value = in->value;
        set->n++;
    }
    pthread_mutex_lock(&f->lock);
    struct sample_set *old = f->set;
    f->set = set;
    pthread_mutex_unlock(&f->lock);
    if (refused > 0)
        atomic_fetch_add(&f->refused, refused);
    sample_set_free(old, f->nlabels);
    return CG_OK;
}

/* ---------------------------------------------------------------- counting -------- */

static double bits_double(uint64_t bits)
{
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
}

static uint64_t double_bits(double d)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    return bits;
}

/* The cell `offset` of h in the caller's slot; *shared: the slot is the shared one. */
static cell_t *slot_cell(struct cg_metric *h, uint32_t slot, size_t offset, bool *shared)
{
    *shared = slot >= h->nslots;
    if (*shared)
        slot = h->nslots;
    return h->cells + (size_t)slot * h->stride + offset;
}

/* An exclusive slot has one writer: a relaxed load and store suffice (the scrape reads
 * whole values, never torn ones). The shared slot has many: an atomic add. */
static void cell_add(cell_t *c, bool shared, uint64_t n)
{
    if (shared)
        atomic_fetch_add_explicit(c, n, memory_order_relaxed);
    else
        atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                              memory_order_relaxed);
}

static void cell_add_double(cell_t *c, bool shared, double v)
{
    uint64_t old = atomic_load_explicit(c, memory_order_relaxed);
    if (!shared) {
        atomic_store_explicit(c, double_bits(bits_double(old) + v), memory_order_relaxed);
        return;
    }
    while (!atomic_compare_exchange_weak_explicit(c, &old, double_bits(bits_double(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

void cg_metric_add(struct cg_metric *h, uint32_t slot, uint64_t n)
{
    if (h == NULL || h->family->type != CG_METRIC_COUNTER)
        return;
    bool shared;
    cell_t *cell = slot_cell(h, slot, 0, &shared);
    cell_add(cell, shared, n);
}

void cg_metric_observe(struct cg_metric *h, uint32_t slot, double value)
{
    if (h == NULL || h->family->type != CG_METRIC_HISTOGRAM || isnan(value))
        return;
    const struct cg_metric_family *f = h->family;
    size_t b = 0;
    while (b < f->nbuckets && value > f->buckets[b])
        b++; /* b == nbuckets: the +Inf bucket */
    bool shared;
    cell_t *cells = slot_cell(h, slot, 0, &shared);
    cell_add(&cells[b], shared, 1);
    cell_add_double(&cells[f->nbuckets + 1], shared, value);
}

void cg_metric_set(struct cg_metric *h, double value)
{
    if (h != NULL && h->family->type == CG_METRIC_GAUGE)
        atomic_store(&h->gauge, double_bits(value));
}

void cg_metric_gauge_add(struct cg_metric *h, double delta)
{
    if (h != NULL && h->family->type == CG_METRIC_GAUGE)
        cell_add_double(&h->gauge, true, delta);
}

/* The sum over all slots (the shared one included) of h's cell `offset`. */
static uint64_t sum_cell(const struct cg_metric *h, size_t offset)
{
    uint64_t total = 0;
    for (size_t s = 0; s <= h->nslots; s++)
        total += atomic_load_explicit(&h->cells[s * h->stride + offset], memory_order_relaxed);
    return total;
}

static double sum_cell_double(const struct cg_metric *h, size_t offset)
{
    double total = 0;
    for (size_t s = 0; s <= h->nslots; s++)
        total += bits_double(
            atomic_load_explicit(&h->cells[s * h->stride + offset], memory_order_relaxed));
    return total;
}

double cg_metric_value(const struct cg_metric *h)
{
    if (h == NULL)
        return 0;
    const struct cg_metric_family *f = h->family;
    if (f->type == CG_METRIC_GAUGE)
        return bits_double(atomic_load(&h->gauge));
    if (f->type == CG_METRIC_COUNTER)
        return (double)sum_cell(h, 0);
    uint64_t count = 0;
    for (size_t b = 0; b <= f->nbuckets; b++)
        count += sum_cell(h, b);
    return (double)count;
}

/* ---------------------------------------------------------------- exposition ------ */

struct out {
    char *buf;
    size_t len, cap;
    cg_status st; /* the first failure; later writes do nothing */
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->st != CG_OK)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (cap < o->len + n + 1)
            cap *= 2;
        if (cap > CG_METRICS_MAX_OUTPUT) {
            o->st = CG_RESOURCE_EXHAUSTED;
            return;
        }
        char *nb = realloc(o->buf, cap);
        if (nb == NULL) {
            o->st = CG_NOMEM;
            return;
        }
        o->buf = nb;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    o->buf[o->len] = '\0';
}

static void puts_(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* s with `\` and newline escaped, and `"` too when quote (label values; HELP leaves it). */
static void put_escaped(struct out *o, const char *s, bool quote)
{
    const char *run = s;
    for (const char *p = s; *p; p++) {
        const char *esc = *p == '\\'           ? "\\\\"
                          : *p == '\n'         ? "\\n"
                          : quote && *p == '"' ? "\\\""
                                               : NULL;
        if (esc == NULL)
            continue;
        put(o, run, (size_t)(p - run));
        puts_(o, esc);
        run = p + 1;
    }
    puts_(o, run);
}

/* A whole number as such, else the shortest decimal that reads back as v (Go's strconv 'g', -1
 * gives the same for the bucket bounds operators know: 0.005, 2.5, 10), or NaN, +Inf, -Inf. */
static void format_double(double v, char out[40])
{
    if (isnan(v)) {
        snprintf(out, 40, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, 40, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, 40, "%.0f", v); /* whole numbers as such, not 1.2e+06 */
        return;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(out, 40, "%.*g", digits, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

static void put_double(struct out *o, double v)
{
    char num[40];
    format_double(v, num);
    puts_(o, num);
}

static void put_u64(struct out *o, uint64_t v)
{
    char num[24];
    snprintf(num, sizeof num, "%" PRIu64, v);
    puts_(o, num);
}

/* name{labels[,le="bound"]} and a space: the label values are values (f->nlabels of them),
 * suffix follows the name, le NULL for none. */
static void put_series(struct out *o, const struct cg_metric_family *f, char *const *values,
                       const char *suffix, const char *le)
{
    puts_(o, f->name);
    puts_(o, suffix);
    if (f->nlabels == 0 && le == NULL) {
        puts_(o, " ");
        return;
    }
    puts_(o, "{");
    for (size_t k = 0; k < f->nlabels; k++) {
        if (k > 0)
            puts_(o, ",");
        puts_(o, f->labels[k]);
        puts_(o, "=\"");
        put_escaped(o, values[k], true);
        puts_(o, "\"");
    }
    if (le != NULL) {
        puts_(o, f->nlabels > 0 ? ",le=\"" : "le=\"");
        puts_(o, le);
        puts_(o, "\"");
    }
    puts_(o, "} ");
}

static void put_header(struct out *o, const char *name, const char *help, cg_metric_type type)
{
    puts_(o, "# HELP ");
    puts_(o, name);
    puts_(o, " ");
    put_escaped(o, help, false);
    puts_(o, "\n# TYPE ");
    puts_(o, name);
    puts_(o, type == CG_METRIC_COUNTER ? " counter\n"
             : type == CG_METRIC_GAUGE ? " gauge\n"
                                       : " histogram\n");
}

/* A histogram's buckets (cumulative), sum and count: the count is the +Inf bucket, so the
 * two always agree even while other threads count. */
static void put_histogram(struct out *o, const struct cg_metric_family *f,
                          const struct cg_metric *s)
{
    uint64_t cumulative = 0;
    char le[40];
    for (size_t b = 0; b <= f->nbuckets; b++) {
        cumulative += sum_cell(s, b);
        if (b < f->nbuckets)
            format_double(f->buckets[b], le);
        else
            snprintf(le, sizeof le, "+Inf");
        put_series(o, f, s->values, "_bucket", le);
        put_u64(o, cumulative);
        puts_(o, "\n");
    }
    put_series(o, f, s->values, "_sum", NULL);
    put_double(o, sum_cell_double(s, f->nbuckets + 1));
    puts_(o, "\n");
    put_series(o, f, s->values, "_count", NULL);
    put_u64(o, cumulative);
    puts_(o, "\n");
}

/* A replaced family's current samples, under its lock (one whole set). */
static void put_replaced(struct out *o, struct cg_metric_family *f)
{
    pthread_mutex_lock(&f->lock);
    const struct sample_set *set = f->set;
    if (set != NULL && set->n > 0) {
        put_header(o, f->name, f->help, f->type);
        for (size_t i = 0; i < set->n; i++) {
            put_series(o, f, set->samples[i].values, "", NULL);
            put_double(o, set->samples[i].value);
            puts_(o, "\n");
        }
    }
    pthread_mutex_unlock(&f->lock);
}

static void put_family(struct out *o, struct cg_metric_family *f)
{
    if (f->replaced) {
        put_replaced(o, f);
        return;
    }
    if (f->read != NULL) {
        double v = f->read(f->read_ctx);
        if (isnan(v))
            return;
        put_header(o, f->name, f->help, f->type);
        puts_(o, f->name);
        puts_(o, " ");
        put_double(o, v);
        puts_(o, "\n");
        return;
    }
    uint32_t n = atomic_load_explicit(&f->nseries, memory_order_acquire);
    if (n == 0)
        return;
    put_header(o, f->name, f->help, f->type);
    for (uint32_t i = 0; i < n; i++) {
        const struct cg_metric *s = f->series[i];
        if (f->type == CG_METRIC_HISTOGRAM) {
            put_histogram(o, f, s);
            continue;
        }
        put_series(o, f, s->values, "", NULL);
        if (f->type == CG_METRIC_COUNTER)
            put_u64(o, sum_cell(s, 0));
        else
            put_double(o, bits_double(atomic_load(&s->gauge)));
        puts_(o, "\n");
    }
}

/* The refusals of every family that refused a label set, as a family of its own. */
static void put_refusals(struct out *o, const struct cg_metrics *m)
{
    bool header = false;
    for (const struct cg_metric_family *f = m->first; f != NULL; f = f->next) {
        uint64_t refused = atomic_load(&f->refused);
        if (refused == 0)
            continue;
        if (!header)
            put_header(o, REFUSED_FAMILY,
                       "Label sets a metric family refused: past its cap of label sets, or "
                       "with a value too long.",
                       CG_METRIC_COUNTER);
        header = true;
        puts_(o, REFUSED_FAMILY "{family=\"");
        puts_(o, f->name); /* a metric name needs no escaping */
        puts_(o, "\"} ");
        put_u64(o, refused);
        puts_(o, "\n");
    }
}

cg_status cg_metrics_render(struct cg_metrics *m, char **out, size_t *len, struct cg_err *err)
{
    *out = NULL;
    *len = 0;
    struct out o = {.buf = NULL, .len = 0, .cap = 0, .st = CG_OK};
    put(&o, "", 0); /* an empty registry still gives an empty string */
    pthread_mutex_lock(&m->lock);
    for (struct cg_metric_family *f = m->first; f != NULL && o.st == CG_OK; f = f->next)
        put_family(&o, f);
    put_refusals(&o, m);
    pthread_mutex_unlock(&m->lock);
    if (o.st != CG_OK) {
        free(o.buf);
        if (o.st == CG_NOMEM)
            return cg_err_set(err, CG_NOMEM, "out of memory rendering the metrics");
        return cg_err_set(err, o.st, "the metrics exceed %u bytes", CG_METRICS_MAX_OUTPUT);
    }
    *out = o.buf;
    *len = o.len;
    return CG_OK;
}
