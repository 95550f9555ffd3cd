#!/usr/bin/python3
"""gen_methods.py - writes the server's method table from the compiled .proto files.

    gen_methods.py DESCRIPTOR_SET OUT_C

DESCRIPTOR_SET is `protoc --include_imports --descriptor_set_out` of proto/ctxguard/v1/*.proto
and the grpc.health / grpc.reflection protos (the one the reflection service embeds). OUT_C
gets the C table of every RPC the server answers (server/rpc/rpc_methods.h declares it):
path, service, kind, who may call it, whether it blocks (runs on the pool) or is tried inline
first, the protobuf-c descriptors of its request and response, and its C functions.

Where each rule comes from:
  - ctxguard.* RPCs: the `(ctxguard.v1.rule)` method option (proto/ctxguard/v1/options.proto)
    written next to the RPC. The C handler is the option's `handler`, or by convention
    cg_rpc_<service>_<method> in lower snake case, the service without "Service" and the
    method without a trailing word equal to the service's (CheckBudget -> cg_rpc_budget_check).
    A server stream's functions are <handler>_poll and, when it runs on the pool, <handler>_open.
  - grpc.health.v1 and grpc.reflection.*: STANDARD below (their .proto files are not ours to
    annotate). They need no key.

Any RPC without a rule, a rule that names nobody or no way to run, or a STANDARD entry that no
proto declares stops the build with a message naming the RPC; the C compiler then checks that
every handler named exists with the right type.
"""
import os
import re
import sys

try:
    from google.protobuf import descriptor_pb2, message_factory
except ImportError:  # pragma: no cover - depends on the machine
    sys.exit("gen_methods: python3 cannot import google.protobuf: apt-get install python3-protobuf")

RULE_OPTION = "ctxguard.v1.rule"

# The services whose .proto files come from grpc-proto: their rules, explicit and short.
# Open to anyone (health checks and reflection need no key) and never blocking.
STANDARD = {
    "grpc.health.v1.Health/Check": {"handler": "cg_rpc_health_check"},
    "grpc.health.v1.Health/Watch": {"poll": "cg_rpc_health_watch"},
    "grpc.reflection.v1.ServerReflection/ServerReflectionInfo": {
        "handler": "cg_rpc_reflection_info"},
    # v1alpha has the same messages on the wire; v1's descriptors decode and encode it.
    "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {
        "handler": "cg_rpc_reflection_info",
        "request": "grpc.reflection.v1.ServerReflectionRequest",
        "response": "grpc.reflection.v1.ServerReflectionResponse"},
}

# ctxguard.v1.Caller -> the CG_ALLOW_* bit of core/keyrole.h.
CALLER_BITS = {
    "CALLER_SERVER_ADMIN": "CG_ALLOW_SERVER_ADMIN",
    "CALLER_AGENT": "CG_ALLOW_AGENT",
    "CALLER_VIEWER": "CG_ALLOW_VIEWER",
    "CALLER_OPERATOR": "CG_ALLOW_OPERATOR",
    "CALLER_ADMIN": "CG_ALLOW_TENANT_ADMIN",
}
TENANT_BITS = {"CG_ALLOW_AGENT", "CG_ALLOW_VIEWER", "CG_ALLOW_OPERATOR", "CG_ALLOW_TENANT_ADMIN"}
RUNS = {"RUN_INLINE", "RUN_POOL", "RUN_TRY_INLINE"}


class RuleError(Exception):
    pass


def snake(camel):
    """CheckBudget -> check_budget, WhoAmI -> who_am_i."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", camel).lower()


def c_lower(full_name):
    """protobuf-c's C name of a message: ctxguard.v1.WhoAmIRequest -> ctxguard__v1__who_am_irequest
    (an underscore before an upper-case letter that follows a lower-case one)."""
    parts = []
    for part in full_name.split("."):
        out, was_upper = "", True
        for ch in part:
            if ch.isupper() and not was_upper:
                out += "_"
            out += ch.lower()
            was_upper = ch.isupper()
        parts.append(out)
    return "__".join(parts)


def conventional_handler(service, method):
    svc = snake(service[:-len("Service")] if service.endswith("Service") else service)
    words = snake(method).split("_")
    if len(words) > 1 and words[-1] == svc:
        words = words[:-1]
    return f"cg_rpc_{svc}_{'_'.join(words)}"


def load(path):
    """The descriptor set, parsed with the rule option known, and the option's descriptor."""
    with open(path, "rb") as f:
        data = f.read()
    plain = descriptor_pb2.FileDescriptorSet.FromString(data)
    classes = message_factory.GetMessages(list(plain.file))
    fds_class = classes["google.protobuf.FileDescriptorSet"]
    pool = fds_class.DESCRIPTOR.file.pool
    try:
        ext = pool.FindExtensionByName(RULE_OPTION)
    except KeyError:
        raise RuleError(f"{path}: no {RULE_OPTION} option (is ctxguard/v1/options.proto in it?)")
    return fds_class.FromString(data), pool, ext


