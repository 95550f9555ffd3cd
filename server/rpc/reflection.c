/* reflection.c - the gRPC server reflection service over the embedded descriptor set.
 *
 * At start-up the FileDescriptorSet is copied once and walked: each file's serialized
 * FileDescriptorProto is kept as a slice of that copy (so answers send the bytes protoc
 * wrote, never a re-encoding), its imports are resolved to file indices, and every symbol
 * it defines (messages, nested or not, enums and their values, fields, oneofs, extensions,
 * services and methods) goes into one sorted table searched with bsearch. After that the
 * object is read-only, so any number of threads may answer from it; each answer is built
 * in the call's arena and points into the shared copy for the descriptor bytes.
 */
#include "rpc/reflection.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"

/* The reflection services themselves: listed even when the caller's list lacks them,
 * because clients discover reflection through reflection. */
static const char *const REFLECTION_SERVICES[] = {
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
};

/* protoc refuses deeper nesting long before this; a cap keeps a crafted set from
 * exhausting the stack of the recursive walk. */
#define MAX_NESTING 100

/* The generated oneof case names are too long to read; these spell them by their tail. */
#define REQUEST_CASE(name) GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_##name
#define RESPONSE_CASE(name)                                                                        \
    GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_##name

/* How much of a client-supplied name an error message repeats. */
#define MAX_ECHOED_NAME 256

/* The protobuf wire types the top-level scan of the set understands. */
enum {
    WIRE_VARINT = 0,
    WIRE_FIXED64 = 1,
    WIRE_LENGTH_DELIMITED = 2,
    WIRE_FIXED32 = 5,
};

/* FileDescriptorSet.file */
#define SET_FIELD_FILE 1u

typedef enum {
    SYMBOL_MESSAGE,
    SYMBOL_ENUM,
    SYMBOL_ENUM_VALUE,
    SYMBOL_FIELD,
    SYMBOL_ONEOF,
    SYMBOL_EXTENSION,
    SYMBOL_SERVICE,
    SYMBOL_METHOD,
} symbol_kind;

struct symbol {
    char *name; /* fully qualified, no leading dot; owned */
    size_t file;
    symbol_kind kind;
};

struct extension {
    char *extendee; /* fully qualified message name, no leading dot; owned */
    int32_t number;
    size_t file;
};

struct file {
    char *name;     /* "ctxguard/v1/admin.proto"; owned */
    uint8_t *bytes; /* serialized FileDescriptorProto, a slice of cg_reflection.set */
    size_t len;
    size_t *deps; /* indices of the imported files; owned */
    size_t n_deps;
};

struct cg_reflection {
    uint8_t *set; /* our copy of the FileDescriptorSet */
    struct file *files;
    size_t n_files;
    struct symbol *symbols; /* sorted by name once built */
    size_t n_symbols;
    size_t cap_symbols;
    struct extension *extensions;
    size_t n_extensions;
    size_t cap_extensions;
    const char **services; /* the strings are borrowed (caller's or REFLECTION_SERVICES) */
    size_t n_services;
};

/* ------------------------------------------------------------------ building ------- */

/* Makes room for one more element in a growable array of elem-sized items.
 * false when out of memory (the array is left as it was). */
static bool grow(void **items, size_t *cap, size_t count, size_t elem)
{
    if (count < *cap)
        return true;
    size_t new_cap = *cap ? *cap * 2 : 64;
    if (new_cap > SIZE_MAX / elem)
        return false;
    void *bigger = realloc(*items, new_cap * elem);
    if (bigger == NULL)
        return false;
    *items = bigger;
    *cap = new_cap;
    return true;
}

/* "scope.name", or a copy of name when scope is empty. NULL when out of memory. */
static char *join_name(const char *scope, const char *name)
{
    size_t scope_len = strlen(scope), name_len = strlen(name);
    char *full = malloc(scope_len + 1 + name_len + 1);
    if (full == NULL)
        return NULL;
    if (scope_len == 0) {
        memcpy(full, name, name_len + 1);
    } else {
        memcpy(full, scope, scope_len);
        full[scope_len] = '.';
        memcpy(full + scope_len + 1, name, name_len + 1);
    }
    return full;
}

