// cradle's status page. Served by `cradle serve` itself (no CDN, no network).
//
// Rules this file keeps (tests check them):
// - every string from the server goes into the document as text
//   (textContent), never as HTML: a VM named `<script>` is shown, not run;
// - updates arrive by server-sent events (/status/events); the page never
//   polls. It fetches the run list when the stream (re)connects (so nothing
//   between the list and the stream is missed) and on a filter change, and a
//   run's timeline when it is opened or changes; events that arrive while a
//   list is on its way are applied after it, and an older list answer than
//   the last one asked for is dropped;
// - `window.cradleStatus` records when the list was first drawn and when
//   each update was drawn, for the tests and the benchmarks.
'use strict';

(() => {
  const state = {
    cards: new Map(), // id -> card
    order: [], // ids as listed
    open: new Set(), // ids opened by the reader
    closed: new Set(), // running ids the reader closed
    timelines: new Map(), // id -> {card, timeline}
    fetching: new Map(), // id -> true while a timeline fetch runs, 'again' if it changed meanwhile
    total: 0,
    matched: 0,
    limit: 200, // runs a list answer holds (the server's default)
    listSeq: 0, // the newest list request; older answers are dropped
    loading: false, // a list request is in flight: events wait in `pending`
    pending: [],
    listedOnce: false,
  };
  const probe = { firstRender: null, updates: [], listLoads: 0 };
  window.cradleStatus = probe;

  const $ = (id) => document.getElementById(id);
  const MAX_ROWS = 400;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function duration(ms) {
    if (ms === null || ms === undefined) return '';
    if (ms < 1000) return `${ms} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 1 : 0)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
    return `${Math.floor(m / 60)} h ${m % 60} min`;
  }

  function when(ts) {
    if (!ts) return '';
    const d = new Date(ts);
    return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleString();
  }

  function resultWord(card) {
    return card.problem ? 'unreadable' : card.result || 'unknown';
  }

  function filter() {
    return { vm: $('f-vm').value.trim(), result: $('f-result').value, env: $('f-env').value, kind: $('f-kind').value };
  }

  function keeps(card) {
    const f = filter();
    if (f.vm && !(card.vms || []).some((v) => v.toLowerCase().includes(f.vm.toLowerCase()))) return false;
    if (f.result && resultWord(card) !== f.result) return false;
    if (f.env && card.environment !== f.env) return false;
    // The server's rule (board::Filter): the kind itself, or any function of a workflow.
    if (f.kind && runKind(card) !== f.kind && card.workflow !== f.kind) return false;
    return true;
  }

  function query() {
    const f = filter();
    const q = new URLSearchParams();
    if (f.vm) q.set('vm', f.vm);
    if (f.result) q.set('result', f.result);
    if (f.env) q.set('env', f.env);
    if (f.kind) q.set('kind', f.kind);
    return q.toString();
  }

  async function getJson(url) {
    const r = await fetch(url, { credentials: 'same-origin', cache: 'no-store' });
    if (r.status === 401) {
      // The session ended: the page itself asks for the token again.
      window.location.reload();
      throw new Error('signed out');
    }
    if (!r.ok) throw new Error(`${url}: ${r.status}`);
    return r.json();
  }

  async function loadList() {
    const seq = ++state.listSeq;
    state.loading = true;
    let data;
    try {
      data = await getJson(`/status/api/runs?${query()}`);
    } finally {
      if (seq === state.listSeq) state.loading = false;
    }
    if (seq !== state.listSeq) return; // a newer list was asked for
    probe.listLoads += 1;
    state.listedOnce = true;
    state.cards.clear();
    state.order = [];
    for (const card of data.runs) {
      state.cards.set(card.id, card);
      state.order.push(card.id);
    }
    state.total = data.total;
    state.matched = data.matched;
    // Forget what belongs to runs no longer listed.
    for (const set of [state.open, state.closed]) {
      for (const id of set) if (!state.cards.has(id)) set.delete(id);
    }
    for (const id of state.timelines.keys()) if (!state.cards.has(id)) state.timelines.delete(id);
    fillSelect('f-env', data.environments);
    fillSelect('f-kind', data.kinds || []);
    drawList();
    if (probe.firstRender === null) {
      probe.firstRender = performance.now();
      performance.mark('cradle-first-render');
    }
    const waiting = state.pending.splice(0);
    for (const [kind, value] of waiting) apply(kind, value);
    for (const id of state.order) {
      const card = state.cards.get(id);
      // A finished run's timeline, once read, does not change.
      if (isOpen(card) && (card.result === 'running' || !state.timelines.has(id))) loadTimeline(id);
    }
  }

  // The environments (or kinds) seen, as options of select `id`.
  function fillSelect(id, values) {
    const sel = $(id);
    const chosen = sel.value;
    const known = new Set(Array.from(sel.options).map((o) => o.value));
    for (const value of values) {
      if (!known.has(value)) sel.append(new Option(value, value));
    }
    sel.value = chosen;
  }

  // A run seen running is opened (unless the reader closed it) and stays
  // open when it ends, so its outcome is in view.
  function isOpen(card) {
    if (!card) return false;
    if (card.result === 'running' && !state.closed.has(card.id)) state.open.add(card.id);
    return state.open.has(card.id);
  }

  function drawList() {
    const main = $('runs');
    const sections = state.order.map((id) => drawCard(state.cards.get(id)));
    main.replaceChildren(...sections);
    if (state.order.length === 0) {
      main.append(el('p', 'note', state.total === 0 ? 'No runs in the journal yet.' : 'No run matches the filters.'));
    }
    drawCount();
  }

  function drawCount() {
    const shown = state.order.length;
    const more = state.matched > shown ? ` (the ${shown} newest shown; narrow the filters for older ones)` : '';
    $('count').textContent = `${state.matched} of ${state.total} runs${more}`;
  }

  function drawCard(card) {
    const word = resultWord(card);
    const section = el('section', `run ${word}`);
    section.dataset.run = card.id;
    section.dataset.result = word;
    section.dataset.kind = runKind(card);

    const head = el('button', 'head');
    head.type = 'button';
    head.setAttribute('aria-expanded', String(isOpen(card)));
    head.append(el('span', `badge ${word}`, word));
    head.append(el('span', 'vms', (card.vms || []).join(', ') || '(no VM)'));
    head.append(el('span', 'meta', [runKind(card), card.environment, card.backend].filter(Boolean).join(' · ')));
    head.append(el('span', 'when', when(card.started)));
    head.append(el('span', 'dur', duration(card.duration_ms)));
    head.addEventListener('click', () => toggle(card.id));
    section.append(head);

    if (card.stages) section.append(drawStages(card.stages));
    for (const cur of card.running || []) {
      section.append(el('p', 'now', `now: ${[cur.vm, ...cur.path].filter(Boolean).join(' › ')}`));
    }
    if (card.problem) {
      section.append(drawError(`This journal cannot be read: ${card.problem}`, card.id));
    } else if (card.failing) {
      const where = [card.failing.vm, ...card.failing.path].filter(Boolean).join(' › ');
      section.append(drawError(`failed at ${where}: ${card.failing.error}`, card.id));
    } else if (card.error) {
      section.append(drawError(card.error, card.id));
    }
    if (isOpen(card)) section.append(drawDetails(card));
    return section;
  }

  // What the run did: `maintain:apply_vm` (a maintenance change), `provision:check`;
  // the workflow alone in journals written before the function was recorded.
  function runKind(card) {
    if (!card.workflow) return '';
    return card.function ? `${card.workflow}:${card.function}` : card.workflow;
  }

  function drawStages(stages) {
    const ol = el('ol', 'pipeline');
    ol.setAttribute('aria-label', 'NetBox pipeline');
    for (const s of stages) {
      const li = el('li', `stage ${s.state}`, s.name);
      li.dataset.stage = s.name;
      li.title = s.state;
      ol.append(li);
    }
    return ol;
  }

  function drawError(text, id) {
    const box = el('div', 'error');
    box.append(el('p', 'message', text));
    const hint = el('p', 'hint', 'Inspect: ');
    hint.append(el('code', null, `cradle runs show ${id} --timeline`));
    box.append(hint);
    return box;
  }

  function drawDetails(card) {
    const box = el('div', 'details');
    const facts = el('dl', 'facts');
    const fact = (k, v) => {
      if (!v) return;
      facts.append(el('dt', null, k), el('dd', null, v));
    };
    fact('run', card.id);
    fact('workflow', card.workflow && `${card.workflow}${card.workflow_hash ? ` (${card.workflow_hash.slice(0, 12)})` : ''}`);
    fact('function', card.function);
    fact('plugins', (card.plugins || []).map((p) => `${p.name} ${p.version}`).join(', '));
    fact('environment', card.environment);
    fact('backend', card.backend);
    fact('control node', card.node);
    fact('started', when(card.started));
    fact('ended', when(card.ended));
    box.append(facts);
    const got = state.timelines.get(card.id);
    if (got && got.timeline) {
      box.append(drawTimeline(got.timeline));
    } else if (!card.problem) {
      box.append(el('p', 'note', 'loading the timeline…'));
    }
    return box;
  }

  function drawTimeline(tl) {
    const box = el('div', 'timeline');
    const total = Math.max(tl.run.duration_ms, 1);
    let rows = 0;
    for (const lane of tl.lanes) {
      const laneBox = el('div', 'lane');
      laneBox.append(el('h3', null, lane.vm === null ? '(steps without a VM)' : lane.vm));
      // Every step is counted; only the first MAX_ROWS are drawn.
      const walk = (steps, depth) => {
        for (const step of steps) {
          rows += 1;
          if (rows <= MAX_ROWS) laneBox.append(drawStep(step, depth, total));
          walk(step.steps || [], depth + 1);
        }
      };
      walk(lane.steps, 0);
      box.append(laneBox);
    }
    if (rows > MAX_ROWS) {
      box.append(el('p', 'note', `${rows - MAX_ROWS} more steps: cradle runs show ${tl.run.id} --timeline has them all`));
    }
    if (tl.torn_line) {
      box.append(el('p', 'note', `line ${tl.torn_line.line} of the journal was torn by a crash and is not shown`));
    }
    return box;
  }

  function drawStep(step, depth, total) {
    const kind = step.failing ? 'failing' : step.outcome;
    const row = el('div', `step ${kind}`);
    row.dataset.step = step.name;
    row.dataset.outcome = step.outcome;
    const name = el('span', 'name', step.name);
    name.style.paddingLeft = `${depth * 1.1}em`;
    const track = el('span', 'track');
    const bar = el('span', 'bar');
    bar.style.left = `${(100 * step.start_ms) / total}%`;
    bar.style.width = `${Math.max((100 * step.duration_ms) / total, 0.4)}%`;
    track.append(bar);
    const dur = el('span', 'dur', step.outcome === 'running' ? `${duration(step.duration_ms)}…` : duration(step.duration_ms));
    row.append(name, track, dur);
    if (step.outcome === 'failed') {
      const err = el('span', 'step-error', step.error);
      row.append(err);
    }
    row.title = `${step.name}: ${step.outcome}, ${duration(step.duration_ms)}`;
    return row;
  }

  function redraw(id) {
    const card = state.cards.get(id);
    const old = document.querySelector(`section.run[data-run="${CSS.escape(id)}"]`);
    if (!card) {
      if (old) old.remove();
      return;
    }
    const fresh = drawCard(card);
    if (old) {
      old.replaceWith(fresh);
    } else {
      const main = $('runs');
      const note = main.querySelector(':scope > p.note');
      if (note) note.remove();
      main.prepend(fresh);
    }
  }

  function toggle(id) {
    const card = state.cards.get(id);
    if (isOpen(card)) {
      state.open.delete(id);
      state.closed.add(id);
    } else {
      state.open.add(id);
      state.closed.delete(id);
      loadTimeline(id);
    }
    redraw(id);
  }

  async function loadTimeline(id) {
    if (state.fetching.has(id)) {
      state.fetching.set(id, 'again');
      return;
    }
    state.fetching.set(id, true);
    try {
      const got = await getJson(`/status/api/runs/${encodeURIComponent(id)}`);
      state.timelines.set(id, got);
      if (state.cards.has(id)) state.cards.set(id, got.card);
      redraw(id);
      noteUpdate(got.card, 'timeline');
    } catch (e) {
      console.warn(`timeline of ${id}: ${e.message}`);
    } finally {
      const again = state.fetching.get(id) === 'again';
      state.fetching.delete(id);
      if (again) loadTimeline(id);
    }
  }

  function noteUpdate(card, what) {
    probe.updates.push({ id: card.id, what, at: Date.now(), steps: card.steps, result: resultWord(card) });
    if (probe.updates.length > 1000) probe.updates.splice(0, probe.updates.length - 1000);
  }

  // An event: applied now, or after the list on its way (which it may be
  // newer than).
  function apply(kind, value) {
    if (state.loading) {
      state.pending.push([kind, value]);
      return;
    }
    if (kind === 'run') onRun(value);
    else if (kind === 'removed') onRemoved(value);
  }

  function onRun(card) {
    const known = state.cards.has(card.id);
    // A run not listed while the list is full and older than all it shows
    // (run ids start with their start time) is one past the listed ones: it
    // stays out of view unless it runs. Any other run is shown, first.
    const full = state.order.length >= state.limit;
    if (!known && card.result !== 'running' && full && card.id < state.order[state.order.length - 1]) return;
    if (!keeps(card)) {
      if (known) {
        state.cards.delete(card.id);
        state.order = state.order.filter((i) => i !== card.id);
        state.matched -= 1;
        redraw(card.id);
        drawCount();
      }
      return;
    }
    state.cards.set(card.id, card);
    if (!known) {
      state.order.unshift(card.id);
      state.matched += 1;
      state.total += 1;
      // The list keeps its length: the oldest shown goes.
      while (state.order.length > state.limit) {
        const gone = state.order.pop();
        state.cards.delete(gone);
        state.open.delete(gone);
        state.closed.delete(gone);
        state.timelines.delete(gone);
        redraw(gone);
      }
      drawCount();
    }
    redraw(card.id);
    noteUpdate(card, 'card');
    if (isOpen(card)) loadTimeline(card.id);
  }

  function onRemoved(id) {
    if (state.cards.delete(id)) {
      state.order = state.order.filter((i) => i !== id);
      state.open.delete(id);
      state.closed.delete(id);
      state.timelines.delete(id);
      state.matched -= 1;
      state.total -= 1;
      redraw(id);
      drawCount();
    }
  }

  function listOrSay() {
    loadList().catch((e) => {
      if (!state.listedOnce) $('runs').replaceChildren(el('p', 'note', `The runs could not be read: ${e.message}`));
      console.warn(e.message);
    });
  }

  function connect() {
    const live = $('live');
    const source = new EventSource('/status/events');
    source.addEventListener('hello', () => {
      live.textContent = 'live';
      live.className = 'live on';
      // The list is read once the stream is open, so no change falls between
      // them; after a reconnect, it has what was sent while disconnected.
      listOrSay();
    });
    source.addEventListener('run', (e) => apply('run', JSON.parse(e.data)));
    source.addEventListener('removed', (e) => apply('removed', JSON.parse(e.data)));
    source.addEventListener('resync', listOrSay);
    source.addEventListener('error', () => {
      live.textContent = 'reconnecting…';
      live.className = 'live off';
      if (source.readyState !== EventSource.CLOSED) return; // the browser retries by itself
      // Refused (the session ended, the server restarted, too many pages):
      // the browser gives up, so the page tries again itself. A list read
      // first sends a signed-out reader to the sign-in form.
      source.close();
      if (!state.listedOnce) listOrSay();
      setTimeout(() => {
        getJson('/status/api/runs?limit=1').then(connect, () => setTimeout(connect, 5000));
      }, 3000);
    });
  }

  function initFilters() {
    const params = new URLSearchParams(window.location.search);
    $('f-vm').value = params.get('vm') || '';
    $('f-result').value = params.get('result') || '';
    for (const [id, name] of [['f-env', 'env'], ['f-kind', 'kind']]) {
      const value = params.get(name);
      if (value) {
        $(id).append(new Option(value, value));
        $(id).value = value;
      }
    }
    let pending = null;
    const changed = () => {
      const q = query();
      window.history.replaceState(null, '', q ? `?${q}` : window.location.pathname);
      loadList().catch((e) => console.warn(e.message));
    };
    $('f-vm').addEventListener('input', () => {
      clearTimeout(pending);
      pending = setTimeout(changed, 200);
    });
    $('f-result').addEventListener('change', changed);
    $('f-env').addEventListener('change', changed);
    $('f-kind').addEventListener('change', changed);
    $('filters').addEventListener('submit', (e) => e.preventDefault());
  }

  initFilters();
  connect();
})();
