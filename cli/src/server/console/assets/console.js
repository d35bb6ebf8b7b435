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
      if (next && next.innerHTML !== main.innerHTML) {
        main.innerHTML = next.innerHTML;
        if (focused && document.getElementById(focused)) {
          document.getElementById(focused).focus();
        }
      }
    }
    window.setTimeout(tick, every);
  };
  window.setTimeout(tick, every);
})();