/* A fully qualified name as written in descriptors (".pkg.Type") or by clients, without
 * its leading dot. */
static const char *strip_dot(const char *name)
{
    return name[0] == '.' ? name + 1 : name;
}

static bool name_is_empty(const char *name)
{
    return name == NULL || name[0] == '\0';
}

/* Adds scope.name as a symbol of kind defined in file. On success *full_out (when not
 * NULL) borrows the stored full name for use as the scope of nested definitions.
 * On error err is filled and nothing is added. */
static cg_status add_symbol(struct cg_reflection *r, const char *file_name, const char *scope,
                            const char *name, symbol_kind kind, size_t file, const char **full_out,
                            struct cg_err *err)
{
    if (name_is_empty(name))
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "descriptor set: file \"%s\" has a definition without a name in \"%s\"",
                          file_name, scope);
    if (!grow((void **)&r->symbols, &r->cap_symbols, r->n_symbols, sizeof *r->symbols))
        return cg_err_set(err, CG_NOMEM, "reflection: out of memory indexing symbols");
    char *full = join_name(scope, name);
    if (full == NULL)
        return cg_err_set(err, CG_NOMEM, "reflection: out of memory indexing symbols");
    r->symbols[r->n_symbols++] = (struct symbol){.name = full, .file = file, .kind = kind};
    if (full_out != NULL)
        *full_out = full;
    return CG_OK;
}

/* Records that file defines extension number of extendee (a field with an extendee).
 * On error err is filled and nothing is added. */
static cg_status add_extension(struct cg_reflection *r, const char *file_name,
                               const Google__Protobuf__FieldDescriptorProto *field, size_t file,
                               struct cg_err *err)
{
    if (name_is_empty(field->extendee) || !field->has_number)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "descriptor set: file \"%s\": extension \"%s\" lacks extendee or number",
                          file_name, field->name ? field->name : "");
    if (!grow((void **)&r->extensions, &r->cap_extensions, r->n_extensions, sizeof *r->extensions))
        return cg_err_set(err, CG_NOMEM, "reflection: out of memory indexing extensions");
    char *extendee = strdup(strip_dot(field->extendee));
    if (extendee == NULL)
        return cg_err_set(err, CG_NOMEM, "reflection: out of memory indexing extensions");
    r->extensions[r->n_extensions++] =
        (struct extension){.extendee = extendee, .number = field->number, .file = file};
    return CG_OK;
}

/* Indexes the extensions declared in scope (a file or a message). */
static cg_status index_extensions(struct cg_reflection *r, const char *file_name, const char *scope,
                                  Google__Protobuf__FieldDescriptorProto *const *fields, size_t n,
                                  size_t file, struct cg_err *err)
{
    for (size_t i = 0; i < n; i++) {
        cg_status rc =
            add_symbol(r, file_name, scope, fields[i]->name, SYMBOL_EXTENSION, file, NULL, err);
        if (rc)
            return rc;
        rc = add_extension(r, file_name, fields[i], file, err);
        if (rc)
            return rc;
    }
    return CG_OK;
}

/* Indexes an enum and its values; values are siblings of the enum (protobuf's C++ scoping
 * rule), so they live in scope, not under the enum's name. */
static cg_status index_enum(struct cg_reflection *r, const char *file_name, const char *scope,
                            const Google__Protobuf__EnumDescriptorProto *en, size_t file,
                            struct cg_err *err)
{
    cg_status rc = add_symbol(r, file_name, scope, en->name, SYMBOL_ENUM, file, NULL, err);
    for (size_t i = 0; rc == CG_OK && i < en->n_value; i++)
        rc =
            add_symbol(r, file_name, scope, en->value[i]->name, SYMBOL_ENUM_VALUE, file, NULL, err);
    return rc;
}

