"""The diagnosis as one self-contained HTML page: the findings with their evidence, and each host's
topology drawn as inline SVG (converters.svg), where a finding's links light up what it cites.

The page loads nothing: no script, style, font or image from anywhere, so it opens on an air-gapped
cluster, from a file or from the service. Its own Content-Security-Policy (a meta element, also in
`CONTENT_SECURITY_POLICY` for a server to send as a header) allows only the page's one stylesheet
and one script, by hash, and nothing else. Every string from the graph or the diagnosis is escaped.
"""

from __future__ import annotations

import base64
import hashlib
from html import escape

from witty_profiler.converters.evidence import evidence_value
from witty_profiler.converters.svg import Picture, topology_svg
from witty_profiler.diagnosis.models import LAYERS, Diagnosis, Evidence, Finding
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.ids import host_of
from witty_profiler.topology.query import GraphQuery
from witty_profiler.topology.wording import counted
from witty_profiler.topology.workload import resolve_workload

HOSTS_MAX = 32  # hosts drawn one by one; a larger merged graph is drawn per host with --host
IDS_SHOWN = 8  # ids listed in one evidence row

STYLE = """
body{font:14px/1.45 system-ui,"DejaVu Sans",Arial,sans-serif;margin:0;color:#212121;background:#f7f7f7}
header,main{padding:0 24px}
h1{font-size:22px;margin:16px 0 4px}
h2{font-size:18px;margin:24px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:0 0 6px}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:2px 12px;margin:8px 0}
dl.meta dt{color:#666}dl.meta dd{margin:0}
.badge{display:inline-block;border-radius:3px;padding:0 6px;font-weight:bold;color:#fff;background:#757575}
.badge.P0{background:#c62828}.badge.P1{background:#ef6c00}.badge.P2{background:#1565c0}
nav.hosts a{margin-right:10px}
figure.host{margin:0 0 16px;background:#fff;border:1px solid #ddd;padding:8px;overflow-x:auto}
figure.host figcaption{font-weight:bold;margin-bottom:6px}
svg.topology{display:block}
svg .ent{cursor:pointer}
p.picked{margin:6px 0 0;min-height:1.4em;color:#333}
svg .ent.hl>rect,svg .ent:target>rect{stroke:#d500f9;stroke-width:4}
svg .ent.hl>path,svg .ent:target>path{stroke-width:7;stroke-opacity:1}
article.finding{background:#fff;border:1px solid #ddd;border-left:6px solid #757575;padding:10px 14px;margin:0 0 14px}
article.finding.P0{border-left-color:#c62828}article.finding.P1{border-left-color:#ef6c00}
article.finding.P2{border-left-color:#1565c0}
table{border-collapse:collapse;margin:6px 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f0f0f0}
td.ids a,td.ids code{display:inline-block;margin-right:6px;word-break:break-all}
a.cite.hl-from{background:#f3e5f5}
button.show{cursor:pointer;border:1px solid #8e24aa;background:#f3e5f5;border-radius:3px;padding:2px 8px}
details{margin:4px 0}summary{cursor:pointer}
.clear{color:#2e7d32}.not_evaluated{color:#757575}
code{font-family:"DejaVu Sans Mono",monospace;font-size:12px}
"""

SCRIPT = """
(function () {
  "use strict";
  function light(ids) {
    document.querySelectorAll(".hl").forEach(function (el) { el.classList.remove("hl"); });
    var first = null;
    ids.forEach(function (id) {
      var el = id ? document.getElementById(id) : null;
      if (el) { el.classList.add("hl"); first = first || el; }
    });
    return first;
  }
  function pick(el) {
    var out = el.closest("figure").querySelector(".picked");
    var title = el.querySelector("title");
    out.textContent = "";
    var head = document.createElement("strong");
    head.textContent = title ? title.textContent.split("\\n")[0] : el.getAttribute("data-entity");
    out.appendChild(head);
    var citing = Array.prototype.filter.call(document.querySelectorAll("article.finding"), function (a) {
      var b = a.querySelector("button[data-cites]");
      return b && b.getAttribute("data-cites").split(" ").indexOf(el.id) >= 0;
    });
    out.appendChild(document.createTextNode(citing.length ? " \u2014 cited by: " : " \u2014 cited by no finding"));
    citing.forEach(function (a, i) {
      var link = document.createElement("a");
      link.href = "#" + a.id;
      link.textContent = a.querySelector("h3").textContent;
      if (i) { out.appendChild(document.createTextNode("; ")); }
      out.appendChild(link);
    });
    light([el.id].concat((el.getAttribute("data-related") || "").split(" ")));
  }
  document.addEventListener("click", function (event) {
    var target = event.target;
    var trigger = target.closest ? target.closest("[data-cites]") : null;
    if (trigger) {
      event.preventDefault();
      var first = light(trigger.getAttribute("data-cites").split(" "));
      if (first) { first.scrollIntoView({block: "center", inline: "center"}); }
      return;
    }
    var picked = target.closest ? target.closest("svg .ent") : null;
    if (picked) { pick(picked); }
  });
})();
"""


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


