/* keyrole.c - key role names, method masks and the subtree of a scope-bound key. */
#include "core/keyrole.h"

#include <stdio.h>
#include <string.h>

static const char *const role_names[] = {"server_admin", "agent", "viewer", "operator", "admin"};

const char *cg_key_role_name(cg_key_role role)
{
    if ((int)role < 0 || role > CG_KEY_ROLE_MAX)
        return "?";
    return role_names[role];
}

bool cg_key_role_parse(const char *s, cg_key_role *out)
{
    for (int r = CG_KEY_ROLE_AGENT; r <= CG_KEY_ROLE_MAX; r++) {
        if (strcmp(s, role_names[r]) == 0) {
            *out = (cg_key_role)r;
            return true;
        }
    }
    return false;
}

bool cg_key_role_valid(int role)
{
    return role >= CG_KEY_ROLE_AGENT && role <= CG_KEY_ROLE_MAX;
}

bool cg_key_role_allowed(unsigned mask, cg_key_role role)
{
    if (role == CG_KEY_ROLE_NONE)
        return (mask & CG_ALLOW_SERVER_ADMIN) != 0;
    return cg_key_role_valid((int)role) && (mask & CG_ALLOW_KEY_ROLE(role)) != 0;
}

void cg_key_role_mask_text(unsigned mask, char *out, size_t cap)
{
    if (cap == 0)
        return;
    out[0] = '\0';
    size_t at = 0;
    for (int r = CG_KEY_ROLE_AGENT; r <= CG_KEY_ROLE_MAX + 1; r++) {
        const char *name;
        if (r <= CG_KEY_ROLE_MAX) {
            if (!(mask & CG_ALLOW_KEY_ROLE(r)))
                continue;
            name = role_names[r];
        } else {
            if (!(mask & CG_ALLOW_SERVER_ADMIN))
                continue;
            name = "the server's admin key";
        }
        int n = snprintf(out + at, cap - at, "%s%s", at > 0 ? ", " : "", name);
        if (n < 0 || (size_t)n >= cap - at)
            return; /* cut: snprintf left it terminated */
        at += (size_t)n;
    }
}