/* Indexes a message, its fields, oneofs, enums, extensions and nested messages. */
static cg_status index_message(struct cg_reflection *r, const char *file_name, const char *scope,
                               const Google__Protobuf__DescriptorProto *msg, size_t file, int depth,
                               struct cg_err *err)
{
    if (depth > MAX_NESTING)
        return cg_err_set(err, CG_INVALID_ARGUMENT,
                          "descriptor set: file \"%s\": messages nested more than %d deep",
                          file_name, MAX_NESTING);
    const char *full;
    cg_status rc = add_symbol(r, file_name, scope, msg->name, SYMBOL_MESSAGE, file, &full, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < msg->n_field; i++) {
        rc = add_symbol(r, file_name, full, msg->field[i]->name, SYMBOL_FIELD, file, NULL, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < msg->n_oneof_decl; i++) {
        rc =
            add_symbol(r, file_name, full, msg->oneof_decl[i]->name, SYMBOL_ONEOF, file, NULL, err);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < msg->n_enum_type; i++) {
        rc = index_enum(r, file_name, full, msg->enum_type[i], file, err);
        if (rc)
            return rc;
    }
    rc = index_extensions(r, file_name, full, msg->extension, msg->n_extension, file, err);
    if (rc)
        return rc;
    for (size_t i = 0; i < msg->n_nested_type; i++) {
        rc = index_message(r, file_name, full, msg->nested_type[i], file, depth + 1, err);
        if (rc)
            return rc;
    }
    return CG_OK;
}

/* Indexes everything one file defines. */
static cg_status index_file(struct cg_reflection *r,
                            const Google__Protobuf__FileDescriptorProto *fd, size_t file,
                            struct cg_err *err)
{
    const char *file_name = fd->name;
    const char *package = fd->package ? fd->package : "";
    cg_status rc = CG_OK;
    for (size_t i = 0; rc == CG_OK && i < fd->n_message_type; i++)
        rc = index_message(r, file_name, package, fd->message_type[i], file, 0, err);
    for (size_t i = 0; rc == CG_OK && i < fd->n_enum_type; i++)
        rc = index_enum(r, file_name, package, fd->enum_type[i], file, err);
    if (rc == CG_OK)
        rc = index_extensions(r, file_name, package, fd->extension, fd->n_extension, file, err);
    for (size_t i = 0; rc == CG_OK && i < fd->n_service; i++) {
        const Google__Protobuf__ServiceDescriptorProto *svc = fd->service[i];
        const char *full;
        rc = add_symbol(r, file_name, package, svc->name, SYMBOL_SERVICE, file, &full, err);
        for (size_t m = 0; rc == CG_OK && m < svc->n_method; m++)
            rc = add_symbol(r, file_name, full, svc->method[m]->name, SYMBOL_METHOD, file, NULL,
                            err);
    }
    return rc;
}

/* Reads a base-128 varint at *pos (advancing it). false when truncated or longer than
 * ten bytes. */
static bool read_varint(const uint8_t *buf, size_t len, size_t *pos, uint64_t *out)
{
    uint64_t value = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (*pos >= len)
            return false;
        uint8_t byte = buf[(*pos)++];
        value |= (uint64_t)(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0) {
            *out = value;
            return true;
        }
    }
    return false;
}

/* Finds the next FileDescriptorSet.file entry at or after *pos, skipping other fields.
 * Returns 1 with *file and *file_len set to the entry's bytes, 0 at the end of the set, or -1
 * with err filled when the bytes are not a well-formed message. The scan is ours (and not
 * protobuf-c's) because only it tells where each file's bytes lie in the set. */
