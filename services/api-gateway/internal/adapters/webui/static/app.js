// nodesmith status page: reads the admin API with a bearer token kept in
// this tab's sessionStorage and redraws every few seconds. Data only ever
// reaches the page through textContent (never as HTML), and the page's
// Content-Security-Policy allows no inline script or style.
'use strict';

(function () {
  const TOKEN_KEY = 'nodesmith.token';
  const REFRESH_MS = 5000;
  const LIVE = ['PENDING', 'CREATING', 'CREATED', 'JOINED', 'RUNNING', 'PENDING_DELETION', 'DELETING'];
  const STATES = LIVE.concat(['DELETED']);
  const INSTANCE_LIMIT = 1000;
  const TRANSITION_LIMIT = 50;

  let timer = null;
  let paused = false;

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
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  // The API lives next to /ui/, also behind a path prefix.
  async function api(path) {
    const resp = await fetch(new URL('../api/v1/' + path, location.href), {
      headers: { Authorization: 'Bearer ' + token(), Accept: 'application/json' },
      cache: 'no-store',
      credentials: 'omit',
      redirect: 'error',
    });
    if (!resp.ok) {
      let msg = resp.status + ' ' + resp.statusText;
      try {
        const body = await resp.json();
        if (body && body.message) {
          msg = body.message;
        }
      } catch (e) {
        // not JSON: keep the status line
      }
      throw new APIError(resp.status, msg);
    }
    return resp.json();
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

  function renderGroups(groups, status) {
    const failed = {};
    for (const g of status.groups || []) {
      failed[g.id] = g.creationFailed;
    }
    fill('groups', groups.items.map((g) => {
      const t = g.instanceTemplate || {};
      const tpl = [t.name, t.instanceType, t.zone || t.region].filter(Boolean).join(' · ');
      const counts = g.instances || {};
      return row([
        el('td', g.id), num(g.minSize), num(g.maxSize), num(g.targetSize), el('td', tpl, 'wrap'),
        ...STATES.map((s) => num(counts[s])),
        num(failed[g.id]),
      ], { group: g.id });
    }));
  }

  function renderInstances(list) {
    const items = list.items;
    fill('instances', items.map((i) => row([
      el('td', i.id), el('td', i.group), stateCell(i.state), when(i.createdAt), when(i.stateSince),
      el('td', i.nodeName || i.privateIP || ''), el('td', i.providerID),
      el('td', i.lastError ? i.lastError.code : ''),
    ], { instance: i.id })));
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
      renderStatus(status);
      renderOrphans(status);
      const [groups, instances, transitions] = await Promise.all([
        api('nodegroups'),
        api('instances?limit=' + INSTANCE_LIMIT + '&state=' + LIVE.join(',')),
        api('transitions?limit=' + TRANSITION_LIMIT),
      ]);
      renderGroups(groups, status);
      renderInstances(instances);
      renderTransitions(transitions);
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
    document.addEventListener('visibilitychange', () => {
      if (!document.hidden && !paused) {
        refresh();
      }
    });
    refresh();
  }

  start();
})();
