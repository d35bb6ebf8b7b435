// The Anycloud console's only script (served from /ui/assets, as the Content-Security-Policy
// allows no inline script): confirmation of actions, and live pages.
"use strict";

// A form with data-confirm asks before it is sent.
document.addEventListener("submit", (event) => {
  const question = event.target.getAttribute("data-confirm");
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
});

// A live page fetches itself every data-live ms and swaps its <main>, keeping focus and
// scroll; it waits while the tab is hidden or a field of the page has the focus, and stops on
// the first answer that is not a page.
(function live() {
  const main = document.getElementById("main");
  const every = main && Number(main.getAttribute("data-live"));
  if (!every) {
    return;
  }
  const tick = async () => {
    const typing = document.activeElement && main.contains(document.activeElement)
      && ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
    // Never while the tab is hidden, nor under someone filling in a field of the page.
    if (!document.hidden && !typing) {
      const answer = await fetch(window.location.href, { credentials: "same-origin", cache: "no-store" });
      if (!answer.ok) {
        return;
      }
      const next = new DOMParser().parseFromString(await answer.text(), "text/html").getElementById("main");
      const focused = document.activeElement && document.activeElement.id;
      // What the page holds for itself (a followed log) is compared empty and kept as it is.
      const kept = main.querySelector("[data-keep]");
      const shown = main.cloneNode(true);
      const shownKept = shown.querySelector("[data-keep]");
      if (shownKept) {
        shownKept.textContent = "";
      }
      if (next && next.innerHTML !== shown.innerHTML) {
        main.innerHTML = next.innerHTML;
        const slot = main.querySelector("[data-keep]");
        if (kept && slot) {
          slot.replaceWith(kept);
        }
        if (focused && document.getElementById(focused)) {
          document.getElementById(focused).focus();
        }
      }
    }
    window.setTimeout(tick, every);
  };
  window.setTimeout(tick, every);
})();

// A <pre data-follow="URL"> shows URL's text as it streams in (a job's logs), and keeps it.
(function follow() {
  const pre = document.querySelector("pre[data-follow]");
  if (!pre) {
    return;
  }
  (async () => {
    // A job not started yet answers 409: ask again every second until it has.
    let answer = null;
    for (let tries = 0; tries < 300; tries += 1) {
      answer = await fetch(pre.getAttribute("data-follow"), { credentials: "same-origin" });
      if (answer.status !== 409) {
        break;
      }
      await new Promise((done) => window.setTimeout(done, 1000));
    }
    if (!answer.ok || !answer.body) {
      pre.textContent = "The logs cannot be shown now (" + answer.status + ").";
      return;
    }
    const reader = answer.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        break;
      }
      pre.textContent += decoder.decode(value, { stream: true });
    }
  })();
})();
