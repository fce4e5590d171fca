// Playback of a timeline: the scrubber (or Play) widens the clip of the drawn lanes and
// moves the cursor, so the thread unrolls as it happened; the real span is played in at
// most 20 seconds.
"use strict";
(function () {
  const svg = document.querySelector("svg.timeline");
  const scrub = document.getElementById("scrub");
  const play = document.getElementById("play");
  const clock = document.getElementById("clock");
  if (!svg || !scrub) return;
  const span = parseFloat(svg.dataset.span);
  const left = parseFloat(svg.dataset.left);
  const inner = parseFloat(svg.dataset.inner);
  const rect = document.getElementById("played-rect");
  const cursor = document.getElementById("cursor");
  let timer = null;

  function show(fraction) {
    const x = left + fraction * inner;
    rect.setAttribute("width", String(x));
    cursor.setAttribute("x1", String(x));
    cursor.setAttribute("x2", String(x));
    clock.textContent = "+" + (fraction * span).toFixed(1) + " s of " + span.toFixed(1) + " s";
  }

  scrub.addEventListener("input", () => show(scrub.value / 1000));
  play.addEventListener("click", () => {
    if (timer) { clearInterval(timer); timer = null; play.textContent = "▶ Play"; return; }
    const seconds = Math.min(Math.max(span, 3), 20);
    const step = 1000 / (seconds * 20);
    if (scrub.value >= 1000) scrub.value = 0;
    play.textContent = "⏸ Pause";
    timer = setInterval(() => {
      scrub.value = Math.min(1000, Number(scrub.value) + step);
      show(scrub.value / 1000);
      if (scrub.value >= 1000) { clearInterval(timer); timer = null; play.textContent = "▶ Play"; }
    }, 50);
  });
  show(1);
})();