static int next_file_entry(const uint8_t *set, size_t len, size_t *pos, const uint8_t **file,
                           size_t *file_len, struct cg_err *err)
{
    while (*pos < len) {
        size_t at = *pos;
        uint64_t key, length;
        if (!read_varint(set, len, pos, &key) || (key >> 3) == 0)
            goto bad;
        switch (key & 7) {
        case WIRE_VARINT:
            if (!read_varint(set, len, pos, &length))
                goto bad;
            break;
        case WIRE_FIXED64:
        case WIRE_FIXED32: {
            size_t width = (key & 7) == WIRE_FIXED64 ? 8 : 4;
            if (len - *pos < width)
                goto bad;
            *pos += width;
            break;
        }
        case WIRE_LENGTH_DELIMITED:
            if (!read_varint(set, len, pos, &length) || length > len - *pos)
                goto bad;
            if ((key >> 3) == SET_FIELD_FILE) {
                *file = set + *pos;
                *file_len = (size_t)length;
                *pos += (size_t)length;
                return 1;
            }
            *pos += (size_t)length;
            break;
        default: /* groups and invalid wire types */
            goto bad;
        }
        continue;
    bad:
        cg_err_set(err, CG_INVALID_ARGUMENT,
                   "descriptor set: malformed FileDescriptorSet at byte %zu of %zu", at, len);
        return -1;
    }
    return 0;
}

/* The index of the file named name, or -1. Linear: sets hold a few dozen files and
 * this runs once per reflection request. */
static long find_file(const struct cg_reflection *r, const char *name)
{
    for (size_t i = 0; i < r->n_files; i++)
        if (strcmp(r->files[i].name, name) == 0)
            return (long)i;
    return -1;
}

/* Splits the set (already copied into r->set) into files, unpacks and indexes each.
 * The unpacked descriptors go to *parsed (n_parsed of them, all freed by the caller,
 * also on error) for resolve_imports. On error err is filled; what was built in r is
 * freed by cg_reflection_free. */
static cg_status load_files(struct cg_reflection *r, size_t len,
                            Google__Protobuf__FileDescriptorProto ***parsed, size_t *n_parsed,
                            struct cg_err *err)
{
    size_t pos = 0, count = 0;
    const uint8_t *entry;
    size_t entry_len;
    int got;
    while ((got = next_file_entry(r->set, len, &pos, &entry, &entry_len, err)) == 1)
        count++;
    if (got < 0)
        return err ? err->code : CG_INVALID_ARGUMENT;

    r->files = calloc(count ? count : 1, sizeof *r->files);
    *parsed = calloc(count ? count : 1, sizeof **parsed);
    if (r->files == NULL || *parsed == NULL)
        return cg_err_set(err, CG_NOMEM, "reflection: out of memory loading descriptors");

    pos = 0;
    for (size_t i = 0; i < count; i++) {
        if (next_file_entry(r->set, len, &pos, &entry, &entry_len, err) != 1)
            return cg_err_set(err, CG_INTERNAL, "descriptor set: second scan disagrees");
        Google__Protobuf__FileDescriptorProto *fd =
            google__protobuf__file_descriptor_proto__unpack(NULL, entry_len, entry);
        if (fd == NULL)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "descriptor set: file #%zu is not a valid FileDescriptorProto", i);
        (*parsed)[(*n_parsed)++] = fd;
        if (name_is_empty(fd->name))
            return cg_err_set(err, CG_INVALID_ARGUMENT, "descriptor set: file #%zu has no name", i);
        if (find_file(r, fd->name) >= 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT, "descriptor set: file \"%s\" appears twice",
                              fd->name);
        struct file *f = &r->files[r->n_files];
        f->name = strdup(fd->name);
        if (f->name == NULL)
            return cg_err_set(err, CG_NOMEM, "reflection: out of memory loading descriptors");
        /* The slice is of our own copy, hence writable: the generated answer type wants a
         * non-const pointer, and nobody writes through it. */
        f->bytes = r->set + (entry - r->set);
        f->len = entry_len;
        r->n_files++;
        cg_status rc = index_file(r, fd, i, err);
        if (rc)
            return rc;
    }
    return CG_OK;
}

/* Turns each file's import names into file indices. Every import must be in the set
 * (protoc --include_imports guarantees it): a missing one would make every answer that
 * involves the file useless to clients, so it is refused at start-up. */
