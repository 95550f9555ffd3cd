"""The vector selectors of a PromQL expression, read from its text, for the tests of the
shipped alert rules and dashboard (test_alert_rules.py, test_dashboard.py): which metric
names an expression reads, and with which label matchers.

Prometheus itself checks that an expression parses (promtool, the query API); this only
finds the selectors in one that does. A name is a metric name unless it calls a function
or aggregation, is a keyword, or is a label name (inside {...} or a by/without/on/
ignoring/group_left/group_right list); strings, ranges and subqueries are skipped."""

import re

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>\#[^\n]*)
  | (?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<num>0[xX][0-9a-fA-F]+|(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?(?:ms|[smhdwy])?
        (?:\d+(?:ms|[smhdwy]))*)
  | (?P<ident>[a-zA-Z_:][a-zA-Z0-9_:]*)
  | (?P<op>=~|!~|!=|==|<=|>=|[-+*/%^<>=(){}\[\],@])
""", re.X)

KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left",
            "group_right", "bool", "offset", "atan2", "inf", "nan", "start", "end"}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count",
                "count_values", "bottomk", "topk", "quantile"}
LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}


class PromQLTextError(ValueError):
    pass


def tokens(expr):
    """(kind, text) pairs of expr, without blanks and comments."""
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if m is None:
            raise PromQLTextError(f"cannot read {expr[pos:pos + 20]!r} in {expr!r}")
        pos = m.end()
        if m.lastgroup not in ("ws", "comment"):
            out.append((m.lastgroup, m.group()))
    return out


def _closing(toks, i, open_, close):
    """The index of the token that closes toks[i] (== open_)."""
    depth = 0
    for j in range(i, len(toks)):
        if toks[j][1] == open_:
            depth += 1
        elif toks[j][1] == close:
            depth -= 1
            if depth == 0:
                return j
    raise PromQLTextError(f"unclosed {open_}")


def _matchers(toks):
    """[(label, op, value)] of the tokens between { and }."""
    out, i = [], 0
    while i < len(toks):
        if toks[i][1] == ",":
            i += 1
            continue
        if i + 2 >= len(toks) or toks[i][0] != "ident" or toks[i + 2][0] != "str":
            raise PromQLTextError(f"cannot read the matchers {' '.join(t for _, t in toks)}")
        value = toks[i + 2][1][1:-1]
        out.append((toks[i][1], toks[i + 1][1], value))
        i += 3
    return out


def selectors(expr):
    """[(metric name or None, [(label, op, value)])] of every vector selector of expr, in
    order. A selector without a name takes it from its __name__="..." matcher, if any."""
    toks = tokens(expr)
    out, i = [], 0
    while i < len(toks):
        kind, text = toks[i]
        nxt = toks[i + 1][1] if i + 1 < len(toks) else None
        if text == "[":  # a range or a subquery: durations only
            i = _closing(toks, i, "[", "]") + 1
            continue
        if kind == "ident" and text in LABEL_LISTS and nxt == "(":
            i = _closing(toks, i + 1, "(", ")") + 1
            continue
        if kind == "ident" and (nxt == "(" or text in KEYWORDS or
                                (text in AGGREGATIONS and nxt in ("by", "without"))):
            i += 1
            continue
        if kind == "ident" or text == "{":
            name = text if kind == "ident" else None
            matchers = []
            j = i + 1 if kind == "ident" else i
            if j < len(toks) and toks[j][1] == "{":
                end = _closing(toks, j, "{", "}")
                matchers = _matchers(toks[j + 1:end])
                j = end + 1
            if name is None:
                name = next((v for l, op, v in matchers if l == "__name__" and op == "="), None)
            out.append((name, matchers))
            i = j
            continue
        i += 1
    return out


def metric_names(expr):
    """The metric names expr reads (a set)."""
    return {name for name, _ in selectors(expr) if name is not None}
