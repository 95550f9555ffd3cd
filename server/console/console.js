/* console.js - the ctxguard operators' console: budgets, spend, approvals and compression
 * of one tenant, read through the JSON API (/api/v1/, transport/http_api.h) with the API key
 * the user typed in.
 *
 * Safety (the page is served with a CSP allowing scripts, styles and requests from this
 * origin only, transport/http_console.h):
 * - no inline script or style attribute, no eval: handlers are attached here, widths are set
 *   through element.style (the CSSOM, which the CSP allows);
 * - every value from the server is put in the page with textContent or as an attribute's
 *   value, never parsed as HTML (scope ids, reasons and names are user data);
 * - the key lives in this tab's sessionStorage only and goes out as Authorization: Bearer;
 *   never in a URL, a cookie or localStorage.
 *
 * Live updates: after sign-in the tab opens ONE stream of the API's Server-Sent Events
 * (GET api/v1/BudgetService/WatchUsage, include_descendants, min_update_interval_ms 500),
 * for the tenant or the key's bound scope. EventSource cannot send an Authorization header,
 * so the stream is read with fetch() and a reader, and its frames are parsed here (sseParser;
 * every line and frame is capped, the stream is hostile input like any answer). Each event
 * other than a heartbeat asks for a round of re-reads (tick(), which coalesces a round asked
 * for while one runs), at most one round per EVENT_ROUND_MS; an event seen twice (the server
 * replays from the Last-Event-ID we send back on reconnecting; (scope, sequence) names an
 * event) counts once. While the stream is open everything is also re-read every
 * RESYNC_MS (a resynchronisation); while it is down, every REFRESH_MS, and the stream is
 * reopened after a backoff (BACKOFF_MIN_MS, or the server's retry: if longer, doubling to
 * BACKOFF_MAX_MS; back to the start once a stream opens). A stream silent for STREAM_SILENT_MS
 * (three default heartbeats) is taken for dead and reopened. A 401 signs out as a refresh
 * does; any other refusal (403, 404, 429: the key already holds its maximum of streams, 503)
 * is shown and the page keeps polling. Sign-out and a new sign-in abort the stream, so a tab
 * never holds two. The #live indicator says which mode is on, with data-stream
 * ("open"/"closed"), data-events (events other than heartbeats received since sign-in),
 * data-stream-opens (streams opened since the page loaded) and data-streams-in-flight
 * (stream requests not finished: 0 or 1) for the end-to-end test.
 */
'use strict';