static cg_status resolve_imports(struct cg_reflection *r,
                                 Google__Protobuf__FileDescriptorProto *const *parsed,
                                 struct cg_err *err)
{
    for (size_t i = 0; i < r->n_files; i++) {
        const Google__Protobuf__FileDescriptorProto *fd = parsed[i];
        struct file *f = &r->files[i];
        if (fd->n_dependency == 0)
            continue;
        f->deps = calloc(fd->n_dependency, sizeof *f->deps);
        if (f->deps == NULL)
            return cg_err_set(err, CG_NOMEM, "reflection: out of memory loading descriptors");
        for (size_t d = 0; d < fd->n_dependency; d++) {
            long dep = find_file(r, fd->dependency[d]);
            if (dep < 0)
                return cg_err_set(err, CG_INVALID_ARGUMENT,
                                  "descriptor set: \"%s\" imports \"%s\", which is not in the set "
                                  "(build it with --include_imports)",
                                  f->name, fd->dependency[d]);
            f->deps[f->n_deps++] = (size_t)dep;
        }
    }
    return CG_OK;
}

static int compare_symbols(const void *a, const void *b)
{
    return strcmp(((const struct symbol *)a)->name, ((const struct symbol *)b)->name);
}

/* Sorts the symbol table for bsearch and refuses a name defined twice (which protoc
 * would not produce, and which would make answers depend on the order of the set). */
static cg_status sort_symbols(struct cg_reflection *r, struct cg_err *err)
{
    if (r->n_symbols == 0)
        return CG_OK;
    qsort(r->symbols, r->n_symbols, sizeof *r->symbols, compare_symbols);
    for (size_t i = 1; i < r->n_symbols; i++)
        if (strcmp(r->symbols[i - 1].name, r->symbols[i].name) == 0)
            return cg_err_set(err, CG_INVALID_ARGUMENT,
                              "descriptor set: \"%s\" is defined in both \"%s\" and \"%s\"",
                              r->symbols[i].name, r->files[r->symbols[i - 1].file].name,
                              r->files[r->symbols[i].file].name);
    return CG_OK;
}

/* The services ListServices answers: the caller's, without repeats, then the reflection
 * services when missing. */
static cg_status build_service_list(struct cg_reflection *r, const char *const *services, size_t n,
                                    struct cg_err *err)
{
    size_t extra = sizeof REFLECTION_SERVICES / sizeof REFLECTION_SERVICES[0];
    r->services = calloc(n + extra, sizeof *r->services);
    if (r->services == NULL)
        return cg_err_set(err, CG_NOMEM, "reflection: out of memory listing services");
    for (size_t i = 0; i < n + extra; i++) {
        const char *name = i < n ? services[i] : REFLECTION_SERVICES[i - n];
        if (name_is_empty(name))
            return cg_err_set(err, CG_INVALID_ARGUMENT, "reflection: service #%zu has no name", i);
        bool seen = false;
        for (size_t k = 0; k < r->n_services && !seen; k++)
            seen = strcmp(r->services[k], name) == 0;
        if (!seen)
            r->services[r->n_services++] = name;
    }
    return CG_OK;
}

struct cg_reflection *cg_reflection_new(const uint8_t *set, size_t len, const char *const *services,
                                        size_t n, struct cg_err *err)
{
    Google__Protobuf__FileDescriptorProto **parsed = NULL;
    size_t n_parsed = 0;
    cg_status rc;
    struct cg_reflection *r = calloc(1, sizeof *r);
    if (r == NULL) {
        cg_err_set(err, CG_NOMEM, "reflection: out of memory");
        return NULL;
    }
    if (set == NULL && len > 0) {
        rc = cg_err_set(err, CG_INVALID_ARGUMENT, "descriptor set: NULL with length %zu", len);
        goto out;
    }
    if (services == NULL && n > 0) {
        rc = cg_err_set(err, CG_INVALID_ARGUMENT, "reflection: NULL service list of %zu", n);
        goto out;
    }
    r->set = malloc(len ? len : 1);
    if (r->set == NULL) {
        rc = cg_err_set(err, CG_NOMEM, "reflection: out of memory copying the descriptor set");
        goto out;
    }
    if (len > 0)
        memcpy(r->set, set, len);

    rc = load_files(r, len, &parsed, &n_parsed, err);
    if (rc)
        goto out;
    rc = resolve_imports(r, parsed, err);
    if (rc)
        goto out;
    rc = sort_symbols(r, err);
    if (rc)
        goto out;
    rc = build_service_list(r, services, n, err);

out:
    for (size_t i = 0; i < n_parsed; i++)
        google__protobuf__file_descriptor_proto__free_unpacked(parsed[i], NULL);
    free(parsed);
    if (rc) {
        cg_reflection_free(r);
        return NULL;
    }
    return r;
}