def method_kind(name, m):
    if m.client_streaming and m.server_streaming:
        return "CG_RPC_BIDI_EACH"
    if m.server_streaming:
        return "CG_RPC_SERVER_STREAM"
    if m.client_streaming:
        raise RuleError(f"{name}: client streams are not supported by the server")
    return "CG_RPC_UNARY"


def ours(name, m, pool, ext, svc_name):
    """The table entry of a ctxguard RPC from its option."""
    if not m.options.HasExtension(ext):
        raise RuleError(f"{name} has no rule: add `option (rule) = {{allow: [...], run: ...}};` "
                        "to it (proto/ctxguard/v1/options.proto)")
    rule = m.options.Extensions[ext]
    caller_enum = pool.FindEnumTypeByName("ctxguard.v1.Caller")
    run_enum = pool.FindEnumTypeByName("ctxguard.v1.Run")
    if not rule.allow:
        raise RuleError(f"{name}: its rule allows nobody (rule.allow is empty)")
    bits = []
    for v in rule.allow:
        caller = caller_enum.values_by_number[v].name if v in caller_enum.values_by_number else v
        if caller not in CALLER_BITS:
            raise RuleError(f"{name}: unknown caller {caller} in rule.allow")
        if CALLER_BITS[caller] not in bits:
            bits.append(CALLER_BITS[caller])
    run = run_enum.values_by_number[rule.run].name if rule.run in run_enum.values_by_number else ""
    if run not in RUNS:
        raise RuleError(f"{name}: its rule says not how it runs (rule.run: one of "
                        f"{', '.join(sorted(RUNS))})")
    kind = method_kind(name, m)
    if run == "RUN_INLINE" and TENANT_BITS.intersection(bits):
        raise RuleError(f"{name}: tenant keys are looked up in the store, so a method they may "
                        "call cannot be RUN_INLINE")
    if run == "RUN_TRY_INLINE" and kind != "CG_RPC_UNARY":
        raise RuleError(f"{name}: RUN_TRY_INLINE is for unary methods only")
    handler = rule.handler or conventional_handler(svc_name, m.name)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", handler):
        raise RuleError(f"{name}: rule.handler {handler!r} is not a C identifier")
    entry = {"allow": bits, "blocking": run != "RUN_INLINE", "try_inline": run == "RUN_TRY_INLINE"}
    if kind == "CG_RPC_SERVER_STREAM":
        entry["poll"] = handler + "_poll"
        if run == "RUN_POOL":
            entry["open"] = handler + "_open"
    elif run == "RUN_TRY_INLINE":
        entry["try_handler"] = handler  # a cg_rpc_try_fn: it may hand the call on or need the pool
    else:
        entry["handler"] = handler
    return entry


