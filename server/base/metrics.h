/* metrics.h - the metrics registry: families of counters, gauges and histograms with
 * labels, counted per thread (sharded) and summed when scraped, and the Prometheus text
 * exposition (format 0.0.4) of all of them. Pure: no I/O, no clock, no file-level state.
 *
 * A site adds a metric in two steps. Once, at start: register the family with its label
 * names and resolve a handle per label set it will use (or resolve lazily, once, and keep
 * the handle). Then, on the hot path, one call:
 *
 *   struct cg_metric_family *f = cg_metrics_counter_family(
 *       reg, "ctxguard_cache_lookups_total", "Cache lookups by layer and result.",
 *       CG_LABELS("layer", "result"), 0, NULL);
 *   struct cg_metric *redis_hit = cg_metric_get(f, CG_LABELS("redis", "hit"));
 *   ...
 *   cg_metric_inc(redis_hit, slot);
 *
 * Shards. A registry is made with a number of slots. A thread that counts claims a slot
 * once (cg_metrics_slot_claim) and passes it to every add and observe: a claimed slot is
 * written by that thread only, so an add is a plain load and store of a cell on a cache
 * line no other thread writes (no lock, no atomic read-modify-write). Scrapes sum the
 * slots. A thread without a slot of its own passes CG_METRICS_SHARED_SLOT (also what a
 * claim returns once the slots are used up): its adds are atomic read-modify-writes on a
 * shared cell, still correct, only slower under contention.
 *
 * Figures read in bulk elsewhere (a top N from the database, refreshed now and then) go in a
 * replaced family instead (cg_metrics_gauge_set_family): each cg_metric_family_replace gives
 * it a whole new set of samples, and a label set left out of the new set is gone from the
 * exposition (a gauge family with handles keeps every label set it ever had).
 *
 * Cardinality. Every family has a cap on its label sets (max_series; 0: the default,
 * CG_METRICS_DEFAULT_SERIES). Past it cg_metric_get refuses (NULL, on which every update
 * is a no-op) and counts the refusal; the exposition reports refusals in
 * ctxguard_metrics_series_refused_total{family="..."}.
 *
 * Thread-safety: everything is thread-safe after creation, except cg_metrics_free. Handles
 * and families stay valid until cg_metrics_free.
 */
#ifndef CG_BASE_METRICS_H
#define CG_BASE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct cg_metrics;
struct cg_metric_family;
struct cg_metric;

/* A NULL-terminated list of label names or values, as a compound literal. */
#define CG_LABELS(...) ((const char *const[]){__VA_ARGS__, NULL})
/* No labels. */
#define CG_NO_LABELS ((const char *const *)NULL)

#define CG_METRICS_MAX_LABELS 8           /* label names of one family */
#define CG_METRICS_MAX_BUCKETS 32         /* upper bounds of a histogram, +Inf not counted */
#define CG_METRICS_MAX_VALUE_BYTES 256    /* one label value; longer ones are refused */
#define CG_METRICS_DEFAULT_SERIES 1000    /* label sets per family unless told otherwise */
#define CG_METRICS_MAX_SERIES 100000      /* the largest cap a family may ask for */
#define CG_METRICS_MAX_OUTPUT (64u << 20) /* the largest exposition rendered */
#define CG_METRICS_SHARED_SLOT UINT32_MAX /* the slot of threads without one of their own */

/* The default buckets of the Go and Java gRPC interceptors (seconds). */
#define CG_METRICS_GRPC_BUCKETS                                                                    \
    ((const double[]){0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})
#define CG_METRICS_GRPC_NBUCKETS 11

typedef enum { CG_METRIC_COUNTER, CG_METRIC_GAUGE, CG_METRIC_HISTOGRAM } cg_metric_type;

/* A value read at scrape time (cg_metrics_callback); NaN leaves the sample out. Called on
 * the scraping thread, possibly concurrently with itself: must be thread-safe. */
typedef double (*cg_metrics_read_cb)(void *ctx);

/* A registry with `slots` exclusive slots (cg_metrics_slot_claim; at most 4096, more are
 * cut to that). NULL when out of memory. Free with cg_metrics_free. */
struct cg_metrics *cg_metrics_new(unsigned slots);

/* Frees the registry with its families and handles. NULL is a no-op. Not thread-safe: no
 * thread may use the registry or a handle of it any more. */
void cg_metrics_free(struct cg_metrics *m);

/* A slot for the calling thread's own use from now on: only that thread may pass it.
 * CG_METRICS_SHARED_SLOT once every slot is taken (or m is NULL). Thread-safe. */
uint32_t cg_metrics_slot_claim(struct cg_metrics *m);

/* Registers a family (or returns the one registered under that name, when its type, label
 * names and buckets are the same: registering twice is harmless). name is a Prometheus
 * metric name ([a-zA-Z_:][a-zA-Z0-9_:]*; counters should end in _total); help any text
 * (escaped on output); labels NULL-terminated (CG_LABELS, or CG_NO_LABELS), each a valid
 * label name, none starting with "__", histograms none named "le". max_series caps the
 * label sets (0: CG_METRICS_DEFAULT_SERIES; at most CG_METRICS_MAX_SERIES). Everything is
 * copied. NULL with err (may be NULL) filled on a bad argument (CG_INVALID_ARGUMENT), a
 * clash with a family of the same name (CG_ALREADY_EXISTS) or out of memory (CG_NOMEM).
 * Thread-safe. */