void cg_reflection_free(struct cg_reflection *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_files; i++) {
        free(r->files[i].name);
        free(r->files[i].deps);
    }
    free(r->files);
    for (size_t i = 0; i < r->n_symbols; i++)
        free(r->symbols[i].name);
    free(r->symbols);
    for (size_t i = 0; i < r->n_extensions; i++)
        free(r->extensions[i].extendee);
    free(r->extensions);
    free(r->services);
    free(r->set);
    free(r);
}

/* ------------------------------------------------------------------ answering ------ */

static int compare_name_to_symbol(const void *name, const void *symbol)
{
    return strcmp(name, ((const struct symbol *)symbol)->name);
}

/* The symbol with this name (a leading dot allowed), or NULL. */
static const struct symbol *find_symbol(const struct cg_reflection *r, const char *name)
{
    if (r->n_symbols == 0)
        return NULL;
    return bsearch(strip_dot(name), r->symbols, r->n_symbols, sizeof *r->symbols,
                   compare_name_to_symbol);
}

/* The message type with this name, or NULL (enums, services... do not count). */
static const struct symbol *find_message(const struct cg_reflection *r, const char *name)
{
    const struct symbol *s = find_symbol(r, name);
    return s != NULL && s->kind == SYMBOL_MESSAGE ? s : NULL;
}

/* Sets resp to an error_response with a gRPC code and message. CG_NOMEM when the arena
 * is exhausted. */
static cg_status answer_error(struct cg_rpc_call *call,
                              Grpc__Reflection__V1__ServerReflectionResponse *resp, int code,
                              char *message)
{
    Grpc__Reflection__V1__ErrorResponse *error = cg_arena_alloc(call->arena, sizeof *error);
    if (error == NULL)
        return CG_NOMEM;
    grpc__reflection__v1__error_response__init(error);
    error->error_code = code;
    error->error_message = message;
    resp->message_response_case = RESPONSE_CASE(ERROR_RESPONSE);
    resp->error_response = error;
    return CG_OK;
}

/* A client-supplied name as an error message may repeat it: cut to MAX_ECHOED_NAME bytes
 * on a UTF-8 character boundary (the message is a proto3 string and must stay valid). */
static int echoed_length(const char *name)
{
    size_t len = strlen(name);
    if (len <= MAX_ECHOED_NAME)
        return (int)len;
    len = MAX_ECHOED_NAME;
    while (len > 0 && ((unsigned char)name[len] & 0xC0) == 0x80)
        len--;
    return (int)len;
}

/* Sets resp to NOT_FOUND "<what> \"<name>\" not found". */
static cg_status answer_not_found(struct cg_rpc_call *call,
                                  Grpc__Reflection__V1__ServerReflectionResponse *resp,
                                  const char *what, const char *name)
{
    int shown = echoed_length(name);
    char *message = cg_arena_sprintf(call->arena, "%s \"%.*s%s\" not found", what, shown, name,
                                     name[shown] ? "..." : "");
    if (message == NULL)
        return CG_NOMEM;
    return answer_error(call, resp, cg_status_grpc_code(CG_NOT_FOUND), message);
}

/* Sets resp to the file's descriptor followed by those of all the files it imports,
 * directly or not, each once (breadth first, so the requested file comes first). */
