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
