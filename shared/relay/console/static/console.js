// Relay console: keep each [data-live] part of the page current without a reload.
// Every few seconds the part is asked again with the ETag of what it shows; the console answers
// 304 when nothing changed. When something did, only the elements whose HTML changed are
// replaced: elements with the same data-key and the same HTML are left as they are.
(function () {
  "use strict";
  const every = Number(document.body.dataset.refresh || 0) * 1000;
  window.relayConsole = { swaps: 0, polls: 0 };

  function shell(a, b) {
    return a.tagName === b.tagName && a.cloneNode(false).isEqualNode(b.cloneNode(false));
  }

  // Bring `old` to `neu`'s content; returns the element now in the page.
  function merge(old, neu) {
    if (old.isEqualNode(neu)) return old;
    const kids = Array.from(neu.children);
    const keyed = kids.length > 0 && kids.every((k) => k.dataset.key !== undefined) &&
      neu.childElementCount === neu.childNodes.length - countBlank(neu) && shell(old, neu);
    if (!keyed) { old.replaceWith(neu); return neu; }
    const before = new Map();
    for (const k of Array.from(old.children)) if (k.dataset.key !== undefined) before.set(k.dataset.key, k);
    const result = kids.map((k) => {
      const was = before.get(k.dataset.key);
      return was ? merge(was, k) : k;
    });
    const current = Array.from(old.children);
    const same = result.length === current.length && result.every((k, i) => current[i] === k);
    if (!same) old.replaceChildren(...result);
    return old;
  }

  function countBlank(node) {
    let n = 0;
    for (const c of node.childNodes) if (c.nodeType === Node.TEXT_NODE && !c.textContent.trim()) n++;
    return n;
  }

  function watch(box) {
    let etag = box.dataset.etag || "";
    const url = box.dataset.live;
    async function poll() {
      try {
        const answer = await fetch(url, {
          headers: etag ? { "If-None-Match": etag } : {},
          credentials: "same-origin",
          cache: "no-store",
        });
        window.relayConsole.polls++;
        if (answer.status === 200) {
          const fresh = answer.headers.get("ETag") || "";
          const html = await answer.text();
          const neu = box.cloneNode(false);
          neu.innerHTML = html;
          box = merge(box, neu);
          window.relayConsole.swaps++;
          etag = fresh;
        }
      } catch (e) {
        // the console is restarting or unreachable: try again at the next poll
      }
      window.setTimeout(poll, every);
    }
    window.setTimeout(poll, every);
  }

  if (every > 0) document.querySelectorAll("[data-live]").forEach(watch);
})();
