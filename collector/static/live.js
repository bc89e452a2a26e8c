// The dashboard's only script: auto-refresh (the page's [data-live] sections replaced by the same
// sections of a fresh copy fetched in the background: no reload, the picker and scroll stay), tables
// sorted by a click on a heading, and the custom range's UTC fields turned into since/until.
"use strict";
const REFRESH_MS = 5000;

function sortTable(table, column, th) {
  const body = table.tBodies[0];
  const ascending = th.dataset.order !== "asc";
  for (const other of table.tHead.rows[0].cells) delete other.dataset.order;
  th.dataset.order = ascending ? "asc" : "desc";
  const key = (row) => {
    const cell = row.cells[column];
    if (!cell) return "";
    const text = cell.dataset.value ?? cell.textContent.trim();
    const number = Number(text);
    return text !== "" && !Number.isNaN(number) ? number : text.toLowerCase();
  };
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
    return ascending ? order : -order;
  });
  rows.forEach((row) => body.appendChild(row));
}

function wireTables(root) {
  for (const table of root.querySelectorAll("table.sortable")) {
    Array.from(table.tHead.rows[0].cells).forEach((th, i) => {
      th.classList.add("sort");
      th.addEventListener("click", () => sortTable(table, i, th));
    });
  }
}

async function refresh() {
  const live = document.getElementById("live");
  if (!live || !live.checked || document.hidden) return;
  try {
    const answer = await fetch(location.href, { headers: { Accept: "text/html" } });
    if (!answer.ok) return;
    const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
    for (const section of document.querySelectorAll("[data-live]")) {
      const next = fresh.getElementById(section.id);
      if (!next) continue;
      const keep = live.closest("[data-live]") === section;
      if (keep) next.querySelector("#live")?.replaceWith(live);
      section.replaceChildren(...next.childNodes);
      wireTables(section);
    }
    document.body.dataset.refreshed = String(Date.now());
  } catch (e) {
    // the collector is restarting: try again at the next tick
  }
}

function wireRange() {
  const form = document.getElementById("range-picker");
  if (!form) return;
  form.addEventListener("submit", () => {
    for (const name of ["since", "until"]) {
      const local = document.getElementById(name + "-local").value;
      const hidden = document.getElementById(name);
      hidden.disabled = !local;
      if (local) hidden.value = String(Date.parse(local + "Z") / 1000);
    }
  });
}

wireTables(document);
wireRange();
setInterval(refresh, REFRESH_MS);
