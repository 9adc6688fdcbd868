// The article header's "Contents" (list) button opens the page's table of contents wherever that sits in a drawer
// (below 1600 px, book.css). pydata-sphinx-theme binds only the first `.secondary-toggle` of the page, the site
// header's, which sphinx-book-theme hides: the visible button forwards its clicks to it.
document.addEventListener("DOMContentLoaded", () => {
  const [bound, ...others] = document.querySelectorAll(".secondary-toggle");
  for (const button of others) {
    button.addEventListener("click", (event) => {
      event.preventDefault();
      bound.click();
    });
  }
});

// The navigation's expand arrows (a <summary> holding only an icon) get a name that screen readers announce:
// "Sections of" and the chapter's title (axe-core: summary-name).
document.addEventListener("DOMContentLoaded", () => {
  for (const summary of document.querySelectorAll("nav li.has-children > details > summary")) {
    const link = summary.parentElement.previousElementSibling;
    if (!summary.textContent.trim() && !summary.hasAttribute("aria-label") && link) {
      summary.setAttribute("aria-label", `Sections of ${link.textContent.trim()}`);
    }
  }
});

// The bibliography: sphinxcontrib-bibtex marks its list role="list" and each entry role="doc-biblioentry", a role
// ARIA has deprecated and that a list cannot hold; screen readers then find a list without items. The entries
// become its list items (axe-core: aria-required-children).
document.addEventListener("DOMContentLoaded", () => {
  for (const entry of document.querySelectorAll('[role="list"] > [role="doc-biblioentry"]')) {
    entry.setAttribute("role", "listitem");
  }
});

// A display equation wider than its box scrolls inside it (book.css); keyboard users reach it with Tab and scroll
// it with the arrow keys (axe-core: scrollable-region-focusable). Measured once MathJax has typeset the page and
// again when the window changes size.
function focusableWideEquations() {
  for (const box of document.querySelectorAll('.bd-article mjx-container[display="true"], .bd-article div.math')) {
    if (box.scrollWidth > box.clientWidth + 1) {
      box.setAttribute("tabindex", "0");
    } else if (box.getAttribute("tabindex") === "0") {
      box.removeAttribute("tabindex");
    }
  }
}
window.addEventListener("load", () => {
  const typeset = window.MathJax && window.MathJax.startup && window.MathJax.startup.promise;
  (typeset || Promise.resolve()).then(focusableWideEquations);
  let pending = null;
  window.addEventListener("resize", () => {
    clearTimeout(pending);
    pending = setTimeout(focusableWideEquations, 200);
  });
});

// A table in a `cards-on-phone` container is shown as one card per row on a phone (book.css): each cell gets its
// column's head as a label, which the stylesheet writes before the cell's text. A code cell whose output is such a
// table carries the cell tag `cards-on-phone` (myst-nb writes it as the class `tag_cards-on-phone`).
document.addEventListener("DOMContentLoaded", () => {
  for (const cell of document.querySelectorAll(".tag_cards-on-phone")) {
    cell.classList.add("cards-on-phone");
  }
  for (const table of document.querySelectorAll(".cards-on-phone table")) {
    const heads = Array.from(table.querySelectorAll("thead th"), (th) => th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {
      row.querySelectorAll("td").forEach((cell, column) => {
        if (heads[column]) cell.dataset.label = heads[column];
        // A card headed by a bare number (chapter 8's beam width K) says which number it is: "K = 4".
        if (column === 0 && heads[0] && /^[-+]?[\d.,]+%?$/.test(cell.textContent.trim())) {
          cell.classList.add("card-number-head");
        }
      });
    }
  }
});