static cg_status answer_file(struct cg_rpc_call *call, const struct cg_reflection *r, size_t file,
                             Grpc__Reflection__V1__ServerReflectionResponse *resp)
{
    Grpc__Reflection__V1__FileDescriptorResponse *files =
        cg_arena_alloc(call->arena, sizeof *files);
    size_t *queue = cg_arena_calloc(call->arena, r->n_files, sizeof *queue);
    bool *queued = cg_arena_calloc(call->arena, r->n_files, sizeof *queued);
    ProtobufCBinaryData *protos = cg_arena_calloc(call->arena, r->n_files, sizeof *protos);
    if (files == NULL || queue == NULL || queued == NULL || protos == NULL)
        return CG_NOMEM;
    size_t head = 0, tail = 0;
    queue[tail++] = file;
    queued[file] = true;
    while (head < tail) {
        const struct file *f = &r->files[queue[head++]];
        for (size_t d = 0; d < f->n_deps; d++) {
            if (!queued[f->deps[d]]) {
                queued[f->deps[d]] = true;
                queue[tail++] = f->deps[d];
            }
        }
    }
    for (size_t i = 0; i < tail; i++)
        protos[i] =
            (ProtobufCBinaryData){.len = r->files[queue[i]].len, .data = r->files[queue[i]].bytes};
    grpc__reflection__v1__file_descriptor_response__init(files);
    files->n_file_descriptor_proto = tail;
    files->file_descriptor_proto = protos;
    resp->message_response_case = RESPONSE_CASE(FILE_DESCRIPTOR_RESPONSE);
    resp->file_descriptor_response = files;
    return CG_OK;
}

static cg_status answer_list_services(struct cg_rpc_call *call, const struct cg_reflection *r,
                                      Grpc__Reflection__V1__ServerReflectionResponse *resp)
{
    Grpc__Reflection__V1__ListServiceResponse *list = cg_arena_alloc(call->arena, sizeof *list);
    Grpc__Reflection__V1__ServiceResponse **items =
        cg_arena_calloc(call->arena, r->n_services, sizeof *items);
    Grpc__Reflection__V1__ServiceResponse *entries =
        cg_arena_calloc(call->arena, r->n_services, sizeof *entries);
    if (list == NULL || (r->n_services > 0 && (items == NULL || entries == NULL)))
        return CG_NOMEM;
    grpc__reflection__v1__list_service_response__init(list);
    for (size_t i = 0; i < r->n_services; i++) {
        grpc__reflection__v1__service_response__init(&entries[i]);
        /* A copy, because the generated field is not const and the names are borrowed. */
        entries[i].name = cg_arena_strdup(call->arena, r->services[i]);
        if (entries[i].name == NULL)
            return CG_NOMEM;
        items[i] = &entries[i];
    }
    list->n_service = r->n_services;
    list->service = items;
    resp->message_response_case = RESPONSE_CASE(LIST_SERVICES_RESPONSE);
    resp->list_services_response = list;
    return CG_OK;
}

static cg_status answer_extension(struct cg_rpc_call *call, const struct cg_reflection *r,
                                  const Grpc__Reflection__V1__ExtensionRequest *req,
                                  Grpc__Reflection__V1__ServerReflectionResponse *resp)
{
    const char *type = req != NULL && req->containing_type ? req->containing_type : "";
    const struct symbol *message = find_message(r, type);
    if (req == NULL || message == NULL)
        return answer_not_found(call, resp, "message type", type);
    for (size_t i = 0; i < r->n_extensions; i++)
        if (r->extensions[i].number == req->extension_number &&
            strcmp(r->extensions[i].extendee, message->name) == 0)
            return answer_file(call, r, r->extensions[i].file, resp);
    char *what = cg_arena_sprintf(call->arena, "extension %d of", (int)req->extension_number);
    if (what == NULL)
        return CG_NOMEM;
    return answer_not_found(call, resp, what, message->name);
}

