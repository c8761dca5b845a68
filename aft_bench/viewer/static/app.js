// aft-bench view: one ES module, no dependencies. Served mode reads /api/*; the static bundle (window.AFT_BUNDLE)
// reads the same data from data/*.js files, each calling window.__aft(key, data), and queries the runs locally.

const BUNDLE = !!window.AFT_BUNDLE;
const app = document.getElementById("app");
const cache = new Map();

// ---------- data -------------------------------------------------------------------------------------------
function fileKey(key) { return key.replace(/[^A-Za-z0-9_.-]/g, "_"); }

const waiting = new Map();
window.__aft = (key, data) => { cache.set(key, data); const w = waiting.get(key); if (w) { waiting.delete(key); w(data); } };

function loadScript(key) {
  return new Promise((resolve, reject) => {
    if (cache.has(key)) return resolve(cache.get(key));
    waiting.set(key, resolve);
    const s = document.createElement("script");
    s.src = `data/${fileKey(key)}.js`;
    s.onerror = () => { waiting.delete(key); reject(new Error(`not in this bundle: ${key}`)); };
    document.head.appendChild(s);
  });
}

async function get(key) {
  if (BUNDLE) return loadScript(key);
  if (cache.has(key) && !key.startsWith("runs?")) return cache.get(key);
  const r = await fetch(`api/${key}`);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || `HTTP ${r.status}`);
  if (!key.startsWith("runs?")) cache.set(key, data);
  return data;
}

// The bundle's runs query: the same filter / sort / page rules as the server (viewer/runs.py).
function parseValue(type, text) {
  if (text === "null") return null;
  const base = type.replace("?", "");
  if (base === "bool") return text === "true";
  if (base === "int" || base === "float") return Number(text);
  return text;
}
function cmp(a, b) {
  if (typeof a === "boolean") return (a === b) ? 0 : (a ? 1 : -1);
  return a < b ? -1 : (a > b ? 1 : 0);
}
async function queryRuns(params) {
  if (!BUNDLE) return get(`runs?${params.toString()}`);
  const data = await loadScript("runs");
  const n = data.columns.run_id.length;
  let idx = [...Array(n).keys()];
  for (const [col, text] of params) {
    if (["sort", "desc", "page", "size"].includes(col)) continue;
    if (!(col in data.columns)) throw new Error(`not a filterable column in this bundle: ${col}`);
    const want = parseValue(data.types[col], text);
    const values = data.columns[col];
    idx = idx.filter((i) => values[i] === want);
  }
  const sort = params.get("sort");
  if (sort) {
    const v = data.columns[sort];
    const desc = ["1", "true"].includes(params.get("desc"));
    idx.sort((i, j) => {
      const a = v[i], b = v[j];
      if (a === null || b === null) return (a === null) - (b === null);
      return desc ? cmp(b, a) : cmp(a, b);
    });
  }
  const page = Math.max(0, parseInt(params.get("page") || "0", 10));
  const size = Math.min(500, Math.max(1, parseInt(params.get("size") || "50", 10)));
  const rows = idx.slice(page * size, page * size + size).map((i) => Object.fromEntries(data.shown.map((c) => [c, data.columns[c][i]])));
  return { total: idx.length, runs: n, page, size, rows, columns: data.shown };
}

