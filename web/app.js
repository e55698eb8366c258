// The Sandboxer web console: plain JavaScript, no framework, no build step.
// Every value from the API reaches the page through textContent, never innerHTML.
'use strict';

(() => {
  const TOKEN_KEY = 'sandboxer.token';
  const REFRESH_MS = 2000;

  const $ = (id) => document.getElementById(id);

  const state = {
    token: null,
    user: null,
    sandboxes: new Map(), // id → sandbox object, from the last refresh
    rows: new Map(), // id → <tr>
    selected: null,
    timer: null,
    refreshing: false,
    term: null, // {xterm, fit, ws, onResize}
    procsLoading: false,
    procOutput: null, // the pid whose output is shown
  };

  // ---------------------------------------------------------------- API

  class ApiError extends Error {
    constructor(status, detail, code) {
      super(detail);
      this.status = status;
      this.code = code;
    }
  }

  async function api(method, path, body, { text = false, token = state.token } = {}) {
    const headers = { Authorization: `Bearer ${token}` };
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, `the daemon does not answer (${e.message})`, 'network');
    }
    if (!res.ok) {
      let detail = `HTTP ${res.status}`;
      let code = String(res.status);
      try {
        const j = await res.json();
        if (j && typeof j.detail === 'string') detail = j.detail;
        if (j && typeof j.code === 'string') code = j.code;
      } catch {
        // not JSON: keep the status line
      }
      throw new ApiError(res.status, detail, code);
    }
    if (text) return res.text();
    if (res.status === 204) return null;
    return res.json();
  }

  const sbxPath = (id, rest = '') => `/sandboxes/${encodeURIComponent(id)}${rest}`;

  // ---------------------------------------------------------------- messages

  function describe(e) {
    if (e instanceof ApiError) return e.code ? `${e.message} (${e.code})` : e.message;
    return String(e && e.message ? e.message : e);
  }

  function showError(e) {
    $('error-text').textContent = describe(e);
    $('error').hidden = false;
  }

  function clearError() {
    $('error').hidden = true;
    $('error-text').textContent = '';
  }

  function setActionStatus(text) {
    $('action-status').textContent = text;
  }

  // Run an action with its button disabled; errors go to the banner.
  async function busy(button, fn) {
    if (button) button.disabled = true;
    try {
      clearError();
      return await fn();
    } catch (e) {
      showError(e);
      return undefined;
    } finally {
      if (button) button.disabled = false;
    }
  }

  // ---------------------------------------------------------------- formatting

  const shortId = (id) => (id ? String(id).slice(0, 12) : '');

  function fmtTime(t) {
    if (typeof t !== 'number' || !t) return '';
    return new Date(t * 1000).toLocaleString();
  }

  function fmtSize(n) {
    if (typeof n !== 'number') return '';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) {
      n /= 1024;
      i++;
    }
    return i ? `${n.toFixed(1)} ${units[i]}` : `${n} B`;
  }

  function fmtMode(m) {
    if (typeof m === 'number') return `0${(m & 0o7777).toString(8)}`;
    return m == null ? '' : String(m);
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  // ---------------------------------------------------------------- sign in / out

  function storedToken() {
    return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);
  }

  async function signIn(token, remember) {
    const me = await api('GET', '/auth/me', undefined, { token });
    state.token = token;
    state.user = me;
    $('token').value = ''; // the token is kept in one place, not in the form
    sessionStorage.setItem(TOKEN_KEY, token);
    if (remember) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
    $('user-name').textContent = me.admin ? `${me.name} (admin)` : me.name;
    $('whoami').hidden = false;
    $('login').hidden = true;
    $('app').hidden = false;
    await refresh();
    state.timer = setInterval(refresh, REFRESH_MS);
  }

  function signOut() {
    closeTerminal();
    clearInterval(state.timer);
    state.timer = null;
    sessionStorage.removeItem(TOKEN_KEY);
    localStorage.removeItem(TOKEN_KEY);
    state.token = null;
    state.user = null;
    state.sandboxes.clear();
    state.rows.clear();
    $('sandbox-rows').replaceChildren();
    select(null);
    $('whoami').hidden = true;
    $('app').hidden = true;
    $('login').hidden = false;
    $('token').value = '';
    clearError();
  }

  async function onLogin(ev) {
    ev.preventDefault();
    const token = $('token').value.trim();
    const err = $('login-error');
    err.hidden = true;
    $('sign-in').disabled = true;
    try {
      await signIn(token, $('remember').checked);
    } catch (e) {
      state.token = null;
      err.textContent = `Cannot sign in: ${describe(e)}`;
      err.hidden = false;
    } finally {
      $('sign-in').disabled = false;
    }
  }

  // ---------------------------------------------------------------- the list

  const COLUMNS = [
    (s) => shortId(s.id),
    (s) => s.name,
    (s) => s.label,
    (s) => s.image,
    (s) => s.status,
    (s) => fmtTime(s.created_at),
  ];

  function renderRow(tr, s) {
    COLUMNS.forEach((col, i) => {
      const v = col(s) ?? '';
      if (tr.cells[i].textContent !== String(v)) tr.cells[i].textContent = String(v);
    });
    tr.cells[4].className = `status status-${s.status}`;
    tr.classList.toggle('selected', s.id === state.selected);
  }

  function newRow(s) {
    const tr = document.createElement('tr');
    tr.dataset.id = s.id;
    for (let i = 0; i < COLUMNS.length; i++) tr.appendChild(document.createElement('td'));
    tr.cells[0].className = 'mono';
    tr.tabIndex = 0;
    tr.addEventListener('click', () => select(s.id));
    tr.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') select(s.id);
    });
    return tr;
  }

  function renderList(list) {
    const showDeleted = $('show-terminated').checked;
    const visible = list.filter((s) => showDeleted || s.status !== 'terminated');
    visible.sort((a, b) => (b.created_at || 0) - (a.created_at || 0));
    state.sandboxes = new Map(list.map((s) => [s.id, s]));
    const body = $('sandbox-rows');
    const keep = new Set(visible.map((s) => s.id));
    for (const [id, tr] of state.rows) {
      if (!keep.has(id)) {
        tr.remove();
        state.rows.delete(id);
      }
    }
    visible.forEach((s, i) => {
      let tr = state.rows.get(s.id);
      if (!tr) {
        tr = newRow(s);
        state.rows.set(s.id, tr);
      }
      renderRow(tr, s);
      if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
    });
    $('sandboxes-empty').hidden = visible.length > 0;
    if (state.selected) renderDetail();
  }

  async function refresh() {
    if (state.refreshing || !state.token) return;
    state.refreshing = true;
    try {
      const j = await api('GET', '/sandboxes');
      renderList(Array.isArray(j.sandboxes) ? j.sandboxes : []);
      loadProcs(); // the selected sandbox's, if it runs
    } catch (e) {
      showError(e);
    } finally {
      state.refreshing = false;
    }
  }

  // ---------------------------------------------------------------- create

  async function onCreate(ev) {
    ev.preventDefault();
    const body = {};
    const image = $('create-image').value.trim();
    const label = $('create-label').value.trim();
    const memory = $('create-memory').value.trim();
    const cpus = $('create-cpus').value.trim();
    const snapshot = $('create-snapshot').value.trim();
    if (image) body.image = image;
    if (label) body.label = label;
    if (memory) body.memory = /^\d+$/.test(memory) ? Number(memory) : memory;
    if (cpus) body.cpus = Number(cpus);
    if (snapshot) body.snapshot = snapshot;
    await busy($('create-submit'), async () => {
      $('create-submit').textContent = 'Creating…';
      try {
        const s = await api('POST', '/sandboxes', body);
        $('create-label').value = '';
        await refresh();
        select(s.id);
      } finally {
        $('create-submit').textContent = 'Create';
      }
    });
  }

  // ---------------------------------------------------------------- the selected sandbox

  function select(id) {
    if (id !== state.selected) {
      closeTerminal();
      $('exec-result').hidden = true;
      $('files').hidden = true;
      $('file-rows').replaceChildren();
      $('logs').textContent = '';
      $('tree').textContent = '';
      $('proc-rows').replaceChildren();
      $('procs').hidden = true;
      $('procs-empty').hidden = true;
      hideProcOutput();
      $('term-status').textContent = '';
      setActionStatus('');
    }
    state.selected = id;
    for (const [rid, tr] of state.rows) tr.classList.toggle('selected', rid === id);
    $('detail').hidden = !id;
    $('no-selection').hidden = !!id;
    if (id) {
      renderDetail();
      loadTree();
      loadProcs();
    }
  }

  function renderDetail() {
    const s = state.sandboxes.get(state.selected);
    if (!s) return;
    $('detail-title').textContent = s.label ? `${s.label} · ${s.name}` : s.name || shortId(s.id);
    $('detail-status').textContent = s.status;
    $('detail-status').className = `status status-${s.status}`;
    const r = s.resources || {};
    const fields = [
      ['id', s.id],
      ['name', s.name],
      ['label', s.label],
      ['image', s.image],
      ['status', s.status],
      ['exit code', s.exit_code],
      ['hostname', s.hostname],
      ['IP address', s.ip_address],
      ['parent', s.parent_id],
      ['children', (s.child_ids || []).map(shortId).join(', ')],
      ['created', fmtTime(s.created_at)],
      ['last active', fmtTime(s.last_active_at)],
      ['resources', [r.cpus != null ? `${r.cpus} CPU` : '', r.memory != null ? `memory ${fmtSize(r.memory)}` : '', r.pids != null ? `${r.pids} pids` : ''].filter(Boolean).join(', ')],
      ['public', s.is_public ? 'yes' : 'no'],
    ];
    const dl = $('detail-fields');
    const parts = [];
    for (const [k, v] of fields) {
      if (v === null || v === undefined || v === '') continue;
      parts.push(el('dt', k), el('dd', v, k === 'id' || k === 'parent' ? 'mono' : ''));
    }
    dl.replaceChildren(...parts);
    const st = s.status;
    const gone = st === 'terminated';
    $('act-fork').disabled = st !== 'running';
    $('act-pause').disabled = st !== 'running';
    $('act-unpause').disabled = st !== 'paused';
    $('act-hibernate').disabled = st !== 'running';
    $('act-wake').disabled = st !== 'hibernated';
    $('act-delete').disabled = gone;
    $('term-open').disabled = gone || !!state.term;
    $('exec-run').disabled = gone;
    $('proc-start').disabled = st !== 'running';
    $('procs-refresh').disabled = gone;
  }

  async function loadTree() {
    const id = state.selected;
    if (!id) return;
    try {
      const j = await api('GET', sbxPath(id, '/tree'));
      if (state.selected === id) $('tree').textContent = j.tree || '';
    } catch (e) {
      if (state.selected === id) $('tree').textContent = `(${describe(e)})`;
    }
  }

  // One lifecycle action on the selected sandbox, then a refresh.
  function action(button, label, fn) {
    return busy(button, async () => {
      const id = state.selected;
      setActionStatus(`${label}…`);
      try {
        const msg = await fn(id);
        setActionStatus(msg || `${label}: done`);
      } catch (e) {
        setActionStatus('');
        throw e;
      }
      await refresh();
      loadTree();
    });
  }

  function onFork() {
    return action($('act-fork'), 'Forking', async (id) => {
      const label = $('fork-label').value.trim() || `${state.sandboxes.get(id)?.label || 'fork'}-child`;
      const child = await api('POST', sbxPath(id, '/fork'), { label });
      $('fork-label').value = '';
      const mem = child.memory_preserved ? 'memory preserved' : 'memory not preserved';
      return `Forked: ${shortId(child.id)} (${mem})`;
    });
  }

  const simple = (button, label, method, rest) =>
    action(button, label, async (id) => {
      const j = await api(method, sbxPath(id, rest));
      return j && j.status ? `${label}: ${j.status}` : undefined;
    });

  function onDelete() {
    const s = state.sandboxes.get(state.selected);
    const what = s ? s.label || s.name || shortId(s.id) : 'this sandbox';
    if (!window.confirm(`Delete sandbox ${what}? Its processes and files are gone for good.`)) return;
    const id = state.selected;
    action($('act-delete'), 'Deleting', async () => {
      await api('DELETE', sbxPath(id));
      return 'Deleted';
    }).then(() => {
      if (state.selected === id && state.sandboxes.get(id)?.status === 'terminated' &&
          !$('show-terminated').checked)
        select(null);
    });
  }

  // ---------------------------------------------------------------- exec, files, logs

  async function onExec(ev) {
    ev.preventDefault();
    const id = state.selected;
    const code = $('exec-code').value;
    if (!id || !code.trim()) return;
    await busy($('exec-run'), async () => {
      $('exec-run').textContent = 'Running…';
      try {
        const j = await api('POST', sbxPath(id, '/execute'), { code });
        if (state.selected !== id) return;
        $('exec-exit').textContent = String(j.exit_code);
        $('exec-exit').className = j.exit_code === 0 ? 'ok' : 'bad';
        $('exec-stdout').textContent = j.stdout || '';
        $('exec-stderr').textContent = j.stderr || '';
        $('exec-result').hidden = false;
      } finally {
        $('exec-run').textContent = 'Run';
      }
    });
  }

  function filesUrl(id, path) {
    const segs = path.split('/').filter(Boolean).map(encodeURIComponent);
    return sbxPath(id, `/files/${segs.join('/')}`);
  }

  async function listFiles(path) {
    const id = state.selected;
    if (!id) return;
    await busy($('files-list'), async () => {
      const j = await api('GET', filesUrl(id, path));
      if (state.selected !== id) return;
      if (!j || !Array.isArray(j.entries)) throw new Error(`${path} is a file, not a directory`);
      const norm = `/${path.split('/').filter(Boolean).join('/')}`;
      $('files-path').value = norm;
      const rows = [];
      if (norm !== '/') {
        const up = norm.slice(0, norm.lastIndexOf('/')) || '/';
        rows.push(fileRow('..', true, null, null, null, up));
      }
      const entries = [...j.entries].sort((a, b) =>
        a.is_dir === b.is_dir ? String(a.name).localeCompare(String(b.name)) : a.is_dir ? -1 : 1);
      for (const e of entries) {
        const full = norm === '/' ? `/${e.name}` : `${norm}/${e.name}`;
        rows.push(fileRow(e.is_dir ? `${e.name}/` : e.name, e.is_dir, e.size, e.mode, e.mtime, full));
      }
      $('file-rows').replaceChildren(...rows);
      $('files').hidden = false;
    });
  }

  function fileRow(name, isDir, size, mode, mtime, full) {
    const tr = document.createElement('tr');
    const nameCell = el('td', null, 'mono');
    if (isDir) {
      const a = el('button', name, 'link');
      a.type = 'button';
      a.addEventListener('click', () => listFiles(full));
      nameCell.appendChild(a);
    } else {
      nameCell.textContent = name;
    }
    tr.append(nameCell, el('td', isDir ? '' : fmtSize(size)), el('td', fmtMode(mode), 'mono'),
      el('td', fmtTime(mtime)));
    return tr;
  }

  async function loadLogs() {
    const id = state.selected;
    if (!id) return;
    await busy($('logs-load'), async () => {
      const text = await api('GET', sbxPath(id, '/logs'), undefined, { text: true });
      if (state.selected === id) $('logs').textContent = text || '(no output)';
    });
  }


  // ---------------------------------------------------------------- background processes

  function hideProcOutput() {
    state.procOutput = null;
    $('proc-output').hidden = true;
    $('proc-output-title').hidden = true;
    $('proc-output').textContent = '';
  }

  // The list of the selected sandbox's processes. Only a running sandbox is asked on its own
  // (the list would wake a hibernated one); the Refresh button asks anyway.
  async function loadProcs({ wake = false } = {}) {
    const id = state.selected;
    const s = state.sandboxes.get(id);
    if (!id || !s || state.procsLoading || (s.status !== 'running' && !wake)) return;
    state.procsLoading = true;
    try {
      const j = await api('GET', sbxPath(id, '/processes'));
      if (state.selected === id) renderProcs(j.processes || []);
    } catch (e) {
      if (wake) showError(e);
    } finally {
      state.procsLoading = false;
    }
  }

  function renderProcs(list) {
    $('procs').hidden = list.length === 0;
    $('procs-empty').hidden = list.length !== 0;
    $('proc-rows').replaceChildren(...list.map(procRow));
    if (state.procOutput !== null) {
      const p = list.find((x) => x.pid === state.procOutput);
      if (p) showProcOutput(p.pid);
      else hideProcOutput();
    }
  }

  function procRow(p) {
    const tr = document.createElement('tr');
    tr.dataset.pid = String(p.pid);
    const code = p.exit_code === null || p.exit_code === undefined
      ? '' : (p.signal ? `${p.exit_code} (signal ${p.signal})` : String(p.exit_code));
    const cmd = el('td', p.command + (p.tag ? `  [${p.tag}]` : ''), 'mono');
    const buttons = el('td');
    const out = el('button', 'Output', 'link');
    out.type = 'button';
    out.addEventListener('click', () => showProcOutput(p.pid));
    buttons.appendChild(out);
    if (p.status === 'running') {
      const kill = el('button', 'Kill', 'danger small-button');
      kill.type = 'button';
      kill.addEventListener('click', () => killProc(kill, p.pid));
      buttons.appendChild(kill);
    }
    tr.append(el('td', p.pid, 'mono'), cmd, el('td', p.status, `status status-${p.status}`),
      el('td', code), buttons);
    return tr;
  }

  async function showProcOutput(pid) {
    const id = state.selected;
    try {
      const j = await api('GET', sbxPath(id, `/processes/${pid}/output?cursor=0&limit=65536`));
      if (state.selected !== id) return;
      state.procOutput = pid;
      const text = (j.chunks || []).map((c) => c.data).join('');
      const note = j.dropped ? `(${j.dropped} older bytes no longer kept)\n` : '';
      $('proc-output-pid').textContent = String(pid);
      $('proc-output').textContent = note + (text || '(no output yet)');
      $('proc-output').hidden = false;
      $('proc-output-title').hidden = false;
    } catch (e) {
      showError(e);
    }
  }

  function killProc(button, pid) {
    const id = state.selected;
    return busy(button, async () => {
      await api('POST', sbxPath(id, `/processes/${pid}/signal`), { signal: 'KILL' });
      await loadProcs();
    });
  }

  async function onProcStart(ev) {
    ev.preventDefault();
    const id = state.selected;
    const code = $('proc-code').value;
    if (!id || !code.trim()) return;
    await busy($('proc-start'), async () => {
      const p = await api('POST', sbxPath(id, '/processes'), { code });
      $('proc-code').value = '';
      setActionStatus(`Started process ${p.pid}`);
      await loadProcs();
    });
  }

  // ---------------------------------------------------------------- terminal

  function openTerminal() {
    const id = state.selected;
    if (!id || state.term) return;
    if (!window.Terminal || !window.FitAddon) {
      showError('xterm.js did not load');
      return;
    }
    clearError();
    const box = $('terminal');
    box.hidden = false;
    box.replaceChildren();
    const xterm = new window.Terminal({
      cursorBlink: true,
      fontSize: 14,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", "Liberation Mono", Menlo, Consolas, monospace',
      scrollback: 5000,
    });
    const fit = new window.FitAddon.FitAddon();
    xterm.loadAddon(fit);
    xterm.open(box);
    try {
      fit.fit();
    } catch {
      // not measurable yet: keep xterm's 80x24
    }
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const url = `${proto}//${location.host}${sbxPath(id, '/exec/pty')}?cols=${xterm.cols}&rows=${xterm.rows}`;
    // Browsers cannot set Authorization on a WebSocket: the token rides as a subprotocol,
    // and the daemon answers with the plain "sandboxer" one.
    const ws = new WebSocket(url, ['sandboxer', `bearer.${state.token}`]);
    ws.binaryType = 'arraybuffer';
    const enc = new TextEncoder();
    const t = { xterm, fit, ws, id, opened: false };
    state.term = t;
    $('term-status').textContent = 'connecting…';
    $('term-open').disabled = true;
    $('term-close').disabled = false;

    ws.addEventListener('open', () => {
      t.opened = true;
      $('term-status').textContent = 'connected';
      xterm.focus();
    });
    ws.addEventListener('message', (ev) => {
      if (ev.data instanceof ArrayBuffer) xterm.write(new Uint8Array(ev.data));
    });
    ws.addEventListener('close', (ev) => onTermClosed(t, ev));
    t.disposeData = xterm.onData((d) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
    });
    t.disposeResize = xterm.onResize(({ cols, rows }) => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ resize: { cols, rows } }));
    });
    t.onWindowResize = () => {
      try {
        fit.fit();
      } catch {
        // hidden
      }
    };
    window.addEventListener('resize', t.onWindowResize);
  }

  function onTermClosed(t, ev) {
    let msg;
    if (ev.code === 1000) {
      let exit = null;
      try {
        exit = JSON.parse(ev.reason);
      } catch {
        // no reason
      }
      if (exit && typeof exit.exit_code === 'number') {
        msg = exit.signal != null
          ? `exited with code ${exit.exit_code} (signal ${exit.signal})`
          : `exited with code ${exit.exit_code}`;
      } else {
        msg = 'closed';
      }
    } else if (!t.opened) {
      msg = 'could not connect (check the token and that the sandbox runs)';
    } else {
      msg = `closed (${ev.code}${ev.reason ? `: ${ev.reason}` : ''})`;
    }
    if (state.term === t) {
      $('term-status').textContent = `Session ${msg}`;
      t.xterm.write(`\r\n\x1b[2m[session ${msg}]\x1b[0m\r\n`);
      detachTerminal(t);
      $('term-close').disabled = true;
      const s = state.sandboxes.get(state.selected);
      $('term-open').disabled = !s || s.status === 'terminated';
    }
  }

  function detachTerminal(t) {
    window.removeEventListener('resize', t.onWindowResize);
    t.disposeData?.dispose();
    t.disposeResize?.dispose();
    if (state.term === t) state.term = null;
  }

  function closeTerminal() {
    const t = state.term;
    if (!t) return;
    detachTerminal(t);
    try {
      t.ws.close(1000);
    } catch {
      // already closed
    }
    t.xterm.dispose();
    $('terminal').replaceChildren();
    $('terminal').hidden = true;
    $('term-status').textContent = '';
    $('term-close').disabled = true;
    $('term-open').disabled = !state.selected;
  }

  // ---------------------------------------------------------------- wiring

  function wire() {
    $('login-form').addEventListener('submit', onLogin);
    $('sign-out').addEventListener('click', signOut);
    $('error-close').addEventListener('click', clearError);
    $('create-form').addEventListener('submit', onCreate);
    $('show-terminated').addEventListener('change', () => refresh());
    $('act-fork').addEventListener('click', onFork);
    $('act-pause').addEventListener('click', () => simple($('act-pause'), 'Pausing', 'PUT', '/pause'));
    $('act-unpause').addEventListener('click', () => simple($('act-unpause'), 'Unpausing', 'DELETE', '/pause'));
    $('act-hibernate').addEventListener('click', () => simple($('act-hibernate'), 'Hibernating', 'POST', '/hibernate'));
    $('act-wake').addEventListener('click', () => simple($('act-wake'), 'Waking', 'POST', '/wake'));
    $('act-delete').addEventListener('click', onDelete);
    $('exec-form').addEventListener('submit', onExec);
    $('files-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      listFiles($('files-path').value || '/');
    });
    $('logs-load').addEventListener('click', loadLogs);
    $('tree-refresh').addEventListener('click', loadTree);
    $('proc-form').addEventListener('submit', onProcStart);
    $('procs-refresh').addEventListener('click', () => loadProcs({ wake: true }));
    $('term-open').addEventListener('click', openTerminal);
    $('term-close').addEventListener('click', closeTerminal);
  }

  async function start() {
    wire();
    const token = storedToken();
    if (token) {
      try {
        await signIn(token, localStorage.getItem(TOKEN_KEY) === token);
        return;
      } catch (e) {
        sessionStorage.removeItem(TOKEN_KEY);
        localStorage.removeItem(TOKEN_KEY);
        $('login-error').textContent = `Signed out: ${describe(e)}`;
        $('login-error').hidden = false;
      }
    }
    $('login').hidden = false;
    $('token').focus();
  }

  start();
})();