(() => {
    const KEY_STORE = 'ctxguard.console.key';
    const API = 'api/v1/'; /* relative: the console may be served under a path prefix */
    const REFRESH_MS = 2000; /* polling while the event stream is down */
    const RESYNC_MS = 30000; /* polling while it is open: a resynchronisation */
    /* At most one round of re-reads per this, asked by events: a round is about seven
     * requests, so a busy tenant costs a tab ~7 a second, and three tabs of one key stay
     * inside the API's default 1,200 a minute per key. */
    const EVENT_ROUND_MS = 1000;
    const BACKOFF_MIN_MS = 1000; /* before reopening a stream; doubles up to the max */
    const BACKOFF_MAX_MS = 15000;
    const STREAM_SILENT_MS = 45000; /* no byte for this long: the stream is dead */
    const STREAM_LINE_MAX = 1 << 20; /* characters of one line, and of one frame's data */
    const SEEN_EVENTS_MAX = 2048; /* (scope, sequence) pairs remembered to drop repeats */
    const TREE_CHILDREN = 50; /* children per node in the tree */
    const PAGE_SIZE = 50; /* scopes per page of the list */
    const HISTORY_SIZE = 20; /* decided approvals shown */
    const AUDIT_SIZE = 20; /* changes shown */
    const AUDIT_TEXT_MAX = 120; /* characters of a change's "after" shown in its cell */
    const STEPS = {
        minute: { seconds: 60, count: 60, label: 'per minute, last hour' },
        hour: { seconds: 3600, count: 48, label: 'per hour, last 2 days' },
        day: { seconds: 86400, count: 30, label: 'per day, last 30 days' },
    };
    const LEVEL_NAMES = ['tenant', 'session', 'task', 'agent'];

    /* Everything the page knows, reset on sign-out. */
    const state = {
        key: '',
        who: null,
        gen: 0, /* bumped on sign-in/out: answers of an older generation are dropped */
        timer: 0,
        running: false,
        again: false, /* a round was asked for while one ran */
        bound: null, /* the key's bound scope, or null for the whole tenant */
        treeRoot: null, /* the scope at the tree's root; null: the tenant (or bound scope) */
        nodes: new Map(), /* scope key -> node of the tree */
        rows: new Map(), /* scope key -> row of the scope list */
        pending: new Map(), /* approval id -> row of the queue */
        pages: { tokens: [''], index: 0, next: '' },
        chosen: null, /* the scope charted and whose compression is shown; null: tenant */
        step: 'minute',
        chart: null,
        chartFor: '',
        errors: { action: '', refresh: '', stream: '' },
        updatedAt: 0, /* when the last round ended, for #live */
        /* The event stream; `ctrl` is the one running (null: none). Every callback of a
         * stream first checks that its controller is still this one. */
        stream: {
            ctrl: null,
            open: false,
            retryTimer: 0, /* the reopening, waiting for its backoff */
            backoffMs: BACKOFF_MIN_MS,
            serverRetryMs: 0, /* the stream's retry: field */
            silenceTimer: 0,
            lastId: '', /* the last id: seen, sent back as Last-Event-ID */
            seen: new Set(), /* scope key + sequence of the events counted (oldest first) */
            events: 0, /* events other than heartbeats since sign-in */
            opens: 0, /* streams opened since the page loaded */
            inFlight: 0, /* stream requests not finished */
            roundTimer: 0, /* the round an event asked for, waiting for EVENT_ROUND_MS */
            lastRoundAt: 0,
        },
    };

    const $ = (id) => document.getElementById(id);

    /* ------------------------------------------------------------------ helpers --- */

    function el(tag, cls, text) {
        const e = document.createElement(tag);
        if (cls)
            e.className = cls;
        if (text !== undefined && text !== null)
            e.textContent = String(text);
        return e;
    }

    function setText(e, text) {
        const t = String(text);
        if (e.textContent !== t)
            e.textContent = t;
    }

    const numberFormat = new Intl.NumberFormat('en-US');
    function fmt(n) {
        return numberFormat.format(Number(n) || 0);
    }

    function pct(ratio) {
        return (100 * (Number(ratio) || 0)).toFixed(1) + ' %';
    }

    function dollars(micros) {
        return '$' + ((Number(micros) || 0) / 1e6).toFixed(4);
    }

    /* "APPROVAL_STATE_PENDING" -> "pending" */
    function enumName(value, prefix) {
        const s = String(value || '');
        return (s.startsWith(prefix) ? s.slice(prefix.length) : s).toLowerCase().replace(/_/g, ' ');
    }

    function levelIndex(scope) {
        if (!scope || !scope.session_id)
            return 0;
        if (!scope.task_id)
            return 1;
        return scope.agent_id ? 3 : 2;
    }

    /* The ids of a scope, session first; [] for the tenant. */
    function scopeIds(scope) {
        const ids = [];
        if (scope && scope.session_id) {
            ids.push(scope.session_id);
            if (scope.task_id) {
                ids.push(scope.task_id);
                if (scope.agent_id)
                    ids.push(scope.agent_id);
            }
        }
        return ids;
    }

    /* A unique key of a scope for the maps (ids may contain '/'). */
    function scopeKey(scope) {
        return JSON.stringify(scopeIds(scope));
    }

    /* "session/task/agent", "" for the tenant: the data-scope attribute. */
    function scopePath(scope) {
        return scopeIds(scope).join('/');
    }

    function scopeLabel(scope) {
        const ids = scopeIds(scope);
        return ids.length ? LEVEL_NAMES[ids.length] + ' ' + ids.join(' / ') : 'whole tenant';
    }

    /* The query arguments naming a scope under `field` (nothing for the tenant). */
    function scopeParams(field, scope) {
        const out = [];
        const ids = scopeIds(scope);
        const names = ['session_id', 'task_id', 'agent_id'];
        ids.forEach((id, i) => out.push([field + '.' + names[i], id]));
        return out;
    }

    function sameScope(a, b) {
        return scopeKey(a) === scopeKey(b);
    }

    function ago(ms) {
        if (!ms)
            return '';
        return new Date(Number(ms)).toLocaleString();
    }

    function until(ms) {
        if (!ms)
            return 'never';
        const s = Math.round((Number(ms) - Date.now()) / 1000);
        if (s <= 0)
            return 'now';
        if (s < 120)
            return 'in ' + s + ' s';
        if (s < 7200)
            return 'in ' + Math.round(s / 60) + ' min';
        return 'in ' + Math.round(s / 3600) + ' h';
    }

    /* ------------------------------------------------------------------ the API --- */

    class ApiError extends Error {
        constructor(status, body) {
            const e = (body && body.error) || {};
            super(e.message || 'HTTP ' + status);
            this.status = status;
            this.code = e.code || 'HTTP_' + status;
            this.reason = e.reason || '';
            this.field = e.field || '';
            this.requestId = e.request_id || '';
        }
    }

    function describe(err) {
        if (!(err instanceof ApiError))
            return 'The server could not be reached: ' + (err && err.message ? err.message : err);
        let s = err.status + ' ' + err.code;
        if (err.reason)
            s += ' (' + err.reason + ')';
        s += ': ' + err.message;
        if (err.field)
            s += ' [field ' + err.field + ']';
        if (err.requestId)
            s += ' · request ' + err.requestId;
        return s;
    }

    /* GET (params: [name, value] pairs) or, with a body, POST one API method. The answer's
     * JSON, or an ApiError. key: the one to use (sign-in), else the signed-in one. */
    async function api(method, params, body, key) {
        let url = API + method;
        if (params && params.length)
            url += '?' + new URLSearchParams(params).toString();
        const headers = { Authorization: 'Bearer ' + (key || state.key) };
        const init = { method: 'GET', headers, credentials: 'omit', cache: 'no-store',
                       redirect: 'error', referrerPolicy: 'no-referrer' };
        if (body !== undefined && body !== null) {
            init.method = 'POST';
            headers['Content-Type'] = 'application/json';
            init.body = JSON.stringify(body);
        }
        const r = await fetch(url, init);
        let parsed = null;
        try {
            parsed = await r.json();
        } catch (e) {
            parsed = null;
        }
        if (!r.ok || parsed === null)
            throw new ApiError(r.status, parsed);
        return parsed;
    }

    /* ------------------------------------------------------------------ messages --- */

    /* Three sources: an action's error stays until the next action; a refresh's error goes
     * once a refresh succeeds; the event stream's once a stream opens. In that order. */
    function showErrors() {
        const text = [state.errors.action, state.errors.refresh, state.errors.stream]
            .filter(Boolean).join('\n');
        const box = $('error');
        setText(box, text);
        box.hidden = !text;
    }

    function setError(source, text) {
        state.errors[source] = text || '';
        showErrors();
    }

    function notice(text) {
        const box = $('notice');
        setText(box, text || '');
        box.hidden = !text;
    }

    /* ------------------------------------------------------------------ sign in --- */

    async function signIn(key) {
        key = key.trim();
        if (!key) {
            setError('action', 'Type an API key first.');
            return;
        }
        setError('action', '');
        notice('');
        let who;
        try {
            who = await api('AdminService/WhoAmI', [], null, key);
        } catch (err) {
            setError('action', 'Sign-in refused: ' + describe(err));
            return;
        }
        sessionStorage.setItem(KEY_STORE, key);
        startSession(key, who);
    }

    function startSession(key, who) {
        stop();
        closeStream();
        resetViews();
        state.key = key;
        state.who = who;
        state.gen++;
        forgetStream();
        const bound = who.scope && who.scope.session_id ? who.scope : null;
        state.bound = bound;
        state.treeRoot = bound;
        state.chosen = bound;
        $('key').value = '';
        $('signin-form').hidden = true;
        $('session-bar').hidden = false;
        $('main').hidden = false;
        const parts = [];
        if (who.kind === 'KIND_ADMIN') {
            parts.push('server admin key (no tenant: use a tenant key here)');
        } else {
            parts.push('tenant ' + (who.tenant_name || '') + ' (' + who.tenant_id + ')');
            parts.push('role ' + enumName(who.role, 'API_KEY_ROLE_'));
            if (bound)
                parts.push('bound to ' + scopeLabel(bound));
        }
        if (who.key_id)
            parts.push('key ' + who.key_id);
        if (who.expires_at_unix_ms)
            parts.push('expires ' + ago(who.expires_at_unix_ms));
        setText($('whoami'), parts.join(' · '));
        showLive();
        tick();
        openStream();
    }

    function signOut(message) {
        stop();
        closeStream();
        forgetStream();
        sessionStorage.removeItem(KEY_STORE);
        state.key = '';
        state.who = null;
        state.gen++;
        resetViews();
        setText($('whoami'), '');
        $('session-bar').hidden = true;
        $('main').hidden = true;
        $('signin-form').hidden = false;
        state.errors.refresh = '';
        state.errors.stream = '';
        setError('action', message || '');
        notice(message ? '' : 'Signed out.');
        $('key').focus();
    }

    function stop() {
        if (state.timer)
            clearTimeout(state.timer);
        state.timer = 0;
    }

    function resetViews() {
        state.nodes.clear();
        state.rows.clear();
        state.pending.clear();
        state.pages = { tokens: [''], index: 0, next: '' };
        if (state.chart)
            state.chart.destroy();
        state.chart = null;
        state.chartFor = '';
        for (const id of ['tree', 'sessions', 'approvals', 'approval-history', 'history',
                          'compression', 'audit'])
            $(id).replaceChildren();
        for (const id of ['history-total', 'history-scope', 'compression-scope',
                          'tree-root-label', 'page-label', 'approvals-count', 'audit-note'])
            setText($(id), '');
        state.updatedAt = 0;
        showLive();
    }

    /* ------------------------------------------------------------------ refresh --- */

    /* One round: every panel re-read, then the next round RESYNC_MS later while the event
     * stream is open, REFRESH_MS later while it is not. */
    async function tick() {
        stop();
        if (!state.key)
            return;
        if (state.running) { /* asked during a round (an action, a click): one more after it */
            state.again = true;
            return;
        }
        state.running = true;
        state.again = false;
        const gen = state.gen;
        try {
            await refreshAll(gen);
        } finally {
            state.running = false;
        }
        if (state.key && (state.again || gen === state.gen))
            state.timer = setTimeout(tick, state.again ? 0 : pollMs());
    }

    function pollMs() {
        return state.stream.open ? RESYNC_MS : REFRESH_MS;
    }

    async function refreshAll(gen) {
        const results = await Promise.allSettled([
            refreshTree(gen), refreshScopes(gen), refreshApprovals(gen), refreshHistory(gen),
            refreshCompression(gen), refreshAudit(gen),
        ]);
        if (gen !== state.gen)
            return;
        const failed = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
        if (failed.some((e) => e instanceof ApiError && e.status === 401)) {
            signOut('The key was refused: ' + describe(failed.find((e) => e.status === 401)));
            return;
        }
        setError('refresh', failed.length ? describe(failed[0]) : '');
        state.updatedAt = Date.now();
        showLive();
    }

    /* #live: how the page follows the server, and the counters the end-to-end test reads. */
    function showLive() {
        const live = $('live');
        const s = state.stream;
        live.dataset.stream = s.open ? 'open' : 'closed';
        live.dataset.events = String(s.events);
        live.dataset.streamOpens = String(s.opens);
        live.dataset.streamsInFlight = String(s.inFlight);
        let text = '';
        if (state.key) {
            text = s.open ? 'live · stream' : 'polling';
            if (state.updatedAt)
                text += ' · updated ' + new Date(state.updatedAt).toLocaleTimeString();
        }
        setText(live, text);
        const title = !state.key ? ''
            : s.open ? 'following the server\'s events; everything is re-read every '
                + RESYNC_MS / 1000 + ' s too'
            : 'the event stream is down (reopening): re-read every ' + REFRESH_MS / 1000 + ' s';
        if (live.title !== title)
            live.title = title;
    }

    /* ------------------------------------------------------------------ event stream --- */

    /* A reader of the text/event-stream format (the HTML standard's "event stream
     * interpretation"): push() the decoded text as it comes, in pieces of any size;
     * onFrame({ type, data, id }) runs for each frame that has data, onRetry(ms) for a
     * retry: field. Lines end with CRLF, LF or CR (a CRLF may be split between two pieces);
     * a blank line ends a frame; a line starting with ':' is a comment; data lines are joined
     * with '\n'; the id carries over to the next frames, as the standard says. push() throws
     * when a line, or a frame's data, outgrows STREAM_LINE_MAX (the caller drops the stream). */
    function sseParser(onFrame, onRetry) {
        let rest = ''; /* the start of a line whose end has not come yet */
        let skipLF = false; /* the text so far ended with CR: a LF right after it is its pair */
        let type = '';
        let data = [];
        let dataLength = 0;
        let id = '';

        function dispatch() {
            if (data.length)
                onFrame({ type: type || 'message', data: data.join('\n'), id });
            type = '';
            data = [];
            dataLength = 0;
        }

        function line(text) {
            if (text === '') {
                dispatch();
                return;
            }
            if (text.charCodeAt(0) === 58) /* ':' */
                return;
            const colon = text.indexOf(':');
            const field = colon < 0 ? text : text.slice(0, colon);
            let value = colon < 0 ? '' : text.slice(colon + 1);
            if (value.charCodeAt(0) === 32)
                value = value.slice(1);
            if (field === 'event') {
                type = value;
            } else if (field === 'data') {
                dataLength += value.length + 1;
                if (dataLength > STREAM_LINE_MAX)
                    throw new Error('an event of the stream is too long');
                data.push(value);
            } else if (field === 'id') {
                if (!value.includes('\0'))
                    id = value;
            } else if (field === 'retry') {
                if (/^[0-9]{1,9}$/.test(value))
                    onRetry(Number(value));
            }
        }

        return {
            push(piece) {
                if (skipLF && piece) {
                    skipLF = false;
                    if (piece.charCodeAt(0) === 10)
                        piece = piece.slice(1);
                }
                if (!piece)
                    return;
                const text = rest + piece;
                let start = 0;
                for (let i = rest.length; i < text.length; i++) { /* rest holds no line end */
                    const c = text.charCodeAt(i);
                    if (c !== 10 && c !== 13)
                        continue;
                    line(text.slice(start, i));
                    if (c === 13) {
                        if (i + 1 === text.length)
                            skipLF = true;
                        else if (text.charCodeAt(i + 1) === 10)
                            i++;
                    }
                    start = i + 1;
                }
                rest = text.slice(start);
                if (rest.length > STREAM_LINE_MAX)
                    throw new Error('a line of the stream is too long');
            },
        };
    }

    /* Opens the signed-in key's event stream, unless one is open or opening. */
    function openStream() {
        const s = state.stream;
        if (!state.key || s.ctrl)
            return;
        clearTimeout(s.retryTimer);
        s.retryTimer = 0;
        const ctrl = new AbortController();
        s.ctrl = ctrl;
        s.inFlight++;
        showLive();
        readStream(ctrl, state.key)
            .then(() => streamEnded(ctrl, null), (err) => streamEnded(ctrl, err))
            .finally(() => {
                s.inFlight--;
                showLive();
            });
    }

    /* Reads one stream until it ends: resolves when the server ends it, rejects with an
     * ApiError when it is refused, with another error when it breaks or is aborted. */
    async function readStream(ctrl, key) {
        const s = state.stream;
        const params = scopeParams('scope', state.bound);
        /* No faster updates of a scope than the rounds they ask for. */
        params.push(['include_descendants', 'true'], ['send_snapshot', 'false'],
                    ['min_update_interval_ms', String(EVENT_ROUND_MS)]);
        const headers = { Authorization: 'Bearer ' + key, Accept: 'text/event-stream' };
        /* The id came from the server: sent back only when it is a plain header value. */
        if (/^[\x21-\x7e]{1,256}$/.test(s.lastId))
            headers['Last-Event-ID'] = s.lastId;
        const r = await fetch(API + 'BudgetService/WatchUsage?' + new URLSearchParams(params),
                              { method: 'GET', headers, credentials: 'omit', cache: 'no-store',
                                redirect: 'error', referrerPolicy: 'no-referrer',
                                signal: ctrl.signal });
        if (!r.ok) {
            let body = null;
            try {
                body = await r.json();
            } catch (e) {
                body = null;
            }
            throw new ApiError(r.status, body);
        }
        const type = r.headers.get('Content-Type') || '';
        if (!/^text\/event-stream\s*(;|$)/i.test(type) || !r.body)
            throw new Error('the answer is not an event stream (' + type + ')');
        if (s.ctrl !== ctrl)
            return;
        streamOpened(ctrl);
        const reader = r.body.getReader();
        const decoder = new TextDecoder();
        const parser = sseParser((frame) => onStreamFrame(ctrl, frame), (ms) => {
            s.serverRetryMs = ms;
        });
        for (;;) {
            const { value, done } = await reader.read();
            if (done || s.ctrl !== ctrl)
                break;
            armSilence(ctrl);
            parser.push(decoder.decode(value, { stream: true }));
        }
        parser.push(decoder.decode());
    }

    function streamOpened(ctrl) {
        const s = state.stream;
        s.open = true;
        s.opens++;
        s.backoffMs = BACKOFF_MIN_MS;
        armSilence(ctrl);
        setError('stream', '');
        showLive();
    }

    /* A stream that sends nothing, not even its heartbeats, is dead (a half-open connection):
     * ended here so that it is reopened. */
    function armSilence(ctrl) {
        const s = state.stream;
        clearTimeout(s.silenceTimer);
        s.silenceTimer = setTimeout(() => streamEnded(ctrl, null), STREAM_SILENT_MS);
    }

    /* The stream ctrl ended (err: why, null when the server ended it): polling takes over and
     * the stream is reopened after the backoff. Nothing when ctrl was closed on purpose. */
    function streamEnded(ctrl, err) {
        const s = state.stream;
        if (s.ctrl !== ctrl)
            return;
        ctrl.abort(); /* frees the connection whatever state the answer was in */
        s.ctrl = null;
        const wasOpen = s.open;
        s.open = false;
        clearTimeout(s.silenceTimer);
        s.silenceTimer = 0;
        if (err instanceof ApiError && err.status === 401) {
            signOut('The key was refused: ' + describe(err));
            return;
        }
        if (err instanceof ApiError)
            setError('stream', 'No live events (the page re-reads every ' + REFRESH_MS / 1000
                + ' s meanwhile): ' + describe(err));
        showLive();
        /* The round waiting RESYNC_MS comes REFRESH_MS from now instead. */
        if (wasOpen && state.timer && !state.running) {
            stop();
            state.timer = setTimeout(tick, REFRESH_MS);
        }
        const wait = Math.min(BACKOFF_MAX_MS, Math.max(s.backoffMs, s.serverRetryMs));
        s.backoffMs = Math.min(BACKOFF_MAX_MS, wait * 2);
        s.retryTimer = setTimeout(() => {
            s.retryTimer = 0;
            openStream();
        }, wait);
    }

    /* One frame of the stream ctrl: any event but a heartbeat asks for a round, once per
     * event ((scope, sequence): a replay after a reconnection may repeat some). */
    function onStreamFrame(ctrl, frame) {
        const s = state.stream;
        if (s.ctrl !== ctrl)
            return;
        if (frame.id)
            s.lastId = frame.id;
        if (frame.type === 'heartbeat')
            return;
        let ev = null;
        try {
            ev = JSON.parse(frame.data);
        } catch (e) {
            ev = null;
        }
        if (!ev || typeof ev !== 'object' || ev.type === 'USAGE_EVENT_TYPE_HEARTBEAT')
            return;
        const sequence = String(ev.sequence || '');
        if (sequence && sequence !== '0') {
            const key = scopeKey(ev.scope) + '#' + sequence;
            if (s.seen.has(key))
                return;
            s.seen.add(key);
            if (s.seen.size > SEEN_EVENTS_MAX) /* a Set iterates oldest first */
                s.seen.delete(s.seen.values().next().value);
        }
        s.events++;
        showLive();
        askRound();
    }

    /* A round soon, at most one per EVENT_ROUND_MS (tick() itself runs one round at a time). */
    function askRound() {
        const s = state.stream;
        if (s.roundTimer)
            return;
        const wait = Math.max(0, s.lastRoundAt + EVENT_ROUND_MS - Date.now());
        s.roundTimer = setTimeout(() => {
            s.roundTimer = 0;
            s.lastRoundAt = Date.now();
            tick();
        }, wait);
    }

    /* Aborts the stream and every timer of it (sign-out, a new sign-in). */
    function closeStream() {
        const s = state.stream;
        const ctrl = s.ctrl;
        s.ctrl = null;
        s.open = false;
        if (ctrl)
            ctrl.abort();
        for (const t of ['retryTimer', 'silenceTimer', 'roundTimer']) {
            clearTimeout(s[t]);
            s[t] = 0;
        }
    }

    /* What a stream of the previous key knew: not for the next one. */
    function forgetStream() {
        const s = state.stream;
        s.lastId = '';
        s.seen.clear();
        s.events = 0;
        s.backoffMs = BACKOFF_MIN_MS;
        s.serverRetryMs = 0;
        s.lastRoundAt = 0;
        state.errors.stream = '';
    }

    /* ------------------------------------------------------------------ the tree --- */

    async function refreshTree(gen) {
        const root = state.treeRoot;
        const params = scopeParams('scope', root);
        params.push(['depth', String(3 - levelIndex(root))]);
        params.push(['max_children', String(TREE_CHILDREN)]);
        if ($('scope-closed').checked)
            params.push(['include_closed', 'true']);
        const r = await api('BudgetService/GetUsage', params);
        if (gen !== state.gen)
            return;
        const path = r.path || [];
        const above = path.length ? path[path.length - 1] : null;
        const seen = new Set();
        const top = renderNode(r.root, above, seen);
        const tree = $('tree');
        if (tree.childNodes.length !== 1 || tree.firstChild !== top.parentNode) {
            const list = el('ul', 'tree-level');
            list.appendChild(top);
            tree.replaceChildren(list);
        }
        for (const key of [...state.nodes.keys()])
            if (!seen.has(key))
                state.nodes.delete(key);
        setText($('tree-root-label'), root ? scopeLabel(root) : '');
        $('tree-up').hidden = !root || sameScope(root, state.bound);
    }

    function makeNode(scope, level) {
        const li = el('li', 'node');
        li.dataset.scope = scopePath(scope);
        const row = el('div', 'row');
        const name = el('div', 'name');
        const idx = levelIndex(scope);
        name.appendChild(el('span', 'level', LEVEL_NAMES[idx]));
        const ids = scopeIds(scope);
        name.appendChild(el('span', 'id', idx === 0 ? (state.who && state.who.tenant_name) || 'tenant'
                                                   : ids[ids.length - 1]));
        const tags = el('span', 'tags');
        name.appendChild(tags);
        const bar = el('div', 'bar');
        const fillUsed = el('span', 'fill used-fill');
        const fillReserved = el('span', 'fill reserved-fill');
        const fillAllocated = el('span', 'fill allocated-fill');
        bar.append(fillUsed, fillReserved, fillAllocated);
        const figures = el('div', 'figures');
        const used = el('b', 'used');
        const reserved = el('b', 'reserved');
        const limit = el('b', 'limit');
        const ratio = el('b', 'ratio');
        figures.append('used ', used, ' · reserved ', reserved, ' · limit ', limit, ' · ', ratio);
        const extra = el('div', 'extra');
        const mode = el('span', 'mode');
        const delay = el('span', 'delay');
        const parent = el('span', 'parent');
        extra.append(mode, delay, parent);
        const actions = el('div', 'actions');
        const chart = el('button', 'chart', 'chart');
        chart.type = 'button';
        chart.title = 'spend over time and compression of this scope';
        chart.addEventListener('click', () => choose(scope));
        actions.appendChild(chart);
        if (idx === 1) {
            const open = el('button', 'open', 'open');
            open.type = 'button';
            open.title = 'show this session alone';
            open.addEventListener('click', () => focusTree(scope));
            actions.appendChild(open);
        }
        row.append(name, bar, figures, extra, actions);
        const kids = el('ul', 'tree-level');
        const more = el('li', 'more');
        li.append(row, kids);
        return { li, tags, fillUsed, fillReserved, fillAllocated, used, reserved, limit, ratio,
                 mode, delay, parent, kids, more, open: null };
    }

    function setWidth(e, fraction) {
        const w = Math.max(0, Math.min(1, fraction)) * 100;
        e.style.width = w.toFixed(2) + '%';
    }

    /* Updates (or makes) the node of u and its children; returns its <li>. above: what is
     * known of its parent (a ScopeUsage or a LevelStatus), or null at the top. */
    function renderNode(u, above, seen) {
        const key = scopeKey(u.scope);
        seen.add(key);
        let n = state.nodes.get(key);
        if (!n) {
            n = makeNode(u.scope, u.level);
            state.nodes.set(key, n);
        }
        const cap = (Number(u.budget && u.budget.settings ? u.budget.settings.limit_tokens : 0) || 0)
            + (Number(u.approved_extra_tokens) || 0);
        const budgeted = u.has_budget && cap > 0;
        if (budgeted) {
            const usedF = u.used_tokens / cap;
            const resF = u.reserved_tokens / cap;
            setWidth(n.fillUsed, usedF);
            setWidth(n.fillReserved, Math.min(resF, 1 - Math.min(usedF, 1)));
            setWidth(n.fillAllocated, Math.min(u.allocated_tokens / cap,
                                               1 - Math.min(usedF + resF, 1)));
        } else {
            for (const f of [n.fillUsed, n.fillReserved, n.fillAllocated])
                setWidth(f, 0);
        }
        const ratio = Number(u.usage_ratio) || 0;
        const warnAt = u.budget && u.budget.settings && u.budget.settings.warning_ratio
            ? Number(u.budget.settings.warning_ratio) : 0.8;
        n.li.classList.toggle('warn', budgeted && ratio >= warnAt && ratio < 1);
        n.li.classList.toggle('over', budgeted && ratio >= 1);
        n.li.classList.toggle('closed', u.state === 'SCOPE_STATE_CLOSED');
        n.li.classList.toggle('chosen', sameScope(u.scope, state.chosen));
        setText(n.used, fmt(u.used_tokens));
        setText(n.reserved, fmt(u.reserved_tokens) + (u.allocated_tokens
            ? ' (+' + fmt(u.allocated_tokens) + ' allocated)' : ''));
        setText(n.limit, u.has_budget
            ? fmt(u.budget.settings.limit_tokens) + (u.approved_extra_tokens
                ? ' + ' + fmt(u.approved_extra_tokens) + ' approved' : '')
            : 'none');
        setText(n.ratio, u.has_budget ? pct(ratio) : 'no budget');
        setText(n.mode, u.has_budget ? 'mode ' + enumName(u.budget.settings.mode, 'BUDGET_MODE_')
                                     : 'no budget of its own');
        const delayMs = Number(u.backpressure_delay_ms) || 0;
        setText(n.delay, delayMs ? 'backpressure ' + fmt(delayMs) + ' ms' : 'no backpressure');
        n.delay.classList.toggle('hot', delayMs > 0);
        let parentText = 'top level';
        if (above)
            parentText = above.has_budget
                ? 'parent remaining ' + fmt(above.remaining_tokens)
                : 'parent has no budget';
        setText(n.parent, parentText);
        const tags = [];
        if (u.state === 'SCOPE_STATE_CLOSED')
            tags.push('closed');
        if (u.open_reservations)
            tags.push(fmt(u.open_reservations) + ' open reservations');
        if (u.pending_approvals)
            tags.push(fmt(u.pending_approvals) + ' pending approvals');
        if (u.forecast && u.forecast.exhaustion_unix_ms)
            tags.push('runs out ' + until(u.forecast.exhaustion_unix_ms));
        setText(n.tags, tags.join(' · '));

        const kids = (u.children || []).map((c) => renderNode(c, u, seen));
        const shown = kids.length;
        if (u.children_truncated || (u.child_count > shown && shown > 0)) {
            setText(n.more, 'and ' + fmt(Math.max(0, u.child_count - shown))
                + ' more: see the sessions list');
            kids.push(n.more);
        }
        syncChildren(n.kids, kids);
        return n.li;
    }

    /* Makes parent's children exactly `wanted`, in order, moving existing elements (so that
     * a focused button or a typed value survives a refresh). */
    function syncChildren(parent, wanted) {
        wanted.forEach((child, i) => {
            if (parent.children[i] !== child)
                parent.insertBefore(child, parent.children[i] || null);
        });
        while (parent.children.length > wanted.length)
            parent.removeChild(parent.lastElementChild);
    }

    function focusTree(scope) {
        state.treeRoot = scope;
        choose(scope);
    }

    /* ------------------------------------------------------------------ scope list --- */

    async function refreshScopes(gen) {
        const params = scopeParams('parent', state.bound);
        params.push(['order', $('scope-order').value]);
        params.push(['page_size', String(PAGE_SIZE)]);
        if ($('scope-closed').checked)
            params.push(['include_closed', 'true']);
        const token = state.pages.tokens[state.pages.index];
        if (token)
            params.push(['page_token', token]);
        const r = await api('BudgetService/ListScopes', params);
        if (gen !== state.gen)
            return;
        state.pages.next = r.next_page_token || '';
        const seen = new Set();
        const rows = (r.scopes || []).map((u) => {
            const key = scopeKey(u.scope);
            seen.add(key);
            let row = state.rows.get(key);
            if (!row) {
                row = makeScopeRow(u.scope);
                state.rows.set(key, row);
            }
            setText(row.used, fmt(u.used_tokens));
            setText(row.limit, u.has_budget ? fmt(u.budget.settings.limit_tokens) : 'none');
            setText(row.ratio, u.has_budget ? pct(u.usage_ratio) : '');
            row.tr.classList.toggle('over', u.has_budget && u.usage_ratio >= 1);
            row.tr.classList.toggle('closed', u.state === 'SCOPE_STATE_CLOSED');
            return row.tr;
        });
        for (const key of [...state.rows.keys()])
            if (!seen.has(key))
                state.rows.delete(key);
        syncChildren($('sessions'), rows);
        applyFilter();
        $('page-prev').disabled = state.pages.index === 0;
        $('page-next').disabled = !state.pages.next;
        setText($('page-label'), 'page ' + (state.pages.index + 1) + ' · ' + rows.length + ' shown');
    }

    function makeScopeRow(scope) {
        const tr = el('tr');
        tr.dataset.scope = scopePath(scope);
        const ids = scopeIds(scope);
        const idCell = el('td', 'id', ids[ids.length - 1]);
        const used = el('td', 'num');
        const limit = el('td', 'num');
        const ratio = el('td', 'num');
        const act = el('td', 'actions');
        const chart = el('button', 'chart', 'chart');
        chart.type = 'button';
        chart.addEventListener('click', () => choose(scope));
        act.appendChild(chart);
        if (levelIndex(scope) === 1) {
            const open = el('button', 'open', 'open');
            open.type = 'button';
            open.addEventListener('click', () => focusTree(scope));
            act.appendChild(open);
        }
        tr.append(idCell, used, limit, ratio, act);
        return { tr, id: ids[ids.length - 1] || '', used, limit, ratio };
    }

    function applyFilter() {
        const f = $('scope-filter').value.trim().toLowerCase();
        for (const row of state.rows.values())
            row.tr.hidden = Boolean(f) && !row.id.toLowerCase().includes(f);
    }

    function resetPages() {
        state.pages = { tokens: [''], index: 0, next: '' };
        tick();
    }

    /* ------------------------------------------------------------------ approvals --- */

    async function refreshApprovals(gen) {
        const base = scopeParams('scope', state.bound);
        base.push(['include_descendants', 'true']);
        const [open, done] = await Promise.all([
            api('BudgetService/ListApprovals', base.concat([
                ['states', 'APPROVAL_STATE_PENDING'], ['page_size', '200']])),
            api('BudgetService/ListApprovals', base.concat([
                ['states', 'APPROVAL_STATE_APPROVED'], ['states', 'APPROVAL_STATE_DENIED'],
                ['states', 'APPROVAL_STATE_EXPIRED'], ['page_size', String(HISTORY_SIZE)]])),
        ]);
        if (gen !== state.gen)
            return;
        /* The queue: the oldest request first (it expires first). */
        const pending = (open.approvals || []).slice().sort(
            (a, b) => a.requested_at_unix_ms - b.requested_at_unix_ms);
        const seen = new Set();
        const rows = pending.map((a) => {
            seen.add(a.approval_id);
            let row = state.pending.get(a.approval_id);
            if (!row) {
                row = makeApprovalRow(a);
                state.pending.set(a.approval_id, row);
            }
            setText(row.expires, until(a.expires_at_unix_ms));
            return row.tr;
        });
        for (const id of [...state.pending.keys()])
            if (!seen.has(id))
                state.pending.delete(id);
        syncChildren($('approvals'), rows);
        setText($('approvals-count'), pending.length ? fmt(pending.length) + ' waiting'
                                                     : 'none waiting');
        const decided = (done.approvals || []).slice().sort(
            (a, b) => (b.decided_at_unix_ms || b.expires_at_unix_ms)
                - (a.decided_at_unix_ms || a.expires_at_unix_ms));
        $('approval-history').replaceChildren(...decided.map((a) => {
            const tr = el('tr', 'decided ' + enumName(a.state, 'APPROVAL_STATE_'));
            tr.dataset.approvalId = a.approval_id;
            tr.append(el('td', 'scope', scopeLabel(a.scope)),
                      el('td', 'state', enumName(a.state, 'APPROVAL_STATE_')),
                      el('td', 'num', a.state === 'APPROVAL_STATE_APPROVED' ? fmt(a.granted_tokens) : ''),
                      el('td', 'by', a.decided_by || a.decided_by_key_id || ''),
                      el('td', 'when', ago(a.decided_at_unix_ms || a.expires_at_unix_ms)));
            if (a.decision_note)
                tr.title = a.decision_note;
            return tr;
        }));
    }

    /* The last AUDIT_SIZE changes of the tenant (or the key's bound subtree), newest first:
     * budgets set, approvals decided, keys, settings, scopes closed, sessions deleted. The
     * audit trail is for operators and admins: another role's 403 is said in the panel, not
     * as an error of the page. */
    async function refreshAudit(gen) {
        const params = scopeParams('scope', state.bound);
        params.push(['page_size', String(AUDIT_SIZE)]);
        let r;
        try {
            r = await api('AdminService/ListAuditEvents', params);
        } catch (err) {
            if (!(err instanceof ApiError) || err.status !== 403)
                throw err;
            if (gen === state.gen) {
                setText($('audit-note'), 'not readable with a ' +
                    enumName(state.who.role, 'API_KEY_ROLE_') + ' key (operators and admins)');
                $('audit').replaceChildren();
            }
            return;
        }
        if (gen !== state.gen)
            return;
        const events = r.events || [];
        setText($('audit-note'), events.length ? 'last ' + fmt(events.length) : 'none yet');
        $('audit').replaceChildren(...events.map((e) => {
            const tr = el('tr', 'change');
            tr.dataset.auditId = String(e.audit_id);
            const where = e.scope && (e.scope.session_id || e.scope.task_id || e.scope.agent_id)
                ? scopeLabel(e.scope) : e.scope ? 'tenant' : '';
            const target = [where, e.target].filter(Boolean).join(' · ');
            const by = [e.actor_role, e.actor_key_id].filter(Boolean).join(' ');
            const after = el('td', 'after', clip(e.after_json || '', AUDIT_TEXT_MAX));
            /* before -> after in full on hover; text only, never parsed as HTML */
            after.title = (e.before_json ? e.before_json + ' -> ' : '') + (e.after_json || '') +
                (e.request_id ? '\nrequest ' + e.request_id : '');
            tr.append(el('td', 'when', ago(e.at_unix_ms)), el('td', 'kind', e.kind || ''),
                      el('td', 'scope', target), el('td', 'by', by), after);
            return tr;
        }));
    }

    function clip(text, max) {
        return text.length > max ? text.slice(0, max - 1) + '\u2026' : text;
    }

    function makeApprovalRow(a) {
        const tr = el('tr', 'pending');
        tr.dataset.approvalId = a.approval_id;
        const why = [a.model, a.reason].filter(Boolean).join(' · ');
        const expires = el('td', 'expires');
        const decide = el('td', 'decide');
        const granted = el('input', 'granted');
        granted.type = 'number';
        granted.min = '0';
        granted.step = '1';
        granted.placeholder = fmt(a.requested_tokens);
        granted.title = 'tokens to add to the limit (empty: the requested ' + a.requested_tokens + ')';
        granted.setAttribute('aria-label', 'granted tokens');
        const approve = el('button', 'approve', 'approve');
        approve.type = 'button';
        const deny = el('button', 'deny', 'deny');
        deny.type = 'button';
        approve.addEventListener('click', () => resolve(a, 'APPROVAL_STATE_APPROVED', granted, [approve, deny]));
        deny.addEventListener('click', () => resolve(a, 'APPROVAL_STATE_DENIED', null, [approve, deny]));
        decide.append(granted, approve, deny);
        tr.append(el('td', 'scope', scopeLabel(a.scope) + ' (' + enumName(a.level, 'SCOPE_LEVEL_') + ')'),
                  el('td', 'num', fmt(a.requested_tokens)),
                  el('td', 'num', fmt(a.overage_tokens)),
                  el('td', 'why', why), expires, decide);
        return { tr, expires };
    }

    async function resolve(a, decision, grantedInput, buttons) {
        const body = { approval_id: a.approval_id, decision };
        if (grantedInput) {
            const raw = grantedInput.value.trim();
            if (raw) {
                if (!/^\d{1,15}$/.test(raw)) {
                    setError('action', 'Granted tokens must be a whole number (empty: the '
                        + 'requested ' + fmt(a.requested_tokens) + ').');
                    return;
                }
                body.granted_tokens = Number(raw);
            }
        }
        setError('action', '');
        notice('');
        const gen = state.gen;
        buttons.forEach((b) => { b.disabled = true; });
        try {
            const r = await api('BudgetService/ResolveApproval', null, body);
            if (gen !== state.gen)
                return;
            const ap = r.approval || {};
            notice('Approval for ' + scopeLabel(ap.scope) + ' '
                + enumName(ap.state, 'APPROVAL_STATE_')
                + (ap.state === 'APPROVAL_STATE_APPROVED' ? ': ' + fmt(ap.granted_tokens)
                    + ' tokens added' : '') + (r.replayed ? ' (already so)' : '') + '.');
        } catch (err) {
            if (gen === state.gen)
                setError('action', 'Could not ' + (decision === 'APPROVAL_STATE_APPROVED'
                    ? 'approve' : 'deny') + ': ' + describe(err));
        } finally {
            buttons.forEach((b) => { b.disabled = false; });
        }
        tick();
    }

    /* ------------------------------------------------------------------ history --- */

    function choose(scope) {
        state.chosen = scope;
        tick();
    }

    async function refreshHistory(gen) {
        const scope = state.chosen;
        const step = STEPS[state.step];
        const params = scopeParams('scope', scope);
        params.push(['from_unix_ms', String(Date.now() - step.count * step.seconds * 1000)]);
        params.push(['step_seconds', String(step.seconds)]);
        const r = await api('BudgetService/GetUsageHistory', params);
        if (gen !== state.gen || scope !== state.chosen)
            return;
        setText($('history-scope'), scopeLabel(scope));
        const points = r.points || [];
        const xs = [], input = [], output = [], cacheRead = [], cacheWrite = [], total = [];
        for (const p of points) {
            const u = p.usage || {};
            xs.push(p.start_unix_ms / 1000);
            input.push(u.input_tokens || 0);
            output.push(u.output_tokens || 0);
            cacheRead.push(u.cache_read_tokens || 0);
            cacheWrite.push(u.cache_write_tokens || 0);
            total.push((u.input_tokens || 0) + (u.output_tokens || 0)
                + (u.cache_read_tokens || 0) + (u.cache_write_tokens || 0));
        }
        const t = r.total || {};
        setText($('history-total'), step.label + ': ' + fmt(r.total_entries) + ' calls, input '
            + fmt(t.input_tokens) + ' · output ' + fmt(t.output_tokens) + ' · cache read '
            + fmt(t.cache_read_tokens) + ' · cache write ' + fmt(t.cache_write_tokens)
            + ' tokens · ' + dollars(t.cost_micros));
        drawChart(scopeKey(scope) + '|' + state.step, [xs, total, input, output, cacheRead, cacheWrite]);
    }

    function drawChart(key, data) {
        const box = $('history');
        if (typeof uPlot === 'undefined') {
            setText(box, 'The chart library did not load.');
            return;
        }
        if (state.chart && state.chartFor === key) {
            state.chart.setData(data);
            return;
        }
        if (state.chart)
            state.chart.destroy();
        box.replaceChildren();
        const series = (label, color, dash) => ({ label, stroke: color, width: 1.5, dash,
                                                 value: (u, v) => (v === null ? '' : fmt(v)) });
        state.chart = new uPlot({
            width: Math.max(320, box.clientWidth || 640),
            height: 220,
            scales: { x: { time: true } },
            series: [
                {},
                Object.assign(series('total', '#1f6feb'), { fill: 'rgba(31,111,235,0.08)' }),
                series('input', '#8250df'),
                series('output', '#bf8700'),
                series('cache read', '#1a7f37', [4, 3]),
                series('cache write', '#cf222e', [2, 3]),
            ],
            axes: [{}, { values: (u, vals) => vals.map((v) => fmt(v)), size: 70 }],
        }, data, box);
        state.chartFor = key;
    }

    /* ------------------------------------------------------------------ compression --- */

    async function refreshCompression(gen) {
        const scope = state.chosen;
        const session = scope && scope.session_id ? scope.session_id : '';
        let r;
        try {
            r = await api('ContextService/GetCompressionStats',
                          session ? [['session_id', session]] : []);
        } catch (err) {
            /* A session that never called Compress has no context session: not an error. */
            if (!(err instanceof ApiError) || err.reason !== 'SESSION_NOT_FOUND')
                throw err;
            r = null;
        }
        if (gen !== state.gen || scope !== state.chosen)
            return;
        setText($('compression-scope'), session ? 'session ' + session : 'whole tenant');
        if (r === null) {
            $('compression').replaceChildren(el('p', 'muted none',
                'No Compress call has used this session: nothing saved yet.'));
            return;
        }
        const saved = Number(r.tokens_saved) || 0;
        const before = Number(r.tokens_before) || 0;
        const dl = el('dl', 'stats');
        const add = (k, v, cls) => {
            dl.append(el('dt', null, k), el('dd', cls || null, v));
        };
        add('compress calls', fmt(r.compress_calls) + ' (' + fmt(r.triggered_calls)
            + ' over the trigger)', 'calls');
        add('tokens before → after', fmt(before) + ' → ' + fmt(r.tokens_after));
        add('tokens saved', fmt(saved) + (before ? ' (' + pct(saved / before) + ')' : ''), 'saved');
        add('artifacts offloaded', fmt(r.artifacts_created) + ' (' + fmt(r.artifact_bytes) + ' bytes)');
        add('summaries', fmt(r.summaries_llm) + ' by the LLM, ' + fmt(r.summaries_extractive)
            + ' extractive, ' + fmt(r.summary_fallbacks) + ' fallbacks');
        add('cache tokens invalidated', fmt(r.cache_tokens_invalidated));
        if (r.last_compressed_at_unix_ms)
            add('last compressed', ago(r.last_compressed_at_unix_ms));
        const parts = [dl];
        const layers = r.by_layer || [];
        if (layers.length) {
            const table = el('table', 'grid');
            const head = el('tr');
            for (const h of ['layer', 'applied', 'failed', 'tokens saved', 'messages'])
                head.appendChild(el('th', null, h));
            const thead = el('thead');
            thead.appendChild(head);
            const body = el('tbody');
            for (const l of layers) {
                const tr = el('tr');
                tr.append(el('td', null, enumName(l.layer, 'COMPRESSION_LAYER_')),
                          el('td', 'num', fmt(l.applied)), el('td', 'num', fmt(l.failed)),
                          el('td', 'num', fmt(l.tokens_saved)),
                          el('td', 'num', fmt(l.messages_affected)));
                body.appendChild(tr);
            }
            table.append(thead, body);
            parts.push(table);
        }
        $('compression').replaceChildren(...parts);
    }

    /* ------------------------------------------------------------------ wiring --- */

    function init() {
        $('signin-form').addEventListener('submit', (ev) => {
            ev.preventDefault();
            signIn($('key').value);
        });
        $('signout').addEventListener('click', () => signOut(''));
        $('tree-up').addEventListener('click', () => {
            state.treeRoot = state.bound;
            tick();
        });
        $('scope-order').addEventListener('change', resetPages);
        $('scope-closed').addEventListener('change', resetPages);
        $('scope-filter').addEventListener('input', applyFilter);
        $('page-next').addEventListener('click', () => {
            if (!state.pages.next)
                return;
            state.pages.tokens = state.pages.tokens.slice(0, state.pages.index + 1);
            state.pages.tokens.push(state.pages.next);
            state.pages.index++;
            tick();
        });
        $('page-prev').addEventListener('click', () => {
            if (state.pages.index > 0)
                state.pages.index--;
            tick();
        });
        $('history-step').addEventListener('change', (ev) => {
            state.step = STEPS[ev.target.value] ? ev.target.value : 'minute';
            tick();
        });
        window.addEventListener('resize', () => {
            const box = $('history');
            if (state.chart && box.clientWidth)
                state.chart.setSize({ width: Math.max(320, box.clientWidth), height: 220 });
        });
        const saved = sessionStorage.getItem(KEY_STORE);
        if (saved)
            signIn(saved);
        else
            $('key').focus();
    }

    if (document.readyState === 'loading')
        document.addEventListener('DOMContentLoaded', init);
    else
        init();
})();
