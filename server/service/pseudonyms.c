/* pseudonyms.c - the sessions' pseudonym tables (pseudonyms.h). A table is used by one call
 * at a time: its own mutex is held while a call redacts; `users` keeps it from being taken
 * over meanwhile.
 */
#include "service/pseudonyms.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "base/status.h"
#include "store/store.h" /* CG_UUID_LEN */

struct cg_pseudonym_table {
    char key[CG_UUID_LEN + 2 + 4 * 200]; /* tenant_id "/" session_id (<= 200 characters) */
    uint64_t last_used;
    unsigned users;
    pthread_mutex_t lock;
    struct cg_redact_session session;
};

struct cg_pseudonyms {
    pthread_mutex_t lock;
    uint64_t clock;
    size_t n;
    struct cg_pseudonym_table *entries[];
};

struct cg_pseudonyms *cg_pseudonyms_new(size_t max_sessions)
{
    struct cg_pseudonyms *p = calloc(1, sizeof *p + max_sessions * sizeof p->entries[0]);
    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->n = max_sessions;
    return p;
}

void cg_pseudonyms_free(struct cg_pseudonyms *p)
{
    if (p == NULL)
        return;
    for (size_t i = 0; i < p->n; i++) {
        if (p->entries[i] != NULL) {
            pthread_mutex_destroy(&p->entries[i]->lock);
            free(p->entries[i]);
        }
    }
    pthread_mutex_destroy(&p->lock);
    free(p);
}

void cg_pseudonyms_seed(struct cg_redact_session *session)
{
    uint64_t seed[2] = {0, 0};
    if (cg_random_bytes(seed, sizeof seed) != CG_OK)
        seed[0] = (uint64_t)cg_mono_ns(); /* the seed only hides the hashes held in memory */
    cg_redact_session_init(session, seed[0], seed[1]);
}

struct cg_pseudonym_table *cg_pseudonyms_acquire(struct cg_pseudonyms *p, const char *tenant_id,
                                                 const char *session_id)
{
    char key[sizeof((struct cg_pseudonym_table *)0)->key];
    snprintf(key, sizeof key, "%s/%s", tenant_id, session_id);
    struct cg_pseudonym_table *e = NULL, *victim = NULL;
    size_t free_slot = SIZE_MAX;
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->n; i++) {
        struct cg_pseudonym_table *x = p->entries[i];
        if (x == NULL) {
            if (free_slot == SIZE_MAX)
                free_slot = i;
        } else if (strcmp(x->key, key) == 0) {
            e = x;
            break;
        } else if (x->users == 0 && (victim == NULL || x->last_used < victim->last_used)) {
            victim = x;
        }
    }
    bool fresh = false;
    if (e == NULL && free_slot != SIZE_MAX) {
        e = calloc(1, sizeof *e);
        if (e != NULL) {
            pthread_mutex_init(&e->lock, NULL);
            p->entries[free_slot] = e;
            fresh = true;
        }
    } else if (e == NULL && victim != NULL) {
        e = victim;
        fresh = true;
    }
    if (e != NULL) {
        if (fresh)
            snprintf(e->key, sizeof e->key, "%s", key);
        e->users++;
        e->last_used = ++p->clock;
    }
    pthread_mutex_unlock(&p->lock);
    if (e == NULL)
        return NULL;
    pthread_mutex_lock(&e->lock);
    if (fresh)
        cg_pseudonyms_seed(&e->session);
    return e;
}

struct cg_redact_session *cg_pseudonyms_session(struct cg_pseudonym_table *t)
{
    return &t->session;
}

void cg_pseudonyms_release(struct cg_pseudonyms *p, struct cg_pseudonym_table *t)
{
    pthread_mutex_unlock(&t->lock);
    pthread_mutex_lock(&p->lock);
    t->users--;
    pthread_mutex_unlock(&p->lock);
}
