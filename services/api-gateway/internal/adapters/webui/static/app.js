// nodesmith status page: reads the admin API with a bearer token kept in
// this tab's sessionStorage and redraws every few seconds. With an admin
// token (GET /status names the caller's role) it also edits node groups,
// templates and accounts and retries or force-deletes instances: every
// edit form keeps the ETag it was loaded with and sends it as If-Match, so
// a change made by someone else meanwhile is refused (412), not
// overwritten. Writes carry the token in the Authorization header (never
// a cookie: no ambient credentials to forge requests with). Data only ever
// reaches the page through textContent (never as HTML), and the page's
// Content-Security-Policy allows no inline script or style.
'use strict';

(function () {
  const TOKEN_KEY = 'nodesmith.token';
  const REFRESH_MS = 5000;
  const LIVE = ['PENDING', 'CREATING', 'CREATED', 'JOINED', 'RUNNING', 'PENDING_DELETION', 'DELETING'];
  const STATES = LIVE.concat(['DELETED']);
  const INSTANCE_LIMIT = 1000;
  const CONFLICT = 'Not saved: it was changed by someone else since you opened it. Reload it to see the current version, then edit again.';
  const TRANSITION_LIMIT = 50;

  let timer = null;
  let paused = false;
  // role is what the token may do, from GET /status: write controls are
  // drawn for "admin" only (the API refuses writes from other tokens
  // anyway).
  let role = '';
  // editing is the open edit form: {kind, id, form, etag, data}.
  let editing = null;
  // instancesByID is the last instance list, for the confirmation texts.
  let instancesByID = new Map();

  const isAdmin = () => role === 'admin';
  const enc = encodeURIComponent;

  const $ = (id) => document.getElementById(id);

  // A token may arrive in the URL fragment (#token=...), which browsers
  // never send to servers; it is moved into sessionStorage and removed
  // from the address bar and history at once.
  function takeTokenFromFragment() {
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (!m) {
      return;
    }
    let t = '';
    try {
      t = decodeURIComponent(m[1]).trim();
    } catch (e) {
      t = '';
    }
    if (t) {
      sessionStorage.setItem(TOKEN_KEY, t);
    }
    history.replaceState(null, '', location.pathname + location.search);
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY) || '';

  class APIError extends Error {
    constructor(status, message, field) {
      super(message);
      this.status = status;
      this.field = field || '';
    }
  }

  // call sends one request to the API next to /ui/ (also behind a path
  // prefix: the URL is relative to the page, so always this origin) and
  // returns {data, etag}. Errors become APIError with the body's message
  // and the field (or header, or parameter) it names.
  async function call(method, path, opts) {
    const o = opts || {};
    const headers = { Authorization: 'Bearer ' + token(), Accept: 'application/json' };
    let body;
    if (o.body !== undefined) {
      headers['Content-Type'] = o.type || 'application/json';
      body = JSON.stringify(o.body);
    }
    if (o.ifMatch) {
      headers['If-Match'] = o.ifMatch;
    }
    const resp = await fetch(new URL('../api/v1/' + path, location.href), {
      method: method,
      headers: headers,
      body: body,
      cache: 'no-store',
      credentials: 'omit',
      redirect: 'error',
    });
    if (!resp.ok) {
      let msg = resp.status + ' ' + resp.statusText;
      let field = '';
      try {
        const b = await resp.json();
        if (b && b.message) {
          msg = b.message;
        }
        const d = (b && b.details) || {};
        field = d.field || d.header || d.parameter || '';
      } catch (e) {
        // not JSON: keep the status line
      }
      throw new APIError(resp.status, msg, String(field));
    }
    const data = resp.status === 204 ? null : await resp.json();
    return { data: data, etag: resp.headers.get('ETag') || '' };
  }

  async function api(path) {
    return (await call('GET', path)).data;
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) {
      e.textContent = String(text);
    }
    if (cls) {
      e.className = cls;
    }
    return e;
  }

  function row(cells, attrs) {
    const tr = document.createElement('tr');
    for (const c of cells) {
      tr.appendChild(c instanceof Node ? c : el('td', c));
    }
    for (const [k, v] of Object.entries(attrs || {})) {
      tr.dataset[k] = v;
    }
    return tr;
  }

  function num(n) {
    const td = el('td', n || 0, 'num');
    if (!n) {
      td.classList.add('zero');
    }
    return td;
  }

  // actionButton is a write control; one listener (start) handles them all,
  // so redrawn rows need no wiring.
  function actionButton(label, action, id, cls) {
    const b = el('button', label, cls);
    b.type = 'button';
    b.dataset.action = action;
    b.dataset.id = id;
    return b;
  }

  function actionsCell(...buttons) {
    const td = el('td', null, 'actions');
    for (const b of buttons) {
      if (b) {
        td.appendChild(b);
      }
    }
    return td;
  }

  function fill(tableId, rows) {
    const body = $(tableId).tBodies[0];
    body.replaceChildren(...rows);
  }

  // ago renders the time since an RFC 3339 timestamp ("42s", "5m", "3h", "2d").
  function ago(ts) {
    if (!ts) {
      return '';
    }
    const s = Math.max(0, Math.round((Date.now() - Date.parse(ts)) / 1000));
    if (s < 120) {
      return s + 's';
    }
    if (s < 7200) {
      return Math.round(s / 60) + 'm';
    }
    if (s < 172800) {
      return Math.round(s / 3600) + 'h';
    }
    return Math.round(s / 86400) + 'd';
  }

  function when(ts) {
    if (!ts) {
      return el('td', '');
    }
    const td = el('td', ago(ts) + ' ago');
    td.title = ts;
    return td;
  }

  function stateCell(s) {
    return el('td', s, 'state');
  }

  function pad2(n) {
    return String(n).padStart(2, '0');
  }

  // clock renders an RFC 3339 timestamp as this browser's local HH:MM:SS.
  function clock(ts) {
    const d = new Date(ts);
    return pad2(d.getHours()) + ':' + pad2(d.getMinutes()) + ':' + pad2(d.getSeconds());
  }

  // offeringsRow is the row under a group's that lists its template's
  // offerings and which a cloud adapter marked unavailable; null when the
  // template has none.
  function offeringsRow(g, columns) {
    const o = g.offerings;
    if (!o || !(o.items || []).length) {
      return null;
    }
    const table = el('table', null, 'offerings');
    const caption = el('caption', 'offerings (' + o.strategy + ')', 'muted');
    const head = document.createElement('thead');
    head.appendChild(row(['zone', 'subnet', 'type', 'capacity', 'state'].map((h) => el('th', h))));
    const body = document.createElement('tbody');
    for (const it of o.items) {
      let state = el('td', 'available', 'ok');
      if (!it.available) {
        const reason = it.reason || {};
        state = el('td', 'unavailable until ' + clock(it.unavailableUntil) + ' (' + (reason.code || 'unknown') + ')', 'error');
        state.title = it.unavailableUntil + (reason.message ? ': ' + reason.message : '');
      }
      body.appendChild(row([
        el('td', it.zone), el('td', it.subnetId || ''), el('td', it.instanceType), el('td', it.capacityType), state,
      ], { offering: it.zone + '/' + it.instanceType + '/' + it.capacityType }));
    }
    table.append(caption, head, body);
    const td = el('td', null, 'nested');
    td.colSpan = columns;
    td.appendChild(table);
    return row([td], { offeringsOf: g.id });
  }

  function renderGroups(groups, status) {
    const failed = {};
    for (const g of status.groups || []) {
      failed[g.id] = g.creationFailed;
    }
    fill('groups', groups.items.flatMap((g) => {
      const t = g.instanceTemplate || {};
      const tpl = [t.name, t.instanceType, t.zone || t.region].filter(Boolean).join(' · ');
      const counts = g.instances || {};
      const cells = [
        el('td', g.id), num(g.minSize), num(g.maxSize), num(g.targetSize), el('td', tpl, 'wrap'),
        ...STATES.map((s) => num(counts[s])),
        num(failed[g.id]),
      ];
      if (isAdmin()) {
        cells.push(actionsCell(actionButton('Edit', 'edit-group', g.id)));
      }
      const offerings = offeringsRow(g, cells.length);
      return offerings ? [row(cells, { group: g.id }), offerings] : [row(cells, { group: g.id })];
    }));
  }

  function renderInstances(list) {
    const items = list.items;
    instancesByID = new Map(items.map((i) => [i.id, i]));
    fill('instances', items.map((i) => {
      const cells = [
        el('td', i.id), el('td', i.group), stateCell(i.state), when(i.createdAt), when(i.stateSince),
        el('td', i.nodeName || i.privateIP || ''),
        // Where the VM was created; empty when not recorded (instances from
        // before it was, templates without offerings).
        el('td', i.zone || ''), el('td', i.instanceType || ''), el('td', i.capacityType || ''),
        el('td', i.providerID),
        el('td', i.lastError ? i.lastError.code : ''),
      ];
      if (isAdmin()) {
        cells.push(actionsCell(
          (i.creationFailed || i.nextRetryAt) ? actionButton('Retry', 'retry', i.id) : null,
          actionButton('Force delete', 'force-delete', i.id, 'danger'),
        ));
      }
      return row(cells, { instance: i.id });
    }));
    $('instances-note').textContent = list.continue
      ? '(the first ' + items.length + ' live instances)'
      : '(' + items.length + ' live)';

    const failing = items.filter((i) => i.lastError);
    failing.sort((a, b) => (b.lastError.at || '').localeCompare(a.lastError.at || ''));
    fill('errors', failing.map((i) => row([
      el('td', i.id), el('td', i.group), stateCell(i.state), el('td', i.lastError.code),
      el('td', i.lastError.message, 'msg'), when(i.lastError.at),
    ], { instance: i.id })));
    $('errors-none').hidden = failing.length > 0;
  }

  function renderTemplates(list) {
    fill('templates', list.items.map((t) => {
      const cells = [
        el('td', t.name), el('td', t.account), el('td', t.region), el('td', t.zone), el('td', t.instanceType),
        el('td', t.hourlyPrice ? t.hourlyPrice : '', 'num'), el('td', (t.groups || []).join(', '), 'wrap'), el('td', t.source),
      ];
      if (isAdmin()) {
        // Entries from the configuration file change there; inline
        // templates change with their group.
        cells.push(actionsCell(t.source === 'api' ? actionButton('Edit', 'edit-template', t.name) : null));
      }
      return row(cells, { template: t.name });
    }));
  }

  function renderAccounts(list) {
    fill('accounts', list.items.map((a) => {
      const creds = a.credentials || {};
      const cells = [
        el('td', a.name), el('td', a.provider), el('td', (a.regions || []).join(', '), 'wrap'),
        el('td', creds.stored ? 'stored (sealed)' : 'from the cloud adapter'),
        el('td', (a.templates || []).join(', '), 'wrap'), el('td', (a.groups || []).join(', '), 'wrap'), el('td', a.source),
      ];
      if (isAdmin()) {
        cells.push(actionsCell(a.source === 'api' ? actionButton('Edit', 'edit-account', a.name) : null));
      }
      return row(cells, { account: a.name });
    }));
  }

  function renderRole() {
    const admin = isAdmin();
    document.body.dataset.role = role;
    $('role').hidden = !admin;
    $('role').textContent = admin ? 'admin' : '';
    for (const th of document.querySelectorAll('th.admin')) {
      th.hidden = !admin;
    }
    if (!admin) {
      closeEditor();
    }
  }

  function renderTransitions(list) {
    fill('transitions', list.items.map((t) => row([
      when(t.at), el('td', t.instance), el('td', t.group), stateCell(t.from), stateCell(t.to), el('td', t.reason, 'msg'),
    ], { instance: t.instance })));
  }

  function renderStatus(status) {
    const badge = $('sync');
    badge.textContent = status.synced
      ? 'synced · revisions ' + status.revisions.groups + '/' + status.revisions.instances
      : 'loading state';
    badge.className = 'badge ' + (status.synced ? 'ok' : 'bad');
  }

  // renderOrphans shows what the orphan reconciler holds back and the
  // admin call that releases it.
  function renderOrphans(status) {
    const o = status.orphans;
    const waiting = (o && o.waiting) || [];
    const held = (o && o.held) || {};
    const heldCount = Object.values(held).reduce((a, b) => a + b, 0);
    const show = !!o && (o.holding || waiting.length > 0);
    $('orphans').hidden = !show;
    if (!show) {
      return;
    }
    const parts = [];
    if (o.holding) {
      parts.push('Start-up hold since ' + o.holdSince + ' until ' + o.holdUntil + '.');
    }
    parts.push(heldCount + ' held back (' + Object.entries(held).map(([k, v]) => k + ' ' + v).join(', ') + ').');
    if (o.releasedAt) {
      parts.push('Last released ' + o.releasedAt + '.');
    }
    $('orphans-summary').textContent = parts.join(' ');
    const path = o.release.replace(/^POST /, '');
    const base = new URL('../', location.href).href.replace(/\/$/, '');
    $('orphans-release').textContent = 'curl -X POST -H "Authorization: Bearer $ADMIN_TOKEN" ' + base + path + '\n(' + o.release + ')';
    $('orphans-waiting').replaceChildren(...waiting.map((id) => el('li', id, 'mono')));
  }

  function showLogin(message) {
    role = '';
    closeEditor();
    $('content').hidden = true;
    $('login').hidden = false;
    $('signout').hidden = true;
    $('pause').hidden = true;
    $('login-error').hidden = !message;
    $('login-error').textContent = message || '';
    $('token').focus();
    document.body.dataset.state = 'login';
  }

  function showError(message) {
    $('error').textContent = message;
    $('error').hidden = false;
  }

  // ---- writes (admin tokens only) ----

  // notice reports the outcome of a write until the next one.
  function notice(message, bad) {
    $('notice').textContent = message || '';
    $('notice').className = 'banner ' + (bad ? 'error' : 'ok');
    $('notice').hidden = !message;
  }

  function formError(form, message, field) {
    const p = form.querySelector('.form-error');
    for (const i of form.querySelectorAll('.invalid')) {
      i.classList.remove('invalid');
      i.removeAttribute('aria-invalid');
    }
    p.hidden = !message;
    p.textContent = message ? message + (field ? ' (field: ' + field + ')' : '') : '';
    // The input the error names: "regions[0]" is the regions input,
    // "instanceTemplate.zone" the zone input.
    const name = field ? field.replace(/\[\d+\]$/, '').split('.').pop() : '';
    const input = name && form.elements.namedItem(name);
    if (input && input.classList) {
      input.classList.add('invalid');
      input.setAttribute('aria-invalid', 'true');
    }
  }

  function closeEditor() {
    editing = null;
    opening++;
    for (const f of document.querySelectorAll('form.edit')) {
      f.hidden = true;
      f.reset();
      formError(f, '');
      f.querySelector('[data-action="reload-editor"]').hidden = true;
    }
    $('editor').hidden = true;
  }

  const EDITORS = {
    group: { form: 'group-form', path: (id) => 'nodegroups/' + enc(id), fill: fillGroup, save: saveGroup },
    template: { form: 'template-form', path: (id) => 'templates/' + enc(id), fill: fillTemplate, save: saveTemplate },
    account: { form: 'account-form', path: (id) => 'accounts/' + enc(id), fill: fillAccount, save: saveAccount },
  };

  // openEditor loads the entry afresh (its ETag is what the form's write
  // is conditional on) and shows its form. Only the last one asked for
  // opens, however the loads finish.
  let opening = 0;

  async function openEditor(kind, id) {
    const ed = EDITORS[kind];
    const ticket = ++opening;
    notice('');
    let r;
    try {
      r = await call('GET', ed.path(id));
      if (!r.etag) {
        throw new Error('the API gave no ETag, so a change could not be made conditional on it');
      }
    } catch (e) {
      if (ticket === opening) {
        notice('Could not load ' + kind + ' ' + id + ': ' + e.message, true);
      }
      return;
    }
    if (ticket !== opening) {
      return;
    }
    closeEditor();
    const form = $(ed.form);
    editing = { kind: kind, id: id, form: form, etag: r.etag, data: r.data };
    form.querySelector('[data-field="title"]').textContent = id;
    ed.fill(form, editing.data);
    form.hidden = false;
    $('editor').hidden = false;
    form.scrollIntoView({ block: 'nearest' });
  }

  function setValue(form, name, v) {
    form.elements.namedItem(name).value = v === undefined || v === null ? '' : String(v);
  }

  function fillGroup(form, g) {
    setValue(form, 'minSize', g.minSize);
    setValue(form, 'maxSize', g.maxSize);
    setValue(form, 'targetSize', g.targetSize);
    const config = g.source === 'config';
    form.elements.namedItem('minSize').disabled = config;
    form.elements.namedItem('maxSize').disabled = config;
    form.querySelector('[data-field="config-note"]').hidden = !config;
  }

  const TEMPLATE_TEXT = ['account', 'region', 'zone', 'instanceType', 'arch', 'os'];
  const TEMPLATE_NUM = ['hourlyPrice', 'sshPort'];

  function fillTemplate(form, t) {
    for (const k of TEMPLATE_TEXT.concat(TEMPLATE_NUM)) {
      setValue(form, k, t[k] || '');
    }
    setValue(form, 'parameters', '');
    form.elements.namedItem('parameters').placeholder = t.hasParameters ? 'stored (not shown): leave empty to keep' : 'none stored';
  }

  function fillAccount(form, a) {
    setValue(form, 'regions', (a.regions || []).join(', '));
    setValue(form, 'secretId', '');
    setValue(form, 'secretKey', '');
    const c = a.credentials || {};
    form.querySelector('[data-field="credentials"]').textContent = (a.provider || 'tencentcloud') + ' · credentials ' +
      (c.stored ? 'stored in the catalog (sealed)' : 'from the cloud adapter (none stored here)');
  }

  // intField reads a whole number input; a bad one is a form error
  // naming the field.
  function intField(form, name) {
    const s = form.elements.namedItem(name).value.trim();
    const n = Number(s);
    if (s === '' || !Number.isInteger(n) || n < 0) {
      throw new APIError(0, name + ' must be a whole number, 0 or more', name);
    }
    return n;
  }

  // saveGroup changes the bounds (PATCH) and then the target (POST
  // scale), each conditional on the ETag the form holds: the one it was
  // loaded with, then the one the PATCH answered with.
  async function saveGroup(form, ed) {
    const g = ed.data;
    const target = intField(form, 'targetSize');
    const done = [];
    if (g.source !== 'config') {
      const min = intField(form, 'minSize');
      const max = intField(form, 'maxSize');
      if (min !== g.minSize || max !== g.maxSize) {
        const r = await call('PATCH', 'nodegroups/' + enc(ed.id), {
          body: { minSize: min, maxSize: max }, type: 'application/merge-patch+json', ifMatch: ed.etag,
        });
        ed.etag = r.etag;
        ed.data = r.data;
        done.push('bounds ' + min + '..' + max);
      }
    }
    if (target !== ed.data.targetSize) {
      try {
        const r = await call('POST', 'nodegroups/' + enc(ed.id) + '/scale', { body: { targetSize: target }, ifMatch: ed.etag });
        ed.etag = r.etag;
        ed.data = r.data;
      } catch (e) {
        // The bounds may be saved already: say so with the error.
        e.saved = done.join(', ');
        throw e;
      }
      done.push('target ' + target);
    }
    return done.length ? 'Node group ' + ed.id + ': ' + done.join(', ') + '.' : 'Node group ' + ed.id + ': nothing changed.';
  }

  // saveTemplate sends a merge patch of the fields changed in the form:
  // what the form cannot show (parameters, hook environment, secret
  // parameters) stays as stored unless new parameters are given.
  async function saveTemplate(form, ed) {
    const t = ed.data;
    const patch = {};
    for (const k of TEMPLATE_TEXT) {
      const v = form.elements.namedItem(k).value.trim();
      if (v !== (t[k] || '')) {
        patch[k] = v === '' ? null : v;
      }
    }
    for (const k of TEMPLATE_NUM) {
      const s = form.elements.namedItem(k).value.trim();
      const v = s === '' ? 0 : Number(s);
      if (!Number.isFinite(v) || v < 0) {
        throw new APIError(0, k + ' must be a number, 0 or more', k);
      }
      if (v !== (t[k] || 0)) {
        patch[k] = s === '' ? null : v;
      }
    }
    const raw = form.elements.namedItem('parameters').value.trim();
    if (raw !== '') {
      let p;
      try {
        p = JSON.parse(raw);
      } catch (e) {
        throw new APIError(0, 'parameters must be a JSON object: ' + e.message, 'parameters');
      }
      if (!p || typeof p !== 'object' || Array.isArray(p)) {
        throw new APIError(0, 'parameters must be a JSON object', 'parameters');
      }
      patch.parameters = p;
    }
    if (Object.keys(patch).length === 0) {
      return 'Template ' + ed.id + ': nothing changed.';
    }
    const r = await call('PATCH', 'templates/' + enc(ed.id), { body: patch, type: 'application/merge-patch+json', ifMatch: ed.etag });
    ed.etag = r.etag;
    ed.data = r.data;
    return 'Template ' + ed.id + ' saved.';
  }

  // sameOriginSecure: credentials leave the page only to its own origin
  // (relative URL, CSP connect-src 'self'), and only over HTTPS unless
  // the gateway is on this machine.
  function sameOriginSecure() {
    return location.protocol === 'https:' || ['localhost', '127.0.0.1', '[::1]'].includes(location.hostname);
  }

  // saveAccount replaces the account (PUT, conditional on the ETag). The
  // stored credentials are never shown: empty fields keep them.
  async function saveAccount(form, ed) {
    const a = ed.data;
    const regions = form.elements.namedItem('regions').value.split(',').map((r) => r.trim()).filter(Boolean);
    const id = form.elements.namedItem('secretId').value.trim();
    const key = form.elements.namedItem('secretKey').value.trim();
    const body = { regions: regions };
    if (a.provider) {
      body.provider = a.provider;
    }
    if (id || key) {
      if (!id || !key) {
        throw new APIError(0, 'give both the secret id and the secret key to replace the credentials, or neither to keep them', id ? 'secretKey' : 'secretId');
      }
      if (!sameOriginSecure()) {
        throw new APIError(0, 'credentials are sent over HTTPS only: open this page with https://', 'secretKey');
      }
      body.credentials = { secretId: id, secretKey: key };
    }
    const r = await call('PUT', 'accounts/' + enc(ed.id), { body: body, ifMatch: ed.etag });
    ed.etag = r.etag;
    ed.data = r.data;
    return 'Account ' + ed.id + ' saved' + (body.credentials ? ' with new credentials.' : '.');
  }

  async function submitEditor(ev) {
    ev.preventDefault();
    const ed = editing;
    if (!ed || ev.target !== ed.form) {
      return;
    }
    const form = ed.form;
    formError(form, '');
    const buttons = form.querySelectorAll('button');
    for (const b of buttons) {
      b.disabled = true;
    }
    try {
      const msg = await EDITORS[ed.kind].save(form, ed);
      closeEditor();
      notice(msg);
      refresh();
    } catch (e) {
      const saved = e.saved ? 'Saved ' + e.saved + ', but the rest was not. ' : '';
      if (!(e instanceof APIError)) {
        formError(form, saved + 'Not saved: ' + e.message);
      } else if (e.status === 412) {
        formError(form, saved + CONFLICT + ' (' + e.message + ')');
        form.querySelector('[data-action="reload-editor"]').hidden = false;
        refresh(); // the tables show the other change now
      } else if (e.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin('The token was not accepted: ' + e.message);
      } else {
        formError(form, saved + 'Not saved: ' + e.message, e.field);
      }
    } finally {
      for (const b of buttons) {
        b.disabled = false;
      }
      // Secrets stay in the form no longer than one attempt.
      if (form.id === 'account-form') {
        setValue(form, 'secretId', '');
        setValue(form, 'secretKey', '');
      }
    }
  }

  // confirmDialog asks in a modal dialog; it resolves true on OK. The
  // buttons settle it directly (not the dialog's close event, which
  // arrives later and could meet the next question).
  let confirmResolve = null;

  function confirmDialog(text, ok) {
    settleConfirm(false);
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = ok;
    return new Promise((resolve) => {
      confirmResolve = resolve;
      $('confirm').showModal();
    });
  }

  function settleConfirm(answer) {
    const resolve = confirmResolve;
    confirmResolve = null;
    if ($('confirm').open) {
      $('confirm').close();
    }
    if (resolve) {
      resolve(answer);
    }
  }

  async function instanceAction(action, id) {
    notice('');
    const i = instancesByID.get(id) || { id: id };
    try {
      if (action === 'retry') {
        await call('POST', 'instances/' + enc(id) + '/retry');
        notice('Retry requested for instance ' + id + '.');
      } else {
        const cloud = i.cloudID ? 'cloud id ' + i.cloudID : 'no cloud VM recorded yet';
        const ok = await confirmDialog('Force-delete instance ' + id + ' (' + cloud + ', group ' + (i.group || '?') + ')? ' +
          'Its VM is terminated without the before-delete hook or draining the node.', 'Force delete ' + id);
        if (!ok) {
          return;
        }
        await call('DELETE', 'instances/' + enc(id));
        notice('Force delete of instance ' + id + ' accepted.');
      }
    } catch (e) {
      notice((action === 'retry' ? 'Retry of ' : 'Force delete of ') + id + ' failed: ' + e.message, true);
      return;
    }
    refresh();
  }

  function onAction(ev) {
    const b = ev.target.closest('button[data-action]');
    if (!b) {
      return;
    }
    const id = b.dataset.id || '';
    switch (b.dataset.action) {
      case 'edit-group':
        openEditor('group', id);
        break;
      case 'edit-template':
        openEditor('template', id);
        break;
      case 'edit-account':
        openEditor('account', id);
        break;
      case 'close-editor':
        closeEditor();
        break;
      case 'reload-editor':
        if (editing) {
          openEditor(editing.kind, editing.id);
        }
        break;
      case 'retry':
      case 'force-delete':
        instanceAction(b.dataset.action, id);
        break;
    }
  }

  function schedule() {
    clearTimeout(timer);
    if (!paused && token()) {
      timer = setTimeout(refresh, REFRESH_MS);
    }
  }

  async function refresh() {
    if (!token()) {
      showLogin('');
      return;
    }
    if (document.hidden) {
      schedule(); // nobody is looking: skip this round
      return;
    }
    $('login').hidden = true;
    $('signout').hidden = false;
    $('pause').hidden = false;
    try {
      // /status answers even while the gateway loads; the others then
      // fail with 503, shown as an error until the next round.
      const status = await api('status');
      role = status.role || '';
      renderRole();
      renderStatus(status);
      renderOrphans(status);
      const [groups, instances, transitions, templates, accounts] = await Promise.all([
        api('nodegroups'),
        api('instances?limit=' + INSTANCE_LIMIT + '&state=' + LIVE.join(',')),
        api('transitions?limit=' + TRANSITION_LIMIT),
        api('templates'),
        api('accounts'),
      ]);
      renderGroups(groups, status);
      renderInstances(instances);
      renderTransitions(transitions);
      renderTemplates(templates);
      renderAccounts(accounts);
      $('content').hidden = false;
      $('error').hidden = true;
      $('refreshed').textContent = 'updated ' + new Date().toLocaleTimeString() + ' · every ' + REFRESH_MS / 1000 + 's';
      document.body.dataset.state = 'loaded';
    } catch (e) {
      if (e instanceof APIError && e.status === 401) {
        sessionStorage.removeItem(TOKEN_KEY);
        showLogin('The token was not accepted: ' + e.message);
        return;
      }
      showError('Could not refresh: ' + e.message);
      document.body.dataset.state = 'error';
    } finally {
      schedule();
    }
  }

  function start() {
    takeTokenFromFragment();
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      $('token').value = '';
      if (t) {
        sessionStorage.setItem(TOKEN_KEY, t);
        refresh();
      }
    });
    $('signout').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      clearTimeout(timer);
      showLogin('');
    });
    $('pause').addEventListener('click', () => {
      paused = !paused;
      $('pause').textContent = paused ? 'Resume' : 'Pause';
      if (paused) {
        clearTimeout(timer);
      } else {
        refresh();
      }
    });
    document.addEventListener('click', onAction);
    for (const f of document.querySelectorAll('form.edit')) {
      f.addEventListener('submit', submitEditor);
    }
    $('confirm-ok').addEventListener('click', () => settleConfirm(true));
    $('confirm-cancel').addEventListener('click', () => settleConfirm(false));
    // Escape closes the dialog: that is a no.
    $('confirm').addEventListener('close', () => {
      if (!$('confirm').open) {
        settleConfirm(false);
      }
    });
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden && !paused) {
        refresh();
      }
    });
    refresh();
  }

  start();
})();
