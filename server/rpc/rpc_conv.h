/* rpc_conv.h - ctxguard.v1 Conversation <-> the core conversation model (core/conv.h), for
 * every ContextService method that takes or returns a conversation.
 *
 * In: exactly one of messages / openai_json / anthropic_json / responses_json / gemini_json,
 * plus `tools`. Every limit of common.proto is checked and an error names the field the way a
 * client wrote it:
 *     conversation.messages[2].parts[0].tool_call.id: required (1..256 characters)
 *     conversation.openai_json: $.messages[3].role: unknown role "bot"
 * Strings are UTF-8 already (the decoder checks every string field). Internal to rpc/.
 */
#ifndef CG_RPC_CONV_H
#define CG_RPC_CONV_H

#include "core/conv.h"
#include "ctxguard/v1/common.pb-c.h"
#include "rpc/rpc.h"

#define CG_RPC_CONV_URL_MAX 8192
#define CG_RPC_CONV_MEDIA_TYPE_MAX 100
#define CG_RPC_CONV_PIXELS_MAX 100000
#define CG_RPC_CONV_DESCRIPTION_MAX 65536
/* The largest ctxguard.v1.ConversationFormat value. */
#define CG_RPC_CONV_FORMAT_MAX 5

/* Reads `in` (NULL: INVALID_ARGUMENT naming `field`) into a new conversation in *out, which
 * the caller frees with cg_conv_free. field is the name the request gives the conversation
 * ("conversation"). Conversations take at most 4 x call->max_message_bytes of memory (the
 * default cap when that is 0). On error fills call->err (INVALID_ARGUMENT naming the field,
 * RESOURCE_EXHAUSTED for size) and *out is NULL. */
cg_status cg_rpc_conv_in(struct cg_rpc_call *call, const char *field,
                         const Ctxguard__V1__Conversation *in, struct cg_conv **out) CG_MUST_CHECK;

/* conv as a Conversation in `format` (a ctxguard.v1.ConversationFormat value; UNSPECIFIED:
 * the format conv was read from), allocated in the call's arena. Tools go in the JSON when
 * they came in it, in `tools` otherwise. On error (a conversation the format cannot carry, out
 * of memory) fills call->err and returns its status. */
cg_status cg_rpc_conv_out(struct cg_rpc_call *call, const struct cg_conv *conv, int format,
                          Ctxguard__V1__Conversation **out) CG_MUST_CHECK;

/* cg_rpc_conv_out with the JSON text already rendered (rendered_len bytes, in the JSON
 * format `format` names; borrowed, copied into the arena); rendered NULL: rendered here. */
cg_status cg_rpc_conv_out_rendered(struct cg_rpc_call *call, const struct cg_conv *conv, int format,
                                   const char *rendered, size_t rendered_len,
                                   Ctxguard__V1__Conversation **out) CG_MUST_CHECK;

/* conv's message `index` as a ctxguard.v1.Message in the call's arena (for packing alone);
 * NULL when out of memory. Strings are cut at an embedded NUL byte. */
const ProtobufCMessage *cg_rpc_conv_message_out(struct cg_rpc_call *call,
                                                const struct cg_conv *conv, size_t index);

/* conv's messages as a MessageList in the call's arena; NULL when out of memory. Strings are
 * cut at an embedded NUL byte (proto strings cannot hold one). */
Ctxguard__V1__MessageList *cg_rpc_conv_messages_out(struct cg_rpc_call *call,
                                                    const struct cg_conv *conv);

#endif