static cg_status answer_extension_numbers(struct cg_rpc_call *call, const struct cg_reflection *r,
                                          const char *type,
                                          Grpc__Reflection__V1__ServerReflectionResponse *resp)
{
    const struct symbol *message = find_message(r, type);
    if (message == NULL)
        return answer_not_found(call, resp, "message type", type);
    Grpc__Reflection__V1__ExtensionNumberResponse *numbers =
        cg_arena_alloc(call->arena, sizeof *numbers);
    int32_t *found =
        cg_arena_calloc(call->arena, r->n_extensions ? r->n_extensions : 1, sizeof *found);
    if (numbers == NULL || found == NULL)
        return CG_NOMEM;
    grpc__reflection__v1__extension_number_response__init(numbers);
    for (size_t i = 0; i < r->n_extensions; i++)
        if (strcmp(r->extensions[i].extendee, message->name) == 0)
            found[numbers->n_extension_number++] = r->extensions[i].number;
    numbers->extension_number = found;
    /* The canonical name (no leading dot) points into the shared table: it is only read
     * while the answer is encoded. */
    numbers->base_type_name = message->name;
    resp->message_response_case = RESPONSE_CASE(ALL_EXTENSION_NUMBERS_RESPONSE);
    resp->all_extension_numbers_response = numbers;
    return CG_OK;
}

cg_status cg_rpc_reflection_info(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                 const ProtobufCMessage *request, ProtobufCMessage **response)
{
    *response = NULL;
    if (request == NULL ||
        request->descriptor != &grpc__reflection__v1__server_reflection_request__descriptor)
        return cg_err_set(
            &call->err, CG_INTERNAL,
            "reflection: request is not a grpc.reflection.v1.ServerReflectionRequest");
    const struct cg_reflection *r = env != NULL ? env->reflection : NULL;
    if (r == NULL)
        return cg_err_set(&call->err, CG_UNIMPLEMENTED, "reflection is not enabled on this server");
    const Grpc__Reflection__V1__ServerReflectionRequest *req =
        (const Grpc__Reflection__V1__ServerReflectionRequest *)request;
    if (req->message_request_case == REQUEST_CASE(_NOT_SET))
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "message_request: not set; one of list_services, file_by_filename, "
                          "file_containing_symbol, file_containing_extension or "
                          "all_extension_numbers_of_type is required");

    Grpc__Reflection__V1__ServerReflectionResponse *resp =
        cg_arena_alloc(call->arena, sizeof *resp);
    Grpc__Reflection__V1__ServerReflectionRequest *original =
        cg_arena_alloc(call->arena, sizeof *original);
    if (resp == NULL || original == NULL)
        goto nomem;
    grpc__reflection__v1__server_reflection_response__init(resp);
    /* The spec wants the request echoed; a shallow copy is enough because the request
     * lives in the same arena as the answer. */
    *original = *req;
    resp->original_request = original;
    if (req->host != NULL)
        resp->valid_host = req->host;

    cg_status rc;
    switch (req->message_request_case) {
    case REQUEST_CASE(LIST_SERVICES):
        rc = answer_list_services(call, r, resp);
        break;
    case REQUEST_CASE(FILE_BY_FILENAME): {
        const char *name = req->file_by_filename ? req->file_by_filename : "";
        long file = find_file(r, name);
        rc = file < 0 ? answer_not_found(call, resp, "file", name)
                      : answer_file(call, r, (size_t)file, resp);
        break;
    }
    case REQUEST_CASE(FILE_CONTAINING_SYMBOL): {
        const char *name = req->file_containing_symbol ? req->file_containing_symbol : "";
        const struct symbol *s = find_symbol(r, name);
        rc = s == NULL ? answer_not_found(call, resp, "symbol", name)
                       : answer_file(call, r, s->file, resp);
        break;
    }
    case REQUEST_CASE(FILE_CONTAINING_EXTENSION):
        rc = answer_extension(call, r, req->file_containing_extension, resp);
        break;
    case REQUEST_CASE(ALL_EXTENSION_NUMBERS_OF_TYPE):
        rc = answer_extension_numbers(
            call, r, req->all_extension_numbers_of_type ? req->all_extension_numbers_of_type : "",
            resp);
        break;
    default:
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "message_request: unknown case %d",
                          (int)req->message_request_case);
    }
    if (rc)
        goto nomem;
    *response = &resp->base;
    return CG_OK;

nomem:
    return cg_err_set(&call->err, CG_NOMEM,
                      "reflection: the answer does not fit in the call's memory");
}
