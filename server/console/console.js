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
 * Live updates: the shown data is re-read every REFRESH_MS by polling, one round of requests
 * at a time (about six per round, well inside the API's per-key rate). The API's
 * Server-Sent Events feed is not built yet (issue 18); once it is, the tree and the
 * approvals can follow its events and poll only to resynchronise.
 */
'use strict';

(() => {
    const KEY_STORE = 'ctxguard.console.key';
    const API = 'api/v1/'; /* relative: the console may be served under a path prefix */
    const REFRESH_MS = 2000;
    const TREE_CHILDREN = 50; /* children per node in the tree */
    const PAGE_SIZE = 50; /* scopes per page of the list */
    const HISTORY_SIZE = 20; /* decided approvals shown */
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
        errors: { action: '', refresh: '' },
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

    /* Two sources: an action's error stays until the next action; a refresh's error goes
     * once a refresh succeeds. The action's is shown first. */
    function showErrors() {
        const text = [state.errors.action, state.errors.refresh].filter(Boolean).join('\n');
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
        resetViews();
        state.key = key;
        state.who = who;
        state.gen++;
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
        tick();
    }

    function signOut(message) {
        stop();
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
                          'compression'])
            $(id).replaceChildren();
        for (const id of ['history-total', 'history-scope', 'compression-scope',
                          'tree-root-label', 'page-label', 'approvals-count', 'live'])
            setText($(id), '');
    }

    /* ------------------------------------------------------------------ refresh --- */

    /* One round: every panel re-read, then the next round REFRESH_MS later. */
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
            state.timer = setTimeout(tick, state.again ? 0 : REFRESH_MS);
    }

    async function refreshAll(gen) {
        const results = await Promise.allSettled([
            refreshTree(gen), refreshScopes(gen), refreshApprovals(gen), refreshHistory(gen),
            refreshCompression(gen),
        ]);
        if (gen !== state.gen)
            return;
        const failed = results.filter((r) => r.status === 'rejected').map((r) => r.reason);
        if (failed.some((e) => e instanceof ApiError && e.status === 401)) {
            signOut('The key was refused: ' + describe(failed.find((e) => e.status === 401)));
            return;
        }
        setError('refresh', failed.length ? describe(failed[0]) : '');
        setText($('live'), 'live · updated ' + new Date().toLocaleTimeString());
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