CONTENT_SECURITY_POLICY = (f"default-src 'none'; style-src {_sha256(STYLE)}; script-src {_sha256(SCRIPT)}; "
                           "base-uri 'none'; form-action 'none'")


def render_html(graph: Graph, report: Diagnosis) -> str:
    """The page for `report` (the diagnosis of `graph`): same graph and diagnosis, same bytes."""
    pictures = _pictures(graph, report)
    s = report.summary
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{_a(CONTENT_SECURITY_POLICY)}">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>witty-profiler diagnosis: {_e(_few(s.get('hosts') or [], 3) or 'unknown host')}</title>",
             f"<style>{STYLE}</style></head><body>"]
    parts += _header(report)
    parts.append("<main>")
    parts += _topology(graph, pictures)
    parts += _findings(graph, report, pictures)
    parts += _coverage(report) + _collectors(report)
    parts.append(f"</main><script>{SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


def _e(text: object) -> str:
    return escape(str(text), quote=False)


def _a(text: object) -> str:
    return escape(str(text), quote=True)


def _few(names: list[str], limit: int) -> str:
    """'a, b, c' or, past `limit` names, 'a, b (+498 more)'."""
    shown = ", ".join(names[:limit])
    return shown + (f" (+{len(names) - limit} more)" if len(names) > limit else "")


def _pictures(graph: Graph, report: Diagnosis) -> list[Picture]:
    scope = report.summary.get("scope") or {}
    try:
        workload = resolve_workload(GraphQuery.of(graph), scope.get("pids") or None).ids
    except InputError:  # a report of another graph: its pids are not here, so draw no workload
        workload = frozenset()
    cited = {i for f in report.findings for i in [*f.subjects, *(x for e in f.evidence for x in e.ids)]}
    return [topology_svg(graph, host, workload, cited) for host in _hosts(graph)[:HOSTS_MAX]]


def _hosts(graph: Graph) -> list[str]:
    return list(graph.meta.hosts) or sorted({host_of(e.id) for e in graph.entities()} - {""})


def _header(report: Diagnosis) -> list[str]:
    s = report.summary
    counts = report.counts()
    window = (f"{s.get('started_at')}, {s.get('duration_s'):g} s" if s.get("duration_s") is not None
              else "no capture window (snapshot)")
    rows = [("Hosts", _few(s.get("hosts") or [], 20) or "unknown"), ("Source", s.get("source") or "unknown"),
            ("Window", window), ("Scope", (s.get("scope") or {}).get("description", ""))]
    if s.get("layer"):
        rows.append(("Layer", f"{s['layer']} only"))
    out = ["<header><h1>witty-profiler diagnosis</h1>", '<dl class="meta">']
    out += [f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in rows]
    out.append("</dl>")
    badges = " ".join(f'<span class="badge {p}">{p}: {counts[p]}</span>' for p in ("P0", "P1", "P2"))
    out.append(f'<p class="counts">{badges} &mdash; {s.get("finding", 0)} of {s.get("patterns", 0)} patterns found '
               f'a problem, {s.get("clear", 0)} clear, {s.get("not_evaluated", 0)} not evaluated.</p></header>')
    return out


def _topology(graph: Graph, pictures: list[Picture]) -> list[str]:
    out = ['<section id="topology"><h2>Topology</h2>']
    if len(pictures) > 1:
        out.append('<nav class="hosts">Hosts: ' + " ".join(
            f'<a href="#{_a(_host_anchor(p.host))}">{_e(p.host)}</a>' for p in pictures) + "</nav>")
    hosts = _hosts(graph)
    if len(hosts) > len(pictures):
        left = hosts[len(pictures):]
        out.append(f"<p>{counted(len(left), 'more hosts', 'are')} not drawn here ({_e(', '.join(left[:20]))}"
                   f"{' …' if len(left) > 20 else ''}); draw one with "
                   "<code>witty-profiler diagnose GRAPH --host NAME --format html</code>.</p>")
    for p in pictures:
        out.append(f'<figure class="host" id="{_a(_host_anchor(p.host))}"><figcaption>{_e(p.host)}</figcaption>'
                   f'{p.svg}<p class="picked">Click an element to see what it is and which findings cite it.</p>'
                   "</figure>")
    out.append("</section>")
    return out


def _host_anchor(host: str) -> str:
    return "host-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in host)


def _elements(graph: Graph, pictures: list[Picture], ids: list[str]) -> list[str]:
    found: dict[str, None] = {}
    for p in pictures:
        for element in p.elements_of(graph, ids):
            found[element] = None
    return list(found)


def _findings(graph: Graph, report: Diagnosis, pictures: list[Picture]) -> list[str]:
    out = ['<section id="findings"><h2>Findings</h2>']
    if not report.findings:
        out.append("<p>No bottleneck found by the patterns that could be evaluated; the patterns that could not "
                   "be evaluated say nothing about their layer (see Coverage).</p>")
    for f in report.findings:
        out += _finding(graph, f, pictures)
    out.append("</section>")
    return out


def _finding(graph: Graph, f: Finding, pictures: list[Picture]) -> list[str]:
    cited = _elements(graph, pictures, [*f.subjects, *(i for e in f.evidence for i in e.ids)])
    out = [f'<article class="finding {f.priority}" id="finding-{_a(f.pattern)}" data-pattern="{_a(f.pattern)}">',
           f'<h3><span class="badge {f.priority}">{f.priority}</span> {_e(f.title)} '
           f"<small>({_e(f.severity)}, layer {f.layer} {_e(f.layer_name)}, <code>{_e(f.pattern)}</code>)</small></h3>",
           f"<p>{_e(f.description)}</p>"]
    if cited:
        out.append(f'<p><button type="button" class="show" data-cites="{_a(" ".join(cited))}">Show in the topology '
                   f"({len(cited)} {'element' if len(cited) == 1 else 'elements'})</button></p>")
    out += ['<table class="evidence"><thead><tr><th>kind</th><th>ids</th><th>metric</th><th>value</th>'
            "<th>threshold</th><th>note</th></tr></thead><tbody>"]
    out += [_evidence_row(graph, e, pictures) for e in f.evidence]
    out.append("</tbody></table>")
    if f.recommendations:
        out.append("<p>Recommendations (most effective first):</p><ol>"
                   + "".join(f"<li>{_e(r)}</li>" for r in f.recommendations) + "</ol>")
    if f.related:
        out.append("<p>Related: " + ", ".join(f'<a href="#finding-{_a(r)}"><code>{_e(r)}</code></a>'
                                              for r in f.related) + "</p>")
    out.append("</article>")
    return out


def _evidence_row(graph: Graph, e: Evidence, pictures: list[Picture]) -> str:
    links = []
    for eid in e.ids[:IDS_SHOWN]:
        elements = _elements(graph, pictures, [eid])
        if elements:
            links.append(f'<a class="cite" href="#{_a(elements[0])}" data-cites="{_a(" ".join(elements))}">'
                         f"<code>{_e(eid)}</code></a>")
        else:
            links.append(f"<code>{_e(eid)}</code>")
    if len(e.ids) > IDS_SHOWN:
        links.append(f"(+{len(e.ids) - IDS_SHOWN})")
    value = "" if e.value is None else evidence_value(e.value, e.unit)
    threshold = "" if e.threshold is None else evidence_value(e.threshold, e.unit)
    cells = [_e(e.kind), " ".join(links), _e(e.metric or ""), _e(value), _e(threshold), _e(e.note or "")]
    return "<tr>" + "".join(f'<td class="ids">{c}</td>' if i == 1 else f"<td>{c}</td>"
                            for i, c in enumerate(cells)) + "</tr>"


def _coverage(report: Diagnosis) -> list[str]:
    out = ['<section id="coverage"><h2>Coverage</h2>']
    for number, _, title in LAYERS:
        rows = [r for r in report.coverage if r.layer == number]
        if not rows:
            continue
        tally = {k: sum(r.status == k for r in rows) for k in ("finding", "clear", "not_evaluated")}
        out.append(f"<details><summary>Layer {number}: {_e(title)} &mdash; {counted(tally['finding'], 'findings')}, "
                   f"{tally['clear']} clear, {tally['not_evaluated']} not evaluated</summary><ul>")
        out += [f'<li class="{_a(r.status)}"><code>{_e(r.pattern)}</code> {_e(r.status.replace("_", " "))}: '
                f"{_e(r.reason)}</li>" for r in rows]
        out.append("</ul></details>")
    out.append("</section>")
    return out


def _collectors(report: Diagnosis) -> list[str]:
    collectors = report.summary.get("collectors") or {}
    out = ['<section id="collectors"><h2>Collectors</h2>']
    if not collectors:
        return out + ["<p>The graph records no collector status.</p></section>"]
    out.append("<table><thead><tr><th>collector</th><th>status</th><th>reason</th></tr></thead><tbody>")
    out += [f"<tr><td>{_e(name)}</td><td>{_e(c.get('status'))}</td><td>{_e(c.get('reason') or '')}</td></tr>"
            for name, c in collectors.items()]
    out.append("</tbody></table></section>")
    return out