def build(fds, pool, ext):
    """The entries in table order (STANDARD first, then ctxguard's services by file), the
    headers they need, and the errors found (all of them, not only the first)."""
    message_file = {}
    for f in fds.file:
        prefix = f.package + "." if f.package else ""
        for msg in f.message_type:
            message_file[prefix + msg.name] = f.name
    declared = {}
    for f in fds.file:
        for svc in f.service:
            full = (f.package + "." if f.package else "") + svc.name
            for m in svc.method:
                declared[f"{full}/{m.name}"] = (f, svc, m, full)

    errors, entries = [], []
    order = list(STANDARD) + [k for k in declared if k not in STANDARD]
    for key in order:
        if key not in declared:
            errors.append(f"{key}: has a rule in gen_methods.py STANDARD but no proto declares it")
            continue
        f, svc, m, full = declared[key]
        name = f"{key} ({f.name})"
        try:
            if key in STANDARD:
                spec = STANDARD[key]
                entry = {"allow": ["CG_ALLOW_ANYONE"], "blocking": False, "try_inline": False}
                entry.update({k: v for k, v in spec.items() if k in ("handler", "poll", "open")})
                request = spec.get("request", m.input_type.lstrip("."))
                response = spec.get("response", m.output_type.lstrip("."))
            elif f.package.split(".")[0] == "ctxguard":
                entry = ours(name, m, pool, ext, svc.name)
                request, response = m.input_type.lstrip("."), m.output_type.lstrip(".")
            else:
                raise RuleError(f"{name} has no rule: neither a ctxguard RPC nor in "
                                "gen_methods.py STANDARD")
            entry.update(path=f"/{key}", service=full, kind=method_kind(name, m),
                         request=request, response=response, proto=f.name)
            for t in (request, response):
                if t not in message_file:
                    raise RuleError(f"{name}: message {t} is not in the descriptor set")
            entries.append(entry)
        except RuleError as e:
            errors.append(str(e))
    headers = sorted({message_file[e[t]] for e in entries for t in ("request", "response")})
    return entries, [h[:-len(".proto")] + ".pb-c.h" for h in headers], errors


def render(entries, headers):
    out = ["/* Generated by cmake/gen_methods.py from the .proto files: do not edit. Each RPC's",
           " * rule is its (ctxguard.v1.rule) option (proto/ctxguard/v1/options.proto); health",
           " * and reflection come from gen_methods.py STANDARD. */",
           '#include "rpc/rpc_methods.h"', "",
           '#include "rpc/reflection.h"', '#include "rpc/rpc_handlers.h"', ""]
    out += [f'#include "{h}"' for h in headers]
    out += ["", "const struct cg_rpc_method cg_rpc_method_table[] = {"]
    services = []
    for e in entries:
        if e["service"] not in services:
            services.append(e["service"])
        out.append(f"    /* {e['proto']} */")
        out.append("    {")
        out.append(f'        .path = "{e["path"]}",')
        out.append(f'        .service = "{e["service"]}",')
        out.append(f"        .kind = {e['kind']},")
        out.append(f"        .allow = {' | '.join(e['allow'])},")
        out.append(f"        .blocking = {'true' if e['blocking'] else 'false'},")
        out.append(f"        .request_desc = &{c_lower(e['request'])}__descriptor,")
        out.append(f"        .response_desc = &{c_lower(e['response'])}__descriptor,")
        for fn in ("handler", "try_handler", "poll", "open"):
            if fn in e:
                out.append(f"        .{fn} = {e[fn]},")
        if e["try_inline"]:
            out.append("        .try_inline = true,")
        out.append("    },")
    out += ["};", "",
            "const size_t cg_rpc_method_count = sizeof cg_rpc_method_table / "
            "sizeof cg_rpc_method_table[0];", ""]
    return "\n".join(out), services


def render_services(services, standalone):
    """The distinct service names of the table. In a file of their own (standalone) they name
    no handler, so the Health service can list them without depending on the table's object
    (which names the Health handlers: a circle for scripts/circles.py)."""
    out = []
    if standalone:
        out += ["/* Generated by cmake/gen_methods.py from the .proto files: do not edit. The",
                " * services of the method table (rpc_methods_gen.c), in table order. */",
                '#include "rpc/rpc_methods.h"', ""]
    out += ["const char *const cg_rpc_service_names[] = {"]
    out += [f'    "{s}",' for s in services]
    out += ["};", "",
            "const size_t cg_rpc_service_count = sizeof cg_rpc_service_names / "
            "sizeof cg_rpc_service_names[0];", ""]
    return "\n".join(out)


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit("usage: gen_methods.py DESCRIPTOR_SET OUT_C [SERVICES_C]")
    try:
        fds, pool, ext = load(argv[1])
        entries, headers, errors = build(fds, pool, ext)
    except RuleError as e:
        errors = [str(e)]
    if errors:
        for e in errors:
            print(f"gen_methods: {e}", file=sys.stderr)
        sys.exit(1)
    text, services = render(entries, headers)
    # Without SERVICES_C the service names follow the table in OUT_C.
    if len(argv) == 4:
        write(argv[3], render_services(services, True))
    else:
        text += "\n" + render_services(services, False)
    write(argv[2], text)


if __name__ == "__main__":
    main(sys.argv)