// ---------- DOM helpers --------------------------------------------------------------------------------------
function h(tag, attrs = {}, ...kids) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat(Infinity)) {
    if (kid === null || kid === undefined || kid === false) continue;
    el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return el;
}
function show(v) {
  if (v === null || v === undefined) return "–";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Math.round(v * 1e6) / 1e6);
  if (typeof v === "object") return JSON.stringify(v);
  return String(v);
}
function cell(v, attrs = {}) { return h("td", { class: typeof v === "number" ? "num" : null, ...attrs }, show(v)); }
function kvTable(obj, testid) {
  return h("table", { "data-testid": testid, class: "kv" }, Object.entries(obj).map(([k, v]) =>
    h("tr", { "data-key": k }, h("th", {}, k), h("td", { "data-value": show(v) }, typeof v === "object" && v !== null ? h("pre", {}, JSON.stringify(v, null, 2)) : show(v)))));
}
function table(rows, columns, testid, link) {
  return h("table", { "data-testid": testid },
    h("tr", {}, columns.map((c) => h("th", {}, c))),
    rows.map((r) => h("tr", { "data-row": r[columns[0]] }, columns.map((c, i) => {
      const td = cell(r[c], { "data-col": c });
      if (i === 0 && link) { td.textContent = ""; td.append(h("a", { href: link(r) }, show(r[c]))); }
      return td;
    }))));
}
function routeOf() {
  const raw = location.hash.replace(/^#\/?/, "") || "experiment";
  const [path, qs] = raw.split("?");
  return { parts: path.split("/").map(decodeURIComponent), params: new URLSearchParams(qs || "") };
}
function go(path, params) { const qs = params && params.toString(); location.hash = `#/${path}${qs ? "?" + qs : ""}`; }

// ---------- pages --------------------------------------------------------------------------------------------
// The comparison tables as the report has them (analysis/report.py, _table3): effect, interval, p, criterion, faults.
function fmt(v, digits = 4) {
  if (v === null || v === undefined || (typeof v === "number" && Number.isNaN(v))) return "–";
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : v.toFixed(digits);
  return String(v);
}
function share(v) { return v === null || v === undefined ? "–" : `${Math.round(v * 100)}%`; }
function numCell(v, col) { return h("td", { class: "num", "data-col": col, "data-value": JSON.stringify(v ?? null) }, fmt(v)); }
function scroll(el) { return h("div", { class: "scroll" }, el); }
function comparisonTable(rows, family, holm = family === "primary") {
  const primary = holm;  // an unadjusted family's p is its raw p (outside any Holm family)
  const heads = ["comparison", "pairs", "clusters", "effect", "95% CI", ...(primary ? ["p raw", "p (Holm)"] : ["p (unadjusted)"]),
    "criterion met", "faults fired (T / C)", "caveat"];
  return scroll(h("table", { "data-testid": `table-${family}`, class: "comparisons" },
    h("tr", {}, heads.map((c) => h("th", {}, c))),
    rows.map((r) => h("tr", { "data-row": r.comparison, class: r.criterion_met ? "met" : null },
      h("td", { "data-col": "comparison" }, h("a", { href: `#/pairs?comparison=${encodeURIComponent(r.comparison)}`, title: "its matched pairs" }, r.comparison)),
      numCell(r.pairs, "pairs"), numCell(r.clusters, "clusters"), numCell(r.utility_diff, "utility_diff"),
      h("td", { class: "num", "data-col": "ci", "data-value": JSON.stringify([r.ci_low ?? null, r.ci_high ?? null]) },
        r.ci_low === null || r.ci_low === undefined ? "–" : `[${fmt(r.ci_low)}, ${fmt(r.ci_high)}]`),
      numCell(r.p_raw, "p_raw"), primary ? numCell(r.p_adjusted, "p_adjusted") : null,
      h("td", { "data-col": "criterion_met", "data-value": JSON.stringify(r.criterion_met ?? null) },
        h("b", {}, fmt(r.criterion_met)), r.joint_note ? ` (${r.joint_note})` : ""),
      h("td", { class: "num", "data-col": "faults_fired", "data-value": JSON.stringify([r.treatment_fault_fired_share ?? null, r.control_fault_fired_share ?? null]) },
        `${share(r.treatment_fault_fired_share)} / ${share(r.control_fault_fired_share)}`),
      h("td", { class: "caveat", "data-col": "caveat" }, r.caveat || "")))));
}
function figure(d, f) {
  return h("figure", {}, h("img", { class: "fig", alt: f, src: BUNDLE ? `data/figures/${f}` : `api/figure/${f}` }));
}
const PENDING_SHOWN = 200;
// The other analysis tables as designed tables: named columns in reading order, the comparison first, numbers
// formatted as in the comparison tables ([key, heading] or [key, heading, how]).
const ci = (r) => r.ci_low === null || r.ci_low === undefined ? "–" : `[${fmt(r.ci_low)}, ${fmt(r.ci_high)}]`;
const MORE = {
  trials: { title: "Reliability over trials (pass^k)", text: "Per comparison arm and k: pass^k (all k trials pass), pass@k (at least one), and the share of tuples whose trials disagree.",
    columns: [["comparison", "comparison"], ["arm", "arm"], ["condition", "condition"], ["k", "k"], ["tuples", "tuples"], ["trials", "trials"],
      ["pass_hat_k", "pass^k"], ["pass_at_k", "pass@k"], ["flip_rate", "verdicts flip"]] },
  per_model: { title: "Per model", text: "Each comparison within one model; p Benjamini-Hochberg across these contrasts; interaction is the model's effect minus the pooled one.",
    columns: [["comparison", "comparison"], ["model", "model"], ["pairs", "pairs"], ["utility_diff", "effect"], ["ci", "95% CI", ci],
      ["p_raw", "p raw"], ["p_bh", "p (BH)"], ["treatment_mean", "treatment mean"], ["control_mean", "control mean"], ["interaction", "interaction"]] },
  lomo: { title: "Leave one model out", text: "Each comparison with one model's pairs left out.",
    columns: [["comparison", "comparison"], ["left_out", "model left out"], ["pairs", "pairs"], ["utility_diff", "effect"], ["ci", "95% CI", ci], ["p_raw", "p raw"]] },
  discovery: { title: "Discovery by catalog size", text: "Means per catalog size and arm: context tokens beside recall, correctness and wrong-tool effects.",
    columns: [["catalog_size", "catalog size"], ["condition", "condition"], ["runs", "runs"], ["context_tokens", "context tokens"], ["recall", "recall"],
      ["y_correct", "correct"], ["unintended_effects", "wrong-tool effects"]] },
};
function designed(rows, columns, testid) {
  return h("table", { "data-testid": testid, class: "comparisons" },
    h("tr", {}, columns.map(([, head]) => h("th", {}, head))),
    rows.map((r) => h("tr", { "data-row": r[columns[0][0]] }, columns.map(([key, , how]) => how
      ? h("td", { class: "num", "data-col": key }, how(r))
      : (typeof r[key] === "number" ? numCell(r[key], key) : h("td", { "data-col": key }, fmt(r[key])))))));
}

async function experimentPage() {
  const d = await get("experiment");
  const m = d.manifest || {};
  const a = d.analysis || {};
  const out = [h("h1", {}, "Experiment", m.config_path ? h("span", { class: "sub" }, ` ${m.config_path}`) : null)];
  out.push(h("p", { class: "summary" }, h("b", {}, "Runs recorded: "), h("span", { "data-testid": "runs-count" }, d.runs),
    d.planned !== null ? [" of ", h("span", { "data-testid": "planned-count" }, d.planned), " planned; "] : "; ",
    h("b", {}, "pending: "), h("a", { href: "#/experiment", title: "the pending tuples and their reasons", onclick: (e) => {
      e.preventDefault(); document.getElementById("pending").scrollIntoView(); } }, h("span", { "data-testid": "pending-count" }, d.pending_count)),
    a.meta ? ` · analysis: ${a.meta.resamples} resamples, ${a.meta.permutations} flips of ${a.meta.flip_unit}s, seed ${a.meta.seed}` : ""));
  for (const n of d.status.notes) out.push(h("div", { class: "note", "data-testid": "note" }, n));
  if (!a.meta) out.push(h("div", { class: "note", "data-testid": "no-analysis" }, "no analysis here: run aft-bench analyze DIR to see the comparisons"));
  if (d.analysis_stale) out.push(h("div", { class: "note", "data-testid": "stale" }, "the analysis was made from other results than results.parquet holds now: run aft-bench analyze DIR again"));
  const main = d.figures.filter((f) => f.startsWith("fig2"));
  const families = (a.meta && a.meta.families) || null;
  if (families && a.comparisons) {
    // the experiment's own comparisons, family by family as its config declared them: its answer, first
    const byId = Object.fromEntries(a.comparisons.map((r) => [r.comparison, r]));
    families.forEach((fam, i) => {
      const rows = fam.comparisons.map((c) => byId[c]).filter(Boolean);
      const done = rows.filter((r) => r.pairs > 0), idle = rows.filter((r) => !(r.pairs > 0));
      const holm = fam.adjust === "holm";
      out.push(h("h2", { id: `family-${fam.name}`, "data-testid": `family-${fam.name}` }, `Comparisons: ${fam.name}`),
        h("p", { class: "muted" }, (i === 0 ? "Paired utility difference (positive favours the treatment), 95 % task-clustered interval, sign-flip permutation p; " : "") +
          (holm ? `Holm across the ${fam.size} comparisons of this family.` : "outside any Holm family: unadjusted p.") +
          (i === 0 ? " Each comparison opens its matched pairs." : "")));
      if (done.length) out.push(comparisonTable(done, fam.name, holm));
      if (idle.length) out.push(h("ul", { class: "muted", "data-testid": `not-computed-${fam.name}` },
        idle.map((r) => h("li", {}, `Not computed: ${r.comparison}, ${r.not_computed || "no matched pairs"}.`))));
      if (holm && fam.missing && fam.missing.length) out.push(h("p", { class: "note" }, `This family is incomplete: ${fam.missing.join(", ")} counted as p = 1.`));
    });
    if (a.meta.plan_note) out.push(h("p", { class: "muted", "data-testid": "plan-note" }, `Comparisons: ${a.meta.plan_note}.`));
    if (main.length) out.push(main.map((f) => figure(d, f)));
  }
  if (!(families && a.comparisons) && a.primary) {
    out.push(h("h2", { id: "primary" }, "Primary comparisons"),
      h("p", { class: "muted" }, "Paired utility difference (positive favours the treatment), 95 % task-clustered interval, " +
        "sign-flip permutation p, Holm across the primary family. Each comparison opens its matched pairs."),
      comparisonTable(a.primary, "primary"));
  }
  if (!(families && a.comparisons) && main.length) out.push(main.map((f) => figure(d, f)));
  if (!(families && a.comparisons) && a.secondary) {
    const run = a.secondary.filter((r) => r.pairs > 0), idle = a.secondary.filter((r) => !(r.pairs > 0));
    out.push(h("h2", { id: "secondary" }, "Secondary comparisons"), h("p", { class: "muted" }, "Outside the Holm family; unadjusted p."));
    if (run.length) out.push(comparisonTable(run, "secondary"));
    if (idle.length) out.push(h("p", { class: "muted", "data-testid": "secondary-not-run" }, `No pairs in these results: ${idle.map((r) => r.comparison).join(", ")}.`));
  }
  out.push(h("h2", { id: "pending" }, `Pending tuples (${d.pending_count})`));
  if (!d.pending.length && !d.failures.length) out.push(h("p", {}, "none: every planned tuple has a recorded run"));
  if (d.pending.length) {
    out.push(scroll(table(d.pending.slice(0, PENDING_SHOWN).map((p) => ({ run_id: p.run_id, error: p.error, message: p.message })),
      ["run_id", "error", "message"], "pending")));
    if (d.pending.length > PENDING_SHOWN) out.push(h("p", { class: "muted" }, `and ${d.pending.length - PENDING_SHOWN} more (failures.jsonl holds every reason)`));
  }
  if (d.failures.length) out.push(h("h3", {}, "Failure records"), scroll(table(d.failures, ["run_id", "session", "error", "message"], "failures")));
  const more = Object.keys(MORE).filter((n) => a[n] && a[n].length);
  if (more.length) {
    out.push(h("h2", {}, "More analyses"));
    for (const name of more) out.push(h("h3", {}, MORE[name].title), h("p", { class: "muted" }, MORE[name].text),
      scroll(designed(a[name], MORE[name].columns, `table-${name}`)));
  }
  const rest = d.figures.filter((f) => !main.includes(f));
  if (rest.length) out.push(h("h2", {}, "Figures"), rest.map((f) => figure(d, f)));
  out.push(h("h2", { id: "manifest" }, "Manifest and counts"), h("div", { class: "meta" },
    h("div", { class: "manifest" }, kvTable(m, "manifest")),
    h("div", { class: "counts" }, Object.entries(d.counts).map(([col, vals]) => h("div", {}, h("h3", {}, col),
      h("table", { "data-testid": `counts-${col}` }, Object.entries(vals).map(([v, n]) => {
        const p = new URLSearchParams({ [col]: v });
        return h("tr", {}, h("td", {}, h("a", { href: `#/runs?${p}` }, v)), cell(n));
      })))))));
  return out;
}

async function runsPage(params) {
  const [facets, page] = await Promise.all([get("facets"), queryRuns(params)]);
  const out = [h("h1", {}, "Runs")];
  const filters = h("div", { class: "filters", "data-testid": "filters" });
  for (const col of facets.order) {
    const vals = facets.facets[col];
    const sel = h("select", { "data-filter": col, onchange: (ev) => {
      const p = new URLSearchParams(params); p.delete("page");
      if (ev.target.value === "") p.delete(col); else p.set(col, ev.target.value);
      go("runs", p);
    } }, h("option", { value: "" }, "(any)"), vals.map(([v, n]) => h("option", { value: show(v) === "–" ? "null" : String(v), selected: params.get(col) === (v === null ? "null" : String(v)) }, `${show(v)} (${n})`)));
    filters.append(h("label", {}, col, sel));
  }
  out.push(filters);
  const size = page.size, pages = Math.max(1, Math.ceil(page.total / size));
  const pager = (p) => { const q = new URLSearchParams(params); q.set("page", p); return `#/runs?${q}`; };
  out.push(h("div", { class: "pager" }, h("span", { "data-testid": "total" }, `${page.total}`), ` of ${page.runs} runs · page ${page.page + 1} of ${pages}`,
    page.page > 0 ? h("a", { href: pager(page.page - 1), "data-testid": "prev" }, "← previous") : null,
    page.page + 1 < pages ? h("a", { href: pager(page.page + 1), "data-testid": "next" }, "next →") : null));
  const sort = params.get("sort"), desc = ["1", "true"].includes(params.get("desc"));
  const head = h("tr", {}, page.columns.map((c) => h("th", { class: `sortable${sort === c ? (desc ? " sorted-desc" : " sorted-asc") : ""}`, "data-sort": c, onclick: () => {
    const p = new URLSearchParams(params); p.delete("page");
    if (sort === c && !desc) p.set("desc", "1"); else p.delete("desc");
    p.set("sort", c); go("runs", p);
  } }, c)));
  out.push(h("table", { "data-testid": "runs" }, head, page.rows.map((r) => h("tr", { "data-run": r.run_id },
    page.columns.map((c) => c === "run_id" ? h("td", {}, h("a", { href: `#/run/${r.run_id}` }, r.run_id)) : cell(r[c], { "data-col": c }))))));
  return out;
}

function evLine(e, run) {
  const reasons = (run.commit_reasons || {})[String(e.seq)] || [];
  const cls = `ev ${e.kind}${reasons.length ? " unsafe" : ""}`;
  return h("div", { class: cls, id: `ev-${run.row.run_id}-${e.seq}`, "data-seq": e.seq, "data-kind": e.kind },
    h("span", { class: "k" }, `#${e.seq} ${e.kind}`), reasons.length ? h("b", { "data-testid": "reasons" }, `[${reasons.join(", ")}] `) : null,
    JSON.stringify(e.data));
}
function turnCard(t, run) {
  if (!t) return h("div", { class: "gap" }, "(no matching turn)");
  const ev = run.events;
  const model = t.model_calls.length ? ` · ${t.model_calls.length} model call(s), ${t.tokens} tokens, $${show(t.cost_usd)}, ${show(t.latency_s)} s, ${t.retries} retries` : "";
  return h("div", { class: "turn", "data-turn": t.n, "data-tool": t.tool || "" },
    h("div", { class: "head" }, `Turn ${t.n}: ${t.action === "tool_call" ? "call " + t.tool : (t.action || "events")}`, model),
    t.args ? h("div", { class: "ev" }, h("span", { class: "k" }, "arguments"), JSON.stringify(t.args)) : null,
    t.result ? h("div", { class: "ev" }, h("span", { class: "k" }, t.result.stage), JSON.stringify(t.result.response)) : null,
    h("details", { open: t.faults_fired.length || Object.keys(run.commit_reasons || {}).some((s) => t.events.includes(Number(s))) ? true : null },
      h("summary", {}, `${t.events.length} events`), t.events.map((s) => evLine(ev[s] || { seq: s, kind: "?", data: {} }, run))));
}
function verifyBadge(v) {
  return h("span", { class: `badge verify ${v.ok ? "ok" : "failed"}`, "data-testid": "verification" },
    v.ok ? `trace verified (head ${v.head.slice(0, 12)})` : `trace verification FAILED: ${v.error}`);
}
function labelsTable(run) {
  return h("table", { "data-testid": "labels" }, h("tr", {}, h("th", {}, "label"), h("th", {}, "value"), h("th", {}, "events that produced it"), h("th", {}, "check")),
    run.labels.map((l) => h("tr", { "data-label": l.label },
      h("td", {}, l.label), h("td", { "data-value": show(l.value) }, show(l.value)),
      h("td", {}, l.events.map((s) => h("a", { href: "#", onclick: (e) => { e.preventDefault(); jump(run.row.run_id, s); } }, `#${s} `)), l.note ? h("i", {}, l.note) : null),
      h("td", {}, l.agrees === null ? "" : (l.agrees ? "trace agrees" : h("b", { class: "error" }, `trace gives ${show(l.derived)}`))))));
}
function jump(runId, seq) {
  const el = document.getElementById(`ev-${runId}-${seq}`);
  if (!el) return;
  const d = el.closest("details"); if (d) d.open = true;
  document.querySelectorAll(".ev.target").forEach((x) => x.classList.remove("target"));
  el.classList.add("target"); el.scrollIntoView({ block: "center" });
}

async function runPage(runId) {
  const run = await get(`run/${runId}`);
  const r = run.row;
  const out = [h("h1", {}, `Run ${r.run_id}`), h("p", {}, verifyBadge(run.verification), " ",
    h("span", { class: "badge", "data-testid": "outcome" }, r.outcome), ` ${r.workload} / ${r.task_id} · ${r.condition} · fault ${r.fault} (seed ${r.fault_seed}) · ${r.agent} · ${r.model} · ${r.backend} · rep ${r.rep}`)];
  if (!run.events.length) out.push(h("div", { class: "error" }, "no trace events to show"));
  out.push(h("h2", {}, "Labels and their evidence"), labelsTable(run));
  out.push(h("h2", {}, "Faults"), run.faults.length ? h("table", { "data-testid": "faults" }, h("tr", {}, ["fault", "kind", "op", "stage", "planned", "armed", "fired", "invocation"].map((c) => h("th", {}, c))),
    run.faults.map((f) => h("tr", { "data-fault": f.fault, "data-fired": f.fired === null ? "no" : "yes" }, cell(f.fault), cell(f.kind), cell(f.op), cell(f.stage), cell(f.planned), cell(f.armed), cell(f.fired), cell(f.inv)))) : h("p", {}, "no fault planned"));
  out.push(h("h2", {}, "Invocations"), run.invocations.length ? h("table", { "data-testid": "invocations" }, h("tr", {}, ["inv", "op", "relation", "args", "stages", "work units", "commits"].map((c) => h("th", {}, c))),
    run.invocations.map((i) => h("tr", {}, cell(i.inv), cell(i.op), cell(i.relation), cell(i.args), h("td", { class: "stages" }, i.stages.map((s) => h("span", { class: s.stage }, s.stage))), cell(i.work_units), cell(i.commits.map((c) => `${c.kind} #${c.seq}`).join(", "))))) : h("p", {}, "no invocation"));
  const ex = run.extras || {};
  if (ex.served) out.push(h("h2", {}, "Served run"), kvTable(ex.served, "served"));
  if (ex.program) out.push(h("h2", {}, "Tool programs"), kvTable(ex.program, "program"));
  out.push(h("h2", {}, "Timeline"), h("div", { "data-testid": "timeline" },
    h("div", { class: "turn" }, h("div", { class: "head" }, "Setup"), run.setup.map((s) => evLine(run.events[s], run))),
    run.turns.map((t) => turnCard(t, run)),
    run.events.filter((e) => e.kind === "terminal_state" || e.kind === "sealed").map((e) => evLine(e, run))));
  out.push(h("h2", {}, "Terminal state against s0"));
  if (run.state.note) out.push(h("div", { class: "note" }, run.state.note));
  if (run.state.diff) out.push(run.state.diff.length ? h("table", { "data-testid": "diff" }, h("tr", {}, h("th", {}, "record"), h("th", {}, "change"), h("th", {}, "detail")),
    run.state.diff.map((d) => h("tr", {}, cell(d.ref), cell(d.change), cell(d.fields || d.after || d.before || { lost: d.lost, gained: d.gained })))) : h("p", {}, "no change from s0"));
  if (run.state.terminal) out.push(h("details", {}, h("summary", {}, "whole terminal state"), h("pre", {}, JSON.stringify(run.state.terminal, null, 2))));
  out.push(h("h2", {}, "Recorded row"), kvTable(r, "row"));
  return out;
}

async function pairsPage(params) {
  const d = await get("pairs");
  const comp = params.get("comparison");
  const out = [h("h1", {}, "Matched pairs"), h("p", {}, `source: ${d.source}`)];
  out.push(h("p", {}, d.comparisons.map((c) => [h("a", { href: `#/pairs?comparison=${encodeURIComponent(c)}`, class: c === comp ? "active" : null }, c), " "])));
  const rows = d.pairs.filter((p) => !comp || p.comparison === comp);
  out.push(h("p", {}, h("span", { "data-testid": "pair-count" }, rows.length), " pairs"));
  out.push(h("table", { "data-testid": "pairs" }, h("tr", {}, ["comparison", "cluster", "fault", "fault_seed", "catalog_size", "model", "rep", "treatment", "control", "utility_diff", ""].map((c) => h("th", {}, c))),
    rows.map((p) => h("tr", { "data-pair": `${p.comparison}/${p.run_id_treatment}` }, cell(p.comparison), cell(p.cluster), cell(p.fault), cell(p.fault_seed), cell(p.catalog_size), cell(p.model), cell(p.rep),
      cell(p.treatment), cell(p.control), cell(p.utility_diff), h("td", {}, h("a", { href: `#/pair/${encodeURIComponent(p.comparison)}/${p.run_id_treatment}` }, "open"))))));
  return out;
}

async function pairPage(comp, runId) {
  const d = await get(`pair/${comp}/${runId}`);
  const [t, c] = await Promise.all([get(`run/${d.treatment}`), get(`run/${d.control}`)]);
  const p = d.pair;
  const out = [h("h1", {}, `Pair · ${p.comparison}`),
    h("p", {}, "utility difference ", h("b", { "data-testid": "utility-diff" }, show(p.utility_diff)), ` (treatment ${show(p.treatment)}, control ${show(p.control)}) · cluster `,
      h("b", { "data-testid": "cluster" }, p.cluster), ` · fault ${p.fault} seed ${p.fault_seed} · rep ${p.rep}`),
    h("div", { class: "pair" },
      h("div", {}, h("h2", {}, "treatment ", h("a", { href: `#/run/${t.row.run_id}` }, t.row.run_id), ` (${t.row.condition})`), verifyBadge(t.verification)),
      h("div", {}, h("h2", {}, "control ", h("a", { href: `#/run/${c.row.run_id}` }, c.row.run_id), ` (${c.row.condition})`), verifyBadge(c.verification)))];
  out.push(h("h2", {}, "Labels"), h("table", { "data-testid": "pair-labels" }, h("tr", {}, h("th", {}, "label"), h("th", {}, "treatment"), h("th", {}, "control")),
    d.labels.map((l) => h("tr", { class: l.differs ? "differs" : null, "data-label": l.label, "data-differs": l.differs ? "yes" : "no" }, cell(l.label), cell(l.treatment), cell(l.control)))));
  out.push(h("h2", {}, "Turns, aligned"), h("div", { class: "pair", "data-testid": "aligned" },
    d.alignment.map(([i, j]) => [turnCard(i === null ? null : t.turns[i], t), turnCard(j === null ? null : c.turns[j], c)])));
  return out;
}

// ---------- scorecards of real MCP servers -------------------------------------------------------------------
const CLASS = { duplicate: "DUPLICATE", false_failure: "false failure", silent_success: "silent success", safe: "safe",
  no_effect: "no effect", unmeasured: "unmeasured" };
function classCell(v, col) { return h("td", { "data-col": col, class: v ? `cls-${v}` : null }, CLASS[v] || "–"); }
async function scorecardsPage() {
  const d = await get("scorecards");
  const out = [h("h1", {}, "Scorecards")];
  if (!d.cards.length) out.push(h("p", { "data-testid": "no-scorecards" }, "No scorecards in this folder: write them into its scorecards/ with `aft-bench scorecard WORLD --out DIR/scorecards`."));
  for (const c of d.cards) {
    out.push(h("section", { class: "scorecard", "data-testid": `scorecard-${c.world}-${c.version}` },
      h("h2", {}, `${c.package} ${c.version}`),
      h("p", {}, `world ${c.world}; the server says it is ${c.server.name || "?"} ${c.server.version || "?"} (protocol ${c.protocol || "?"}). Each example's answer was lost after the server answered, then re-issued bare, with the gateway's key, or after verification; classes are read from the real state.`),
      scroll(h("table", { "data-testid": "scorecard-table" },
        h("thead", {}, h("tr", {}, ...["tool", "bare re-issue", "with key", "verify", "effects", "re-issue answered", "changed", "annotations", "disagrees"].map((x) => h("th", {}, x)))),
        h("tbody", {}, ...c.rows.map((r) => h("tr", { "data-tool": r.tool },
          h("td", { "data-col": "tool" }, r.tool), classCell(r.bare, "bare"), classCell(r.key, "key"), classCell(r.verify, "verify"),
          cell(r.realized, { "data-col": "realized" }), h("td", { "data-col": "reissue" }, r.reissue), h("td", {}, r.changes),
          h("td", {}, r.annotations), h("td", { "data-col": "contradictions" }, r.contradictions.join("; ") || "no")))))),
      c.untested.length ? h("p", {}, `no example (not measured): ${c.untested.join(", ")}`) : null));
  }
  for (const ch of d.changes) {
    out.push(h("section", { "data-testid": `changes-${ch.world}` }, h("h2", {}, `${ch.world}: ${ch.from} → ${ch.to}`),
      ch.lines.length ? h("ul", {}, ...ch.lines.map((l) => h("li", {}, l))) : h("p", {}, "nothing changed")));
  }
  if (d.notes.length) out.push(h("ul", { class: "notes" }, ...d.notes.map((n) => h("li", {}, n))));
  return out;
}

// ---------- router -------------------------------------------------------------------------------------------
async function render() {
  const { parts, params } = routeOf();
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.nav === parts[0]));
  app.dataset.state = "loading";
  const t0 = performance.now();
  try {
    let content;
    if (parts[0] === "runs") content = await runsPage(params);
    else if (parts[0] === "run" && parts[1]) content = await runPage(parts[1]);
    else if (parts[0] === "pairs") content = await pairsPage(params);
    else if (parts[0] === "pair" && parts[2]) content = await pairPage(parts[1], parts[2]);
    else if (parts[0] === "scorecards") content = await scorecardsPage();
    else content = await experimentPage();
    app.replaceChildren(...[content].flat(Infinity));
    app.dataset.page = parts[0] || "experiment";
    app.dataset.state = "ready";
  } catch (err) {
    app.replaceChildren(h("div", { class: "error", "data-testid": "error" }, String(err.message || err)));
    app.dataset.state = "error";
  }
  app.dataset.renderMs = String(Math.round(performance.now() - t0));
}

window.addEventListener("hashchange", render);
document.getElementById("where").textContent = BUNDLE ? `static bundle of ${window.AFT_BUNDLE.directory}` : "";
render();
