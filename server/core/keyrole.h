/* keyrole.h - what an API key may do: its role and the sets of roles a method allows
 * (README "Roles and keys"); the subtree a scope-bound key may reach is cg_scope_within
 * (core/scope.h).
 *
 * The role numbers are admin.proto's ApiKeyRole and the api_keys.role column's. A method
 * names the roles it allows as a mask of CG_ALLOW_* bits; the server's admin key is a
 * principal of its own (CG_ALLOW_SERVER_ADMIN), never a tenant role.
 * Pure: no I/O, no allocation; thread-safe.
 */
#ifndef CG_CORE_KEYROLE_H
#define CG_CORE_KEYROLE_H

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    CG_KEY_ROLE_NONE = 0,     /* the server's admin key (no tenant role) */
    CG_KEY_ROLE_AGENT = 1,    /* spends, counts and compresses; reads its scopes */
    CG_KEY_ROLE_VIEWER = 2,   /* reads only */
    CG_KEY_ROLE_OPERATOR = 3, /* viewer + budgets, closes, approvals, audit, keys below it */
    CG_KEY_ROLE_ADMIN = 4,    /* everything inside the tenant */
} cg_key_role;

#define CG_KEY_ROLE_MAX CG_KEY_ROLE_ADMIN

/* Who may call a method: an OR of these bits. */
#define CG_ALLOW_ANYONE (1u << 0)       /* no key needed (health, reflection) */
#define CG_ALLOW_SERVER_ADMIN (1u << 1) /* the server's admin key */
#define CG_ALLOW_KEY_ROLE(r) (1u << (1 + (unsigned)(r)))
#define CG_ALLOW_AGENT CG_ALLOW_KEY_ROLE(CG_KEY_ROLE_AGENT)
#define CG_ALLOW_VIEWER CG_ALLOW_KEY_ROLE(CG_KEY_ROLE_VIEWER)
#define CG_ALLOW_OPERATOR CG_ALLOW_KEY_ROLE(CG_KEY_ROLE_OPERATOR)
#define CG_ALLOW_TENANT_ADMIN CG_ALLOW_KEY_ROLE(CG_KEY_ROLE_ADMIN)
#define CG_ALLOW_TENANT_KEYS                                                                       \
    (CG_ALLOW_AGENT | CG_ALLOW_VIEWER | CG_ALLOW_OPERATOR | CG_ALLOW_TENANT_ADMIN)

/* "agent", "viewer", "operator", "admin"; "server_admin" for CG_KEY_ROLE_NONE; "?" otherwise. */
const char *cg_key_role_name(cg_key_role role);

/* The role named s ("agent" .. "admin", lower case). False for anything else. */
bool cg_key_role_parse(const char *s, cg_key_role *out);

/* Whether role (a tenant role) is one of the valid ones, 1..CG_KEY_ROLE_MAX. */
bool cg_key_role_valid(int role);

/* Whether a key of role may call a method that allows mask. */
bool cg_key_role_allowed(unsigned mask, cg_key_role role);

/* Writes the names of the tenant roles in mask, comma-separated ("operator, admin"), and
 * "the server's admin key" when it allows that, into out (cut to cap - 1 bytes). */
void cg_key_role_mask_text(unsigned mask, char *out, size_t cap);

#endif
