/* How the chat page shows a reply: the Markdown models write (fenced code, headings, lists, quotes, tables, rules,
   `code`, **bold**, *emphasis*, [links](https://...)) as elements, every piece of text set as text (textContent),
   never read as HTML; a link only where it is http(s). What it does not know stays as it was written. A reply is
   shown again whole as each piece streams in, so an unclosed ** or ``` shows as it is until it closes.
   Runs in the browser before chat.js, and in Node (tests/test_webui.py). */
"use strict";

/* A reply's text in pieces: prose, and code between ``` fences (one not closed yet runs to the end):
   [{code: false, text}, {code: true, lang, text}, ...]. */
function pieces(text) {
  const out = [];
  const fence = /^```([^\n`]*)\n([\s\S]*?)(?:^```[ \t]*$\n?|(?![\s\S]))/gm;
  let at = 0, m;
  while ((m = fence.exec(text)) !== null) {
    if (m.index > at) out.push({code: false, text: text.slice(at, m.index)});
    out.push({code: true, lang: m[1].trim(), text: m[2].replace(/\n$/, "")});
    at = fence.lastIndex;
    if (m[0] === "") fence.lastIndex++;
  }
  if (at < text.length) out.push({code: false, text: text.slice(at)});
  return out;
}

// inline: `code`, **strong** / __strong__, *em* / _em_, [text](http(s) url); the first that opens wins
const INLINE = String.raw`(\x60+)([^\x60][\s\S]*?)\1(?!\x60)|\*\*(?=\S)([\s\S]*?\S)\*\*|__(?=\S)([\s\S]*?\S)__(?!\w)` +
  String.raw`|\*(?=[^\s*])([\s\S]*?[^\s*])\*|(?<!\w)_(?=[^\s_])([\s\S]*?[^\s_])_(?!\w)` +
  String.raw`|\[([^\]\n]+)\]\((https?:\/\/[^\s()]+)\)`;

/* Text with inline marks: [{t: "text" | "code", text} | {t: "strong" | "em", kids} | {t: "link", href, kids}]. */
function inline(text) {
  const re = new RegExp(INLINE, "g");
  const out = [];
  let at = 0, m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > at) out.push({t: "text", text: text.slice(at, m.index)});
    if (m[1]) out.push({t: "code", text: m[2].replace(/^ (.*) $/, "$1")});
    else if (m[3] || m[4]) out.push({t: "strong", kids: inline(m[3] || m[4])});
    else if (m[5] || m[6]) out.push({t: "em", kids: inline(m[5] || m[6])});
    else out.push({t: "link", href: m[8], kids: inline(m[7])});
    at = re.lastIndex;
  }
  if (at < text.length) out.push({t: "text", text: text.slice(at)});
  return out;
}

const RULE_ROW = /^ *\|? *:?-{2,}:? *(\| *:?-{2,}:? *)*\|? *$/;  // a table's line under its head
const cells = (line) => line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => inline(c.trim()));

/* Prose in blocks: {b: "p" | "quote", kids} (lines kept), {b: "h", level, kids}, {b: "ul" | "ol", start, items},
   {b: "table", head, rows}, {b: "hr"}. */
function blocks(text) {
  const lines = text.split("\n");
  const out = [];
  let para = null, quote = null, list = null;
  const end = () => { para = quote = list = null; };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      end();
    } else if (/^ {0,3}([-*_])( *\1){2,} *$/.test(line)) {
      end();
      out.push({b: "hr"});
    } else if ((m = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {
      end();
      out.push({b: "h", level: m[1].length, kids: inline(m[2])});
    } else if (line.includes("|") && i + 1 < lines.length && RULE_ROW.test(lines[i + 1])) {
      end();
      const table = {b: "table", head: cells(line), rows: []};
      for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim(); i++) table.rows.push(cells(lines[i]));
      i--;
      out.push(table);
    } else if ((m = /^(\s*)(?:([-*+])|(\d{1,9})[.)])\s+(.*)$/.exec(line))) {
      const kind = m[2] ? "ul" : "ol";
      if (!list || list.b !== kind) {
        end();
        list = {b: kind, start: m[3] ? Number(m[3]) : 1, items: []};
        out.push(list);
      }
      list.items.push({depth: Math.min(3, Math.floor(m[1].replace(/\t/g, "    ").length / 2)), text: m[4]});
    } else if ((m = /^ {0,3}> ?(.*)$/.exec(line))) {
      if (!quote) {
        end();
        quote = {b: "quote", text: []};
        out.push(quote);
      }
      quote.text.push(m[1]);
    } else if (list && /^\s+\S/.test(line)) {
      list.items[list.items.length - 1].text += `\n${line.trim()}`;  // an item's line that goes on
    } else {
      if (!para) {
        end();
        para = {b: "p", text: []};
        out.push(para);
      }
      para.text.push(line);
    }
  }
  return out.map((b) => {
    if (b.b === "p" || b.b === "quote") return {b: b.b, kids: inline(b.text.join("\n"))};
    if (b.b === "ul" || b.b === "ol") {
      return {...b, items: b.items.map((it) => ({depth: it.depth, kids: inline(it.text)}))};
    }
    return b;
  });
}

/* A reply's text as elements of `doc`, ready to append. */
function markdownNodes(doc, text) {
  const el = (tag, cls, content) => {
    const e = doc.createElement(tag);
    if (cls) e.className = cls;
    if (content !== undefined) e.textContent = content;
    return e;
  };
  const marks = (kids) => kids.map((k) => {
    if (k.t === "text") return doc.createTextNode(k.text);
    if (k.t === "code") return el("code", "", k.text);
    const e = el(k.t === "link" ? "a" : k.t);
    if (k.t === "link") {
      e.href = k.href;
      e.target = "_blank";
      e.rel = "noopener noreferrer";
    }
    e.append(...marks(k.kids));
    return e;
  });
  const nodes = [];
  for (const p of pieces(text)) {
    if (p.code) {
      const pre = el("pre", "code");
      pre.append(el("code", "", p.text));
      if (p.lang) pre.dataset.lang = p.lang;
      nodes.push(pre);
      continue;
    }
    for (const b of blocks(p.text)) {
      let e;
      if (b.b === "hr") e = el("hr");
      else if (b.b === "h") (e = el(`h${b.level}`)).append(...marks(b.kids));
      else if (b.b === "p") (e = el("p")).append(...marks(b.kids));
      else if (b.b === "quote") (e = el("blockquote")).append(...marks(b.kids));
      else if (b.b === "table") {
        e = el("table");
        const head = el("tr");
        head.append(...b.head.map((c) => { const th = el("th"); th.append(...marks(c)); return th; }));
        e.append(head, ...b.rows.map((r) => {
          const tr = el("tr");
          tr.append(...r.map((c) => { const td = el("td"); td.append(...marks(c)); return td; }));
          return tr;
        }));
      } else {
        e = el(b.b);
        if (b.b === "ol" && b.start !== 1) e.start = b.start;
        e.append(...b.items.map((it) => {
          const li = el("li");
          if (it.depth) li.style.marginLeft = `${1.2 * it.depth}em`;
          li.append(...marks(it.kids));
          return li;
        }));
      }
      nodes.push(e);
    }
  }
  return nodes;
}

if (typeof module !== "undefined" && module.exports) module.exports = {pieces, inline, blocks, markdownNodes};
