/* pseudonyms.h - the redaction pseudonym tables of recent sessions (core/redact.h's
 * cg_redact_session), shared by every thread, so that a value keeps its label (<EMAIL_1>)
 * across the requests of one session. One table per (tenant, session), at most
 * max_sessions of them: the least recently used idle table is taken over for a new
 * session.
 */
#ifndef CG_SERVICE_PSEUDONYMS_H
#define CG_SERVICE_PSEUDONYMS_H

#include <stddef.h>

#include "core/redact.h"

struct cg_pseudonyms;
struct cg_pseudonym_table;

/* A new set of at most max_sessions tables; NULL when out of memory. Free with
 * cg_pseudonyms_free (NULL is a no-op) once no thread uses it. */
struct cg_pseudonyms *cg_pseudonyms_new(size_t max_sessions);
void cg_pseudonyms_free(struct cg_pseudonyms *p);

/* The table of (tenant_id, session_id), made when new, held for the caller alone until
 * cg_pseudonyms_release (a table is used by one call at a time). NULL when every slot is
 * busy or memory is short: the caller then uses a session of its own. Thread-safe. */
struct cg_pseudonym_table *cg_pseudonyms_acquire(struct cg_pseudonyms *p, const char *tenant_id,
                                                 const char *session_id);

/* The labels of a held table (borrowed until cg_pseudonyms_release). */
struct cg_redact_session *cg_pseudonyms_session(struct cg_pseudonym_table *t);

/* Gives back a table that cg_pseudonyms_acquire returned. Thread-safe. */
void cg_pseudonyms_release(struct cg_pseudonyms *p, struct cg_pseudonym_table *t);

/* A fresh pseudonym session with a random seed (the seed only hides the hashes held in
 * memory). */
void cg_pseudonyms_seed(struct cg_redact_session *session);

#endif