struct cg_metric_family *cg_metrics_counter_family(struct cg_metrics *m, const char *name,
                                                   const char *help, const char *const *labels,
                                                   uint32_t max_series, struct cg_err *err);
struct cg_metric_family *cg_metrics_gauge_family(struct cg_metrics *m, const char *name,
                                                 const char *help, const char *const *labels,
                                                 uint32_t max_series, struct cg_err *err);
/* buckets: nbuckets (1 to CG_METRICS_MAX_BUCKETS) finite upper bounds in rising order; the
 * +Inf bucket is added. */
struct cg_metric_family *cg_metrics_histogram_family(struct cg_metrics *m, const char *name,
                                                     const char *help, const char *const *labels,
                                                     const double *buckets, size_t nbuckets,
                                                     uint32_t max_series, struct cg_err *err);

/* A gauge family whose samples are replaced all at once (cg_metric_family_replace), for
 * figures read in bulk elsewhere: a label set left out of a replacement disappears from the
 * exposition. It has no handles (cg_metric_get refuses it). Arguments, errors and
 * registering twice as cg_metrics_gauge_family (a gauge family with handles of the same name
 * is a clash: CG_ALREADY_EXISTS). Empty until the first replacement. Thread-safe. */
struct cg_metric_family *cg_metrics_gauge_set_family(struct cg_metrics *m, const char *name,
                                                     const char *help, const char *const *labels,
                                                     uint32_t max_series, struct cg_err *err);

/* A family of one unlabelled sample whose value read(ctx) gives at scrape time (type
 * CG_METRIC_COUNTER or CG_METRIC_GAUGE): process figures, queue depths. ctx is borrowed
 * and must stay valid until cg_metrics_free. Errors as above; registering a name twice is
 * CG_ALREADY_EXISTS unless read and ctx are the same. Thread-safe. */
cg_status cg_metrics_callback(struct cg_metrics *m, const char *name, const char *help,
                              cg_metric_type type, cg_metrics_read_cb read, void *ctx,
                              struct cg_err *err) CG_MUST_CHECK;

/* The handle of one label set of f (values NULL-terminated, as many as f has label names;
 * CG_NO_LABELS for none), made on first use. NULL when f is NULL, the count of values is
 * wrong, a value is longer than CG_METRICS_MAX_VALUE_BYTES, the family is at its cap, f is
 * a replaced family (cg_metrics_gauge_set_family), or out of memory: each but the first is
 * counted as a refusal of f. Resolve once and keep
 * the handle: this takes the family's lock. Thread-safe. */
struct cg_metric *cg_metric_get(struct cg_metric_family *f, const char *const *values);

/* Adds n to a counter (1 for inc). slot: the caller's claimed slot or
 * CG_METRICS_SHARED_SLOT. h NULL, or not a counter: no-op. Thread-safe per the slot rule
 * above. */
void cg_metric_add(struct cg_metric *h, uint32_t slot, uint64_t n);
static inline void cg_metric_inc(struct cg_metric *h, uint32_t slot)
{
    cg_metric_add(h, slot, 1);
}

/* Counts value in a histogram's bucket, sum and count. NaN is ignored. h NULL, or not a
 * histogram: no-op. Thread-safe per the slot rule above. */
void cg_metric_observe(struct cg_metric *h, uint32_t slot, double value);

/* Sets a gauge, or adds delta (may be negative) to it. Not sharded: gauges are not for the
 * hot path. h NULL, or not a gauge: no-op. Thread-safe. */
void cg_metric_set(struct cg_metric *h, double value);
void cg_metric_gauge_add(struct cg_metric *h, double delta);

/* One sample of a replacement: its label values (the first as many as f has label names;
 * borrowed for the call) and its value. */
struct cg_metric_sample {
    const char *values[CG_METRICS_MAX_LABELS];
    double value;
};

/* Replaces every sample of f (a cg_metrics_gauge_set_family) with samples[0..n), in that
 * order: from now on renders show exactly these. A sample with a value missing (NULL) or
 * longer than CG_METRICS_MAX_VALUE_BYTES, one whose label set an earlier sample of the call
 * has, and every sample past f's max_series are left out, each counted as a refusal of f.
 * Everything is copied. f NULL or not such a family: CG_INVALID_ARGUMENT; out of memory:
 * CG_NOMEM; either way err (may be NULL) is filled and f keeps the samples it had.
 * Thread-safe: a concurrent render shows the whole set before or the whole set after. */
cg_status cg_metric_family_replace(struct cg_metric_family *f,
                                   const struct cg_metric_sample *samples, size_t n,
                                   struct cg_err *err) CG_MUST_CHECK;

/* Label sets f refused (cg_metric_get, cg_metric_family_replace). 0 for NULL. Thread-safe. */
uint64_t cg_metric_family_refused(const struct cg_metric_family *f);

/* The sum over all slots of a counter, or of a histogram's count; a gauge's value. For
 * tests and self-checks; 0 for NULL. Thread-safe. */
double cg_metric_value(const struct cg_metric *h);

/* Renders every family in Prometheus text format 0.0.4 (families in registration order,
 * label sets in order of first use) into a new NUL-terminated buffer (*out, length *len;
 * the caller frees it). Families without samples print nothing. CG_NOMEM, or
 * CG_RESOURCE_EXHAUSTED past CG_METRICS_MAX_OUTPUT bytes, with err filled and *out NULL.
 * Thread-safe, also while other threads count. */
cg_status cg_metrics_render(struct cg_metrics *m, char **out, size_t *len,
                            struct cg_err *err) CG_MUST_CHECK;

#endif
