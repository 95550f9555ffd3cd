/* redact_conv.h - redaction of a whole conversation (core/conv.h) with core/redact.h: the copy
 * a summarizer reads, every text in it redacted. Pure: no I/O, no shared state (the caller
 * brings the pseudonym session and the buffer).
 */
#ifndef CG_CORE_REDACT_CONV_H
#define CG_CORE_REDACT_CONV_H

#include "base/status.h"
#include "core/conv.h"
#include "core/redact.h"

/* A copy of src (*out, the caller frees it with cg_conv_free) in which every text a
 * summarizer reads (text, tool call arguments, tool results, reasoning that is not already
 * redacted) is redacted by options with session's labels, through buf; images are left
 * out, tool call ids and names kept. The copy may take twice src's byte limit (labels may
 * be longer than the values they replace). counts is added to. On error *out is NULL and
 * err says why: "field 'conversation': ..." (RESOURCE_EXHAUSTED when out of memory or
 * over a cap). Not thread-safe for one session (the caller holds it). */
cg_status cg_redact_conv(const struct cg_redact_options *options, struct cg_redact_session *session,
                         struct cg_redact_buf *buf, struct cg_redact_counts *counts,
                         const struct cg_conv *src, struct cg_conv **out,
                         struct cg_err *err) CG_MUST_CHECK;

#endif
