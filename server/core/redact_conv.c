/* redact_conv.c - the redacted copy of a conversation (redact_conv.h). */
#include "core/redact_conv.h"

static cg_status redact_str(const struct cg_redact_options *options,
                            struct cg_redact_session *session, struct cg_redact_buf *buf,
                            struct cg_redact_counts *counts, struct cg_conv *dst,
                            const struct cg_str *in, struct cg_str *out, struct cg_err *err)
{
    struct cg_err rerr = {0};
    cg_status st = cg_redact(options, session, in->ptr, in->len, buf, counts, &rerr);
    if (st != CG_OK)
        return cg_err_set(err, st == CG_NOMEM ? CG_RESOURCE_EXHAUSTED : st,
                          "field 'conversation': %s", rerr.msg);
    st = cg_conv_str(dst, buf->data != NULL ? buf->data : "", buf->len, out, &rerr);
    if (st != CG_OK)
        return cg_err_set(err, st, "field 'conversation': %s", rerr.msg);
    return CG_OK;
}

cg_status cg_redact_conv(const struct cg_redact_options *options, struct cg_redact_session *session,
                         struct cg_redact_buf *buf, struct cg_redact_counts *counts,
                         const struct cg_conv *src, struct cg_conv **out, struct cg_err *err)
{
    *out = NULL;
    struct cg_conv_limits limits = src->limits;
    limits.max_bytes = src->limits.max_bytes * 2; /* labels may be longer than values */
    struct cg_conv *dst = cg_conv_new(&limits);
    if (dst == NULL)
        return cg_err_set(err, CG_RESOURCE_EXHAUSTED, "out of memory");
    struct cg_err cerr = {0};
    cg_status st = CG_OK;
    for (size_t m = 0; m < src->n_messages && st == CG_OK; m++) {
        const struct cg_message *sm = &src->messages[m];
        struct cg_message *dm;
        st = cg_conv_add_message(dst, sm->role, &dm, &cerr);
        if (st != CG_OK) {
            cg_err_set(err, st, "field 'conversation': %s", cerr.msg);
            break;
        }
        for (size_t p = 0; p < sm->n_parts && st == CG_OK; p++) {
            const struct cg_part *sp = &sm->parts[p];
            if (sp->kind == CG_PART_IMAGE)
                continue;
            struct cg_part *dp;
            st = cg_conv_add_part(dst, dm, sp->kind, &dp, &cerr);
            if (st != CG_OK) {
                cg_err_set(err, st, "field 'conversation': %s", cerr.msg);
                break;
            }
            switch (sp->kind) {
            case CG_PART_TEXT:
                st = redact_str(options, session, buf, counts, dst, &sp->u.text, &dp->u.text, err);
                break;
            case CG_PART_TOOL_CALL:
                dp->u.tool_call.id = sp->u.tool_call.id;
                dp->u.tool_call.name = sp->u.tool_call.name;
                st = redact_str(options, session, buf, counts, dst, &sp->u.tool_call.arguments,
                                &dp->u.tool_call.arguments, err);
                break;
            case CG_PART_TOOL_RESULT:
                dp->u.tool_result.tool_call_id = sp->u.tool_result.tool_call_id;
                dp->u.tool_result.is_error = sp->u.tool_result.is_error;
                dp->u.tool_result.tool_name = sp->u.tool_result.tool_name;
                st = redact_str(options, session, buf, counts, dst, &sp->u.tool_result.content,
                                &dp->u.tool_result.content, err);
                break;
            case CG_PART_REASONING:
                if (!sp->u.reasoning.redacted)
                    st = redact_str(options, session, buf, counts, dst, &sp->u.reasoning.text,
                                    &dp->u.reasoning.text, err);
                break;
            default:
                break;
            }
        }
    }
    if (st != CG_OK) {
        cg_conv_free(dst);
        return st;
    }
    *out = dst;
    return CG_OK;
}
