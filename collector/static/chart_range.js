// The stream page's chart: a range dragged across it shows that range (the page again with since and
// until, at its flame graph when it has one); a click on an interval's column follows its link, the
// same for one interval. Times come from the chart's own data-t0/t1 between data-x0/x1 (collector/chart.py).
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const MOVED_PX = 4;  // less than this between press and release is a click, not a range
  let drag = null;
  let swallowClick = false;

  function at(svg, clientX) {
    const box = svg.getBoundingClientRect();
    const x = (clientX - box.left) * svg.viewBox.baseVal.width / box.width;
    const x0 = Number(svg.dataset.x0), x1 = Number(svg.dataset.x1);
    const share = Math.min(1, Math.max(0, (x - x0) / (x1 - x0)));
    return { x: x0 + share * (x1 - x0), t: Number(svg.dataset.t0) + share * (Number(svg.dataset.t1) - Number(svg.dataset.t0)) };
  }

  function show(svg, rect, a, b) {
    rect.setAttribute("x", String(Math.min(a.x, b.x)));
    rect.setAttribute("width", String(Math.abs(b.x - a.x)));
  }

  document.addEventListener("mousedown", (e) => {
    const svg = e.button === 0 && e.target.closest ? e.target.closest("#chart-box svg.chart[data-t0]") : null;
    if (!svg) return;
    const start = at(svg, e.clientX);
    const rect = document.createElementNS(SVG, "rect");
    rect.setAttribute("class", "selection");
    rect.setAttribute("y", svg.querySelector("rect").getAttribute("y"));
    rect.setAttribute("height", svg.querySelector("rect").getAttribute("height"));
    rect.setAttribute("fill", "#1f77b4");
    rect.setAttribute("fill-opacity", "0.2");
    rect.setAttribute("pointer-events", "none");
    svg.appendChild(rect);
    drag = { svg, rect, start, pressX: e.clientX, moved: false };
    show(svg, rect, start, start);
    e.preventDefault();  // no text selection while dragging
  });

  document.addEventListener("mousemove", (e) => {
    if (!drag) return;
    drag.moved = drag.moved || Math.abs(e.clientX - drag.pressX) >= MOVED_PX;
    show(drag.svg, drag.rect, drag.start, at(drag.svg, e.clientX));
  });

  document.addEventListener("mouseup", (e) => {
    if (!drag) return;
    const { svg, rect, start, moved } = drag;
    drag = null;
    if (!moved) {
      rect.remove();  // a click: an interval's link, if it is on one
      return;
    }
    swallowClick = true;
    const end = at(svg, e.clientX);
    const url = new URL(location.href);
    for (const name of ["range", "page"]) url.searchParams.delete(name);
    url.searchParams.set("since", Math.min(start.t, end.t).toFixed(3));
    url.searchParams.set("until", Math.max(start.t, end.t).toFixed(3));
    url.hash = document.getElementById("flame") ? "flame" : "chart-box";
    location.assign(url.toString());
  });

  document.addEventListener("click", (e) => {
    if (swallowClick) {  // the release of a drag over a link is not a click on it
      swallowClick = false;
      e.preventDefault();
      e.stopPropagation();
    }
  }, true);
})();
